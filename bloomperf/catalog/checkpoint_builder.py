"""A random-weight BLOOM checkpoint, written as ``save_pretrained`` lays it out.

Deterministic: the same shape, layers and seed give the same bytes. Values are generated and
streamed to disk chunk by chunk, so the peak memory is a few chunks whatever the shape.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bloomperf.catalog.dtypes import TORCH_BYTES
from bloomperf.catalog.models import ModelShape, bloom_config, generation_config
from bloomperf.catalog.tokenizer import TOKENIZER_VOCAB_SIZE, tokenizer_files
from bloomperf.core.progress import ByteProgress

# Bump when the bytes a build writes change (init scheme, tokenizer corpus, file layout): the
# cache folder name hashes it, so stale checkpoints are never reused.
BUILDER_VERSION = 3

MAX_SHARD_BYTES = 2 * 1024**3
# Random values are generated and written this many elements at a time, on BUILD_THREADS
# threads, so building a 7 GB embedding holds only a few chunks in memory. Part of the byte
# layout (see BUILDER_VERSION): each chunk has its own seed.
CHUNK_ELEMENTS = 1 << 24
BUILD_THREADS = 8

# safetensors' names of the torch dtypes a checkpoint is built in.
SAFETENSORS_CODES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def build_checkpoint(shape: ModelShape, layers: int | None, folder: Path, seed: int = 0) -> None:
    """Write a random-weight BLOOM checkpoint (config, weights, tokenizer) into ``folder``.

    Deterministic: the same shape, layers and seed give the same bytes.
    """
    n_layer = shape.n_layer if layers is None else layers
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", bloom_config(shape, n_layer))
    write_json(folder / "generation_config.json", generation_config())
    write_weights(shape, n_layer, folder, seed)
    write_tokenizer(folder, min(TOKENIZER_VOCAB_SIZE, shape.vocab_size))


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    init: str  # "normal", "ones" or "zeros"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def tensor_specs(shape: ModelShape, layers: int) -> list[TensorSpec]:
    """BloomForCausalLM's saved tensors in state-dict order; lm_head is tied, so not saved."""
    h = shape.hidden_size
    specs = [TensorSpec("transformer.word_embeddings.weight", (shape.vocab_size, h), "normal")]
    specs += layernorm_specs("transformer.word_embeddings_layernorm", h)
    for i in range(layers):
        block = f"transformer.h.{i}"
        specs += layernorm_specs(f"{block}.input_layernorm", h)
        specs += linear_specs(f"{block}.self_attention.query_key_value", h, 3 * h)
        specs += linear_specs(f"{block}.self_attention.dense", h, h)
        specs += layernorm_specs(f"{block}.post_attention_layernorm", h)
        specs += linear_specs(f"{block}.mlp.dense_h_to_4h", h, 4 * h)
        specs += linear_specs(f"{block}.mlp.dense_4h_to_h", 4 * h, h)
    specs += layernorm_specs("transformer.ln_f", h)
    return specs


def layernorm_specs(prefix: str, h: int) -> list[TensorSpec]:
    return [
        TensorSpec(f"{prefix}.weight", (h,), "ones"),
        TensorSpec(f"{prefix}.bias", (h,), "zeros"),
    ]


def linear_specs(prefix: str, n_in: int, n_out: int) -> list[TensorSpec]:
    return [
        TensorSpec(f"{prefix}.weight", (n_out, n_in), "normal"),
        TensorSpec(f"{prefix}.bias", (n_out,), "zeros"),
    ]


def write_weights(shape: ModelShape, layers: int, folder: Path, seed: int) -> None:
    """Sharded safetensors as save_pretrained lays them out, streamed to disk chunk by chunk.

    save_pretrained would need the whole model in memory first (12 GB for bloom-176b with one
    layer) plus a copy per shard; here the peak is one chunk whatever the shape.
    """
    fill = Fill(shape.checkpoint_dtype, shape.initializer_range, seed)
    item = TORCH_BYTES[fill.dtype]
    shards = split_shards(tensor_specs(shape, layers), item)
    names = [plan.name for plan in plan_shards(shape, layers)]
    total = sum(s.numel for specs in shards for s in specs) * item
    progress = ByteProgress(f"building {shape.name} ({layers} layers)", total)
    try:
        for file_name, specs in zip(names, shards, strict=True):
            write_shard(folder / file_name, specs, fill, progress)
    finally:
        progress.close()
    if len(shards) > 1:
        weight_map = {s.name: f for f, specs in zip(names, shards, strict=True) for s in specs}
        write_json(
            folder / "model.safetensors.index.json",
            {"metadata": {"total_size": total}, "weight_map": weight_map},
        )


def split_shards(specs: list[TensorSpec], item: int) -> list[list[TensorSpec]]:
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        nbytes = spec.numel * item
        if shards[-1] and size + nbytes > MAX_SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += nbytes
    return shards


@dataclass(frozen=True)
class Fill:
    """How the values of a checkpoint are drawn."""

    dtype: str  # a torch dtype name
    std: float  # of the "normal" tensors
    seed: int


def write_shard(
    path: Path, specs: list[TensorSpec], fill: Fill, progress: ByteProgress | None = None
) -> None:
    """One safetensors file: 8-byte header length, JSON header, then the raw tensors."""
    with open(path, "wb") as f:
        f.write(shard_header(specs, fill.dtype))
        write_values(f, specs, fill, progress)


def shard_header(specs: list[TensorSpec], dtype: str) -> bytes:
    """A shard's first bytes: its header's length (8 bytes, little-endian), then the header."""
    code, item = SAFETENSORS_CODES[dtype], TORCH_BYTES[dtype]
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec in specs:
        end = offset + spec.numel * item
        header[spec.name] = {
            "dtype": code,
            "shape": list(spec.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(encoded)) + encoded


@dataclass(frozen=True)
class ShardPlan:
    """One weight file a build writes: its name, header bytes and total size."""

    name: str
    header: bytes
    size: int


def plan_shards(shape: ModelShape, layers: int) -> list[ShardPlan]:
    """The weight files a build of ``shape`` with ``layers`` blocks writes (no values drawn)."""
    dtype = shape.checkpoint_dtype
    item = TORCH_BYTES[dtype]
    shards = split_shards(tensor_specs(shape, layers), item)
    if len(shards) == 1:
        names = ["model.safetensors"]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    plans = []
    for name, specs in zip(names, shards, strict=True):
        header = shard_header(specs, dtype)
        plans.append(ShardPlan(name, header, len(header) + sum(s.numel for s in specs) * item))
    return plans


@dataclass(frozen=True)
class Chunk:
    spec: TensorSpec
    index: int
    count: int


def write_values(
    f: IO[bytes], specs: list[TensorSpec], fill: Fill, progress: ByteProgress | None = None
) -> None:
    """Generate chunks on a few threads (torch releases the GIL), write them in order.

    Random generation runs at ~100-200 M values/s per core, so one thread would spend a minute
    on bloom-7b1; the bounded look-ahead keeps memory at a few chunks.
    """
    chunks = [
        Chunk(spec, index, min(CHUNK_ELEMENTS, spec.numel - start))
        for spec in specs
        for index, start in enumerate(range(0, spec.numel, CHUNK_ELEMENTS))
    ]
    workers = min(BUILD_THREADS, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[Any]] = deque()
        for chunk in chunks:
            pending.append(pool.submit(chunk_values, chunk, fill))
            if len(pending) > 2 * workers:
                write_chunk(f, pending.popleft().result(), progress)
        while pending:
            write_chunk(f, pending.popleft().result(), progress)


def write_chunk(f: IO[bytes], values: Any, progress: ByteProgress | None) -> None:
    data = as_bytes(values)
    f.write(data)
    if progress is not None:
        progress.advance(data.nbytes)


def chunk_values(chunk: Chunk, fill: Fill) -> Any:
    """One chunk's values. Each chunk has its own seed (from the tensor name and chunk index), so
    chunks can be generated in parallel and a truncated model's layers equal the full model's."""
    torch = _torch()
    torch_dtype = getattr(torch, fill.dtype)
    if chunk.spec.init == "ones":
        return torch.ones(chunk.count, dtype=torch_dtype)
    if chunk.spec.init == "zeros":
        return torch.zeros(chunk.count, dtype=torch_dtype)
    generator = torch.Generator().manual_seed(chunk_seed(fill.seed, chunk.spec.name, chunk.index))
    return torch.randn(chunk.count, dtype=torch_dtype, generator=generator).mul_(fill.std)


def as_bytes(values: Any) -> Any:
    return values.view(_torch().uint8).numpy()  # a view: no copy of the chunk


def chunk_seed(seed: int, name: str, index: int) -> int:
    digest = hashlib.sha256(f"{seed}:{name}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _torch() -> Any:
    # Imported on first use: resolving an already-built model must stay cheap for the controller.
    import torch

    return torch


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    for name, data in tokenizer_files(vocab_size).items():
        write_json(folder / name, data)


def write_json(path: Path, data: dict[str, Any]) -> None:
    # Checkpoint files are built in a private temporary folder, renamed into place as a whole.
    path.write_bytes(json_bytes(data))


def json_bytes(data: dict[str, Any]) -> bytes:
    """A checkpoint's JSON file as the build writes it (the manifest predicts config.json)."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
