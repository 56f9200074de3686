"""BLOOM shapes and the random-weight checkpoints every benchmark runs on.

A registry shape (``tiny`` … ``bloom-176b``) is built once into the cache as an ordinary Hugging
Face checkpoint folder (config.json, safetensors shards, tokenizer files), so every backend loads
it exactly as it would load the real weights. Speed and memory depend on the shape, not on the
values, so random weights from a fixed seed measure the same thing as the trained ones.
``--model`` also takes a local checkpoint folder or a hub id that is already in the local cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bloomperf.errors import BloomperfError
from bloomperf.jsonfile import parse_json_text
from bloomperf.names import MODEL_NAME, check_model_name
from bloomperf.progress import ByteProgress
from bloomperf.workload import PROMPTS

# Bump when the bytes a build writes change (init scheme, tokenizer corpus, file layout): the
# cache folder name hashes it, so stale checkpoints are never reused.
BUILDER_VERSION = 3

# BLOOM's special token ids; the config and the tokenizer must agree on them.
SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = range(4)

MAX_SHARD_BYTES = 2 * 1024**3
# Random values are generated and written this many elements at a time, on BUILD_THREADS
# threads, so building a 7 GB embedding holds only a few chunks in memory. Part of the byte
# layout (see BUILDER_VERSION): each chunk has its own seed.
CHUNK_ELEMENTS = 1 << 24
BUILD_THREADS = 8

# With the usual 0.02 the layers barely perturb the (tied) embedding, and greedy decoding repeats
# the last prompt token forever. std = 5/sqrt(hidden) gives every projection an output of a few
# units whatever the width (0.625 at hidden 64, 0.042 at 14336), so the activations stay far
# inside fp16's range and tokens vary: bloom-560m with 2 layers gave 8 to 30 distinct tokens in
# 30 greedy ones per blog prompt (1 to 7 with 2.4/sqrt(hidden)); tiny 14 on average over 6 seeds.
# A random net still falls into a short cycle on some prompts (tiny: about 1 row in 6).
INIT_SCALE = 5.0

_DTYPE_CODES = {"float32": ("F32", 4), "bfloat16": ("BF16", 2), "float16": ("F16", 2)}


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    n_layer: int
    n_head: int
    vocab_size: int
    # What the built checkpoint stores; backends cast to the dtype they benchmark.
    checkpoint_dtype: str = "bfloat16"

    def parameters(self, layers: int | None = None) -> int:
        """Exact parameter count of BloomForCausalLM (lm_head is tied to the embedding)."""
        n_layer = self.n_layer if layers is None else layers
        return count_parameters(self.hidden_size, n_layer, self.vocab_size)

    @property
    def initializer_range(self) -> float:
        return round(INIT_SCALE / math.sqrt(self.hidden_size), 4)


def block_matmul_parameters(hidden: int) -> int:
    """One block's matmul weights: qkv 3h², dense h², mlp 4h² and 4h² (the part int8 quantises)."""
    return 12 * hidden * hidden


def block_other_parameters(hidden: int) -> int:
    """One block's biases (qkv 3h, dense h, mlp 4h and h) and two layernorms (4h)."""
    return 13 * hidden


def count_parameters(hidden: int, n_layer: int, vocab: int, tied: bool = True) -> int:
    per_layer = block_matmul_parameters(hidden) + block_other_parameters(hidden)
    # Embedding plus its layernorm (2h) and the final layernorm (2h).
    total = n_layer * per_layer + vocab * hidden + 4 * hidden
    return total if tied else total + vocab * hidden


# Real configs of bigscience/bloom-*; ``tiny`` is ours: small enough for a CPU test suite.
MODEL_SHAPES: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        ModelShape("tiny", 64, 2, 4, 1024, checkpoint_dtype="float32"),
        ModelShape("bloom-560m", 1024, 24, 16, 250880),
        ModelShape("bloom-1b1", 1536, 24, 16, 250880),
        ModelShape("bloom-1b7", 2048, 24, 16, 250880),
        ModelShape("bloom-3b", 2560, 30, 32, 250880),
        ModelShape("bloom-7b1", 4096, 30, 32, 250880),
        ModelShape("bloom-176b", 14336, 70, 112, 250880),
    )
}

TOKENIZER_VOCAB_SIZE = MODEL_SHAPES["tiny"].vocab_size
# Byte-level BPE starts from all 256 bytes plus BLOOM's 4 special tokens.
MIN_TOKENIZER_VOCAB = 256 + len(SPECIAL_TOKENS)


@dataclass(frozen=True)
class PreparedModel:
    name: str  # registry name, or the path / hub id given
    path: Path  # folder with config.json, *.safetensors, tokenizer files
    layers: int
    parameters: int
    shape: ModelShape | None  # None for an external checkpoint whose config is no registry shape


def default_cache_dir() -> Path:
    """``$BLOOMPERF_CACHE``, else ``$XDG_CACHE_HOME/bloomperf``, else ``~/.cache/bloomperf``."""
    env = os.environ.get("BLOOMPERF_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "bloomperf"


def resolve_model(
    name: str, layers: int | None = None, cache_dir: Path | str | None = None
) -> PreparedModel:
    """Turn a ``--model`` value into a checkpoint folder, building a registry shape if needed."""
    if name in MODEL_SHAPES:
        cache = Path(cache_dir) if cache_dir else default_cache_dir()
        return prepare_shape(MODEL_SHAPES[name], layers, cache)
    folder = Path(name).expanduser()
    if folder.is_dir():
        # Results and baselines carry the model's name, which becomes part of a file name:
        # a local folder is named by its last part (its path is recorded beside it).
        plain = folder.resolve().name if not MODEL_NAME.fullmatch(name) else name
        return prepare_external(check_model_name(plain, "--model"), folder, layers)
    snapshot = find_cached_snapshot(name)
    if snapshot is None:
        known = ", ".join(MODEL_SHAPES)
        raise BloomperfError(
            f"--model: {name!r} is not a known shape ({known}), a local checkpoint folder, "
            "or a hub id in the local cache"
        )
    return prepare_external(name, snapshot, layers)


def prepare_shape(shape: ModelShape, layers: int | None, cache_dir: Path) -> PreparedModel:
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    folder = cache_dir / "models" / checkpoint_folder_name(shape, n_layer)
    if not folder.is_dir():
        build_into_cache(shape, n_layer, folder)
    return PreparedModel(shape.name, folder, n_layer, shape.parameters(n_layer), shape)


def check_layers(layers: int | None, n_layer: int, what: str) -> int:
    if layers is None:
        return n_layer
    if not 1 <= layers <= n_layer:
        raise BloomperfError(f"--layers: {layers} is out of range for {what} (1 to {n_layer})")
    return layers


def checkpoint_folder_name(shape: ModelShape, layers: int, seed: int = 0) -> str:
    """``<name>[-L<layers>]-<hash>``: the hash changes with anything that changes the bytes."""
    key = json.dumps(
        {"config": bloom_config(shape, layers), "seed": seed, "builder": BUILDER_VERSION},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    truncated = f"-L{layers}" if layers != shape.n_layer else ""
    return f"{shape.name}{truncated}-{digest}"


def build_into_cache(shape: ModelShape, layers: int, folder: Path) -> None:
    """Build under a lock, so two processes asking for the same model build it once."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if folder.is_dir():  # another process built it while we waited
                return
            remove_stale_partials(folder)
            check_free_space(shape, layers, folder.parent)
            started = time.perf_counter()
            build_and_rename(shape, layers, folder)
    except OSError as exc:
        raise BloomperfError(
            f"--model: cannot build {shape.name} in {folder.parent}: {exc}"
        ) from None
    elapsed = time.perf_counter() - started
    print(
        f"bloomperf: built {shape.name} ({layers} layers) in {elapsed:.1f} s: {folder}",
        file=sys.stderr,
    )


def build_and_rename(shape: ModelShape, layers: int, folder: Path) -> None:
    """Build in a temporary sibling, renamed when complete: a half-built one is never used."""
    partial = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent)
    )
    try:
        build_checkpoint(shape, layers, partial)
        partial.chmod(0o755)  # mkdtemp makes it private; a shared cache must be readable
        os.rename(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def remove_stale_partials(folder: Path) -> None:
    # Only called while holding the folder's lock: any partial left is from a killed builder.
    for stale in folder.parent.glob(f".{folder.name}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)


def check_free_space(shape: ModelShape, layers: int, parent: Path) -> None:
    needed = shape.parameters(layers) * _DTYPE_CODES[shape.checkpoint_dtype][1]
    free = shutil.disk_usage(parent).free
    if free < needed * 1.05:
        raise BloomperfError(
            f"--model: building {shape.name} with {layers} layers needs {needed / 1e9:.1f} GB "
            f"but {parent} has {free / 1e9:.1f} GB free (set BLOOMPERF_CACHE elsewhere)"
        )


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


def bloom_config(shape: ModelShape, layers: int) -> dict[str, Any]:
    """config.json in the classic BLOOM spelling, which transformers 4.43 and 5.x both read."""
    return {
        "architectures": ["BloomForCausalLM"],
        "model_type": "bloom",
        "hidden_size": shape.hidden_size,
        "n_layer": layers,
        "n_head": shape.n_head,
        "vocab_size": shape.vocab_size,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": shape.initializer_range,
        "apply_residual_connection_post_layernorm": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
        "slow_but_exact": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "unk_token_id": UNK_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        # transformers 4.x reads torch_dtype, 5.x reads dtype.
        "torch_dtype": shape.checkpoint_dtype,
        "dtype": shape.checkpoint_dtype,
    }


def generation_config() -> dict[str, Any]:
    # Only the token ids: no max_length, sampling or repetition settings that would silently
    # change what the workload's explicit generate() arguments ask for.
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


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
    dtype = shape.checkpoint_dtype
    item = _DTYPE_CODES[dtype][1]
    shards = split_shards(tensor_specs(shape, layers), item)
    if len(shards) == 1:
        names = ["model.safetensors"]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    total = sum(s.numel for specs in shards for s in specs) * item
    progress = ByteProgress(f"building {shape.name} ({layers} layers)", total)
    try:
        for file_name, specs in zip(names, shards, strict=True):
            write_shard(folder / file_name, specs, dtype, shape.initializer_range, seed, progress)
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


def write_shard(
    path: Path,
    specs: list[TensorSpec],
    dtype: str,
    std: float,
    seed: int,
    progress: ByteProgress | None = None,
) -> None:
    """One safetensors file: 8-byte header length, JSON header, then the raw tensors."""
    code, item = _DTYPE_CODES[dtype]
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
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        write_values(f, specs, dtype, std, seed, progress)


@dataclass(frozen=True)
class Chunk:
    spec: TensorSpec
    index: int
    count: int


def write_values(
    f: IO[bytes],
    specs: list[TensorSpec],
    dtype: str,
    std: float,
    seed: int,
    progress: ByteProgress | None = None,
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
            pending.append(pool.submit(chunk_values, chunk, dtype, std, seed))
            if len(pending) > 2 * workers:
                write_chunk(f, pending.popleft().result(), progress)
        while pending:
            write_chunk(f, pending.popleft().result(), progress)


def write_chunk(f: IO[bytes], values: Any, progress: ByteProgress | None) -> None:
    data = as_bytes(values)
    f.write(data)
    if progress is not None:
        progress.advance(data.nbytes)


def chunk_values(chunk: Chunk, dtype: str, std: float, seed: int) -> Any:
    """One chunk's values. Each chunk has its own seed (from the tensor name and chunk index), so
    chunks can be generated in parallel and a truncated model's layers equal the full model's."""
    torch = _torch()
    torch_dtype = getattr(torch, dtype)
    if chunk.spec.init == "ones":
        return torch.ones(chunk.count, dtype=torch_dtype)
    if chunk.spec.init == "zeros":
        return torch.zeros(chunk.count, dtype=torch_dtype)
    generator = torch.Generator().manual_seed(chunk_seed(seed, chunk.spec.name, chunk.index))
    return torch.randn(chunk.count, dtype=torch_dtype, generator=generator).mul_(std)


def as_bytes(values: Any) -> Any:
    return values.view(_torch().uint8).numpy()  # a view: no copy of the chunk


def chunk_seed(seed: int, name: str, index: int) -> int:
    digest = hashlib.sha256(f"{seed}:{name}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _torch() -> Any:
    # Imported on first use: resolving an already-built model must stay cheap for the controller.
    import torch

    return torch


# The tokenizer's training text: the workload's prompts plus plain English on the blog's topics,
# enough distinct words for TOKENIZER_VOCAB_SIZE byte-level BPE tokens. Written for this project.
TOKENIZER_CORPUS = """\
Large language models are served on machines with several accelerators, because the weights
of the biggest ones do not fit in the memory of a single device. BLOOM has one hundred and
seventy six billion parameters, seventy transformer blocks and a vocabulary of a quarter of a
million tokens. In half precision its weights need three hundred and fifty two gigabytes, so an
inference server splits them over eight GPUs, either layer by layer (pipeline parallelism) or by
cutting every matrix into slices (tensor parallelism).
Accelerate places whole layers on each device and moves the hidden states from one GPU to the
next; only one device works at any moment, which keeps the code simple but leaves most of the
hardware idle. DeepSpeed-Inference shards each matrix across all devices, replaces the attention
and feed-forward modules with fused CUDA kernels, and pre-allocates a workspace for the key and
value cache. ZeRO offloads parameters to the CPU or to fast NVMe storage and gathers every layer
just before it is needed, trading throughput for the ability to run on small clusters.
We measure the time to load the checkpoint, the latency of each generated token, the throughput
at growing batch sizes, and the peak memory on every device. A batch that no longer fits raises an
out-of-memory error; the largest batch that still runs is the boundary we track from release to
release. Greedy decoding with exactly one hundred new tokens keeps the amount of work identical
between backends, so a slower number means slower software, not a longer answer.
Quantization to eight bits halves the memory again and lets the whole model sit on fewer cards,
although the extra conversions make each step slower. Benchmarks are noisy: warm up first,
synchronise the device before reading the clock, repeat the cycle a few times and report the
median together with its spread. Compare every figure against a stored baseline for the same
topology, and flag only the differences that are larger than the noise.
The weather was calm over the harbour this morning. Fishermen mended their nets while children
raced along the quay, shouting at the gulls. A baker opened her shop early; the smell of fresh
bread drifted through the narrow streets toward the old church and the market square. Farmers
arrived with carts of apples, cabbages, cheese, honey and eggs, and a violinist played near the
fountain. Later, clouds gathered above the hills, thunder rumbled in the distance, and everybody
hurried home before the rain. Quietly, the lighthouse keeper climbed the spiral stairs, lit the
lamp and watched the waves breaking against the rocks until midnight.
Mathematics, physics, chemistry, biology, history, geography, literature, music and painting
were taught in the small village school. Students learned to read maps, solve equations, measure
angles, write letters, sing songs, build bridges from paper and grow beans in jars by the window.
Numbers: zero one two three four five six seven eight nine ten twenty thirty forty fifty hundred
thousand million billion; 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 14336.
Punctuation and symbols: . , ; : ! ? ' " ( ) [ ] { } < > / \\ | - _ + = * & ^ % $ # @ ~ `.
"""


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A byte-level BPE trained on TOKENIZER_CORPUS (under a second), loadable by AutoTokenizer.

    ``vocab_size`` is at most the model's, so every id it makes is in range.
    """
    if vocab_size < MIN_TOKENIZER_VOCAB:
        raise BloomperfError(f"tokenizer: vocab_size {vocab_size} < {MIN_TOKENIZER_VOCAB} (bytes)")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([*PROMPTS, *TOKENIZER_CORPUS.splitlines()], trainer)
    saved = json.loads(tokenizer.to_str())
    # Merges as "a b" strings, the format tokenizers < 0.20 (transformers 4.43's) can read; newer
    # versions read it too. Byte-level tokens never contain a space, so the split is unambiguous.
    # tokenizers < 0.20 already writes strings: join only pairs.
    saved["model"]["merges"] = [
        pair if isinstance(pair, str) else " ".join(pair) for pair in saved["model"]["merges"]
    ]
    write_json(folder / "tokenizer.json", saved)
    # BloomTokenizerFast: transformers 4.x has that class; 5.x maps the name to its fast backend.
    write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "BloomTokenizerFast",
            "unk_token": SPECIAL_TOKENS[UNK_ID],
            "bos_token": SPECIAL_TOKENS[BOS_ID],
            "eos_token": SPECIAL_TOKENS[EOS_ID],
            "pad_token": SPECIAL_TOKENS[PAD_ID],
            "padding_side": "left",
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
        },
    )


def write_json(path: Path, data: dict[str, Any]) -> None:
    # Checkpoint files are built in a private temporary folder, renamed into place as a whole.
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def find_cached_snapshot(repo_id: str) -> Path | None:
    """The local snapshot of a hub model, or None. Never downloads (works offline)."""
    if not _HUB_ID.match(repo_id):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, a bad cache entry, or no huggingface_hub: all mean "not here"
        return None


def prepare_external(name: str, folder: Path, layers: int | None) -> PreparedModel:
    """Check an existing checkpoint folder is a complete BLOOM checkpoint."""
    config = read_checkpoint_config(folder)
    hidden = config_int(config, folder, "hidden_size", "n_embed")
    n_layer = config_int(config, folder, "n_layer", "num_hidden_layers")
    n_head = config_int(config, folder, "n_head", "num_attention_heads")
    vocab = config_int(config, folder, "vocab_size")
    if layers is not None and layers != n_layer:
        raise BloomperfError(
            f"--layers: only registry shapes can be truncated; {name} has {n_layer} layers"
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise BloomperfError(f"--model: {folder} has no *.safetensors or *.bin weights")
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        raise BloomperfError(f"--model: {folder} has no tokenizer files (tokenizer.json)")
    tied = config.get("tie_word_embeddings", True) is not False
    parameters = count_parameters(hidden, n_layer, vocab, tied)
    return PreparedModel(
        name, folder, n_layer, parameters, find_shape(hidden, n_layer, n_head, vocab)
    )


def find_shape(hidden: int, n_layer: int, n_head: int, vocab: int) -> ModelShape | None:
    wanted = (hidden, n_layer, n_head, vocab)
    for shape in MODEL_SHAPES.values():
        if (shape.hidden_size, shape.n_layer, shape.n_head, shape.vocab_size) == wanted:
            return shape
    return None


def read_checkpoint_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BloomperfError(f"--model: {folder} has no config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BloomperfError(f"--model: cannot read {path}: {exc}") from None
    config = parse_json_text(text, str(path))
    if not isinstance(config, dict) or config.get("model_type") != "bloom":
        found = config.get("model_type") if isinstance(config, dict) else None
        raise BloomperfError(f"--model: {path} is not a BLOOM config (model_type {found!r})")
    return config


def config_int(config: dict[str, Any], folder: Path, *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise BloomperfError(f"--model: {folder}/config.json has no positive integer {keys[0]}")
