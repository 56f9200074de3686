"""Predict before you measure: per-GPU memory, the OOM boundary and the roofline of a cell.

The memory model is physics from the model shape (weights, KV cache, activations, logits) plus
each backend's own layout: Accelerate's layer split over a ``max_memory`` map, DeepSpeed's tensor
parallelism and its kernel workspace, ZeRO-3's partitions and gathered layers. The few constants
that are calibrated rather than derived are named below, with what they stand for and the range
of values that fits the reference tables (see ``tests/test_predict.py``).

Everything is per GPU, in bytes; ``prompt_tokens`` defaults to the blog's padded prompt length
(its longest prompt is about 10 tokens) and ``new_tokens`` to its 100.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Any

from bloomperf.accelerate_map import max_memory_map, on_machine, split_model, weight_caps
from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.baseline import EXPECT_OK, Baseline, find_baseline, oom_boundary
from bloomperf.errors import BloomperfError
from bloomperf.hardware import GiB, GpuSpec, known_topology, parse_topology_id, topology_id
from bloomperf.models import MODEL_SHAPES, ModelShape, check_layers
from bloomperf.weights import (
    activation_bytes,
    embedding_bytes,
    layer_bytes,
    weight_bytes_per_param,
)

BATCH_SIZES: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 512)

# ---- constants ------------------------------------------------------------------------------

# Per GPU, outside any tensor: the CUDA context with its kernels, cuBLAS handles, NCCL's buffers
# and what the driver keeps for itself (torch sees 79.35 of the 80 GiB of an A100-80GB).
# Physics, order of magnitude: a context is 0.3-0.5 GiB on an A100 with lazy module loading.
# The blog's prompts are a few words: the memory model and the roofline size them at 10 tokens.
PROMPT_TOKENS = 10
CUDA_CONTEXT_BYTES = 1 * GiB

# CALIBRATED. Bytes held per byte of textbook KV cache (2 x layers x hidden x tokens x dtype).
# Torch-managed caches grow by one token every step: each step allocates every layer's K and V a
# little larger than the blocks it frees, so the caching allocator cannot reuse them and small
# allocations pin the freed segments. DeepSpeed's fused kernels size their workspace per token
# and need it for more than the cache. Fitted on the blog's tables: 1.8 and 2.0 make all six
# Accelerate and DeepSpeed-Inference boundaries exact; 1.5 and 2.4 each miss rows by one step;
# the physics-only 1.0 predicts every one of them one batch step too high. ZeRO-3's row is
# one step optimistic anywhere in 1.8-2.4 (see ZERO_PINNED_GATHER_BLOCKS).
KV_HEADROOM = 2.0

# Accelerate's top-level hook returns the model's outputs, past key values included, on the
# input's GPU (``io_same_device``): while step t's cache is copied there, step t-1's is still
# referenced by ``generate``. Physics: two whole-model caches on the input GPU.
ACCELERATE_IO_CACHE_COPIES = 2

# DeepSpeed-Inference (ops/csrc/transformer/inference/includes/inference_context.h): tokens the
# workspace is sized for at most, and the memory it leaves free (500 MB when over 1 GB is free).
DS_MAX_OUT_TOKENS = 1024
DS_WORKSPACE_RESERVE_BYTES = 500 * 1024**2

# ZeRO-3 in the blog's script: stage3_prefetch_bucket_size = 0.9 x hidden^2 parameters.
# DeepSpeed gathers parameters per module (``iter_params(module, recurse=False)``) and
# prefetches whole parameters until the bucket is exceeded, so at least the next one.
ZERO_PREFETCH_HIDDEN2 = 0.9

# ZeRO-3 allocates every gathered parameter anew at each step, through the caching allocator,
# and frees it after the module runs; the growing KV cache (new K and V tensors every step) is
# carved from those freed blocks. The next gather of the largest parameter (the tied embedding,
# 6.7 GiB for bloom-176b, needed again by lm_head at the end of each step) then finds no
# contiguous free block and the allocator reserves a new one while the split one stays pinned.
# Physics, not fitted: one such block. (Three would make the blog's ZeRO row exact; the model
# does not claim that, and predicts one batch step optimistic there.)
ZERO_PINNED_GATHER_BLOCKS = 1

# CPU: RSS of a process that has imported torch and transformers and built a BLOOM model,
# before its weights count: 365 MB peak RSS loading the tiny shape (0.4 MB of weights), 261 MB
# after the imports alone (measured on the development machine: torch 2.13 CPU, transformers
# 5.24, Python 3.11). The CPU has no other constant: no context, no headroom.
CPU_RUNTIME_RSS_BYTES = 348 * 1024**2

# ---- shapes and bytes -----------------------------------------------------------------------


def kv_bytes(shape: ModelShape, layers: int, dtype: str, batch: int, tokens: int) -> int:
    """Textbook K and V for ``layers`` blocks: 2 x hidden per token per layer."""
    return 2 * layers * shape.hidden_size * tokens * batch * activation_bytes(dtype)


def logits_bytes(shape: ModelShape, dtype: str, batch: int, prompt_tokens: int) -> int:
    """The prefill's logits over the prompt, plus generate's fp32 scores for one token."""
    return batch * shape.vocab_size * (prompt_tokens * activation_bytes(dtype) + 4)


def block_activation_bytes(shape: ModelShape, dtype: str, batch: int, prompt_tokens: int) -> int:
    """The largest tensors alive inside one block at prefill: hidden, fused QKV and the MLP."""
    h = shape.hidden_size
    return batch * prompt_tokens * (h + 3 * h + 4 * h) * activation_bytes(dtype)


# ---- predictions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuMemory:
    weights: int = 0
    kv_cache: int = 0
    activations: int = 0
    logits: int = 0
    workspace: int = 0
    context: int = 0
    fragmentation: int = 0  # reserved by the caching allocator, unusable for the next request

    @property
    def total(self) -> int:
        return (
            self.weights
            + self.kv_cache
            + self.activations
            + self.logits
            + self.workspace
            + self.context
            + self.fragmentation
        )


@dataclass(frozen=True)
class MemoryPrediction:
    backend: str
    dtype: str
    batch_size: int
    capacity_bytes: int
    per_gpu: tuple[GpuMemory, ...]
    peak_per_gpu_bytes: int
    fits: bool
    limit: str  # why it does not fit ("" when it does)


def _prediction(
    backend: str, dtype: str, batch: int, gpus: GpuSpec, per_gpu: list[GpuMemory], limit: str = ""
) -> MemoryPrediction:
    peak = max(g.total for g in per_gpu)
    if not limit and peak > gpus.memory_bytes:
        worst = max(range(len(per_gpu)), key=lambda i: per_gpu[i].total)
        limit = f"GPU {worst}: {peak / GiB:.1f} GiB > {gpus.memory_bytes / GiB:.1f} GiB"
    return MemoryPrediction(
        backend, dtype, batch, gpus.memory_bytes, tuple(per_gpu), peak, not limit, limit
    )


def predict_cell(
    shape: ModelShape,
    layers: int | None,
    backend: str,
    dtype: str,
    batch: int,
    gpus: GpuSpec,
    n_gpus: int,
    *,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = 100,
    **layout: Any,
) -> MemoryPrediction:
    """Per-GPU memory of one cell. ``layout``: ``max_memory`` (Accelerate: auto, blog, even or
    a map, as ``--max-memory``),
    ``tp`` (tensor-parallel degree, DeepSpeed), ``max_out_tokens`` (DeepSpeed-Inference),
    ``offload`` (ZeRO-3 parameters kept in CPU memory), ``nodes`` (how many nodes the
    ``n_gpus`` are spread over; default 1)."""
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    if backend not in BACKEND_NAMES:
        raise BloomperfError(f"--backends: unknown backend {backend!r}")
    if dtype not in DTYPES:
        raise BloomperfError(f"--dtypes: unknown dtype {dtype!r}")
    cell = _Cell(shape, n_layer, dtype, batch, gpus, n_gpus, prompt_tokens, new_tokens)
    if backend == "accelerate":
        if int(layout.get("nodes", 1)) > 1:
            # One process drives every GPU: it cannot reach another node's.
            empty = [GpuMemory()] * cell.n_gpus
            return cell.result("accelerate", empty, "Accelerate runs on one node only")
        return _predict_accelerate(cell, str(layout.get("max_memory") or "auto"))
    if backend == "ds-inference":
        tp = int(layout.get("tp", n_gpus))
        return _predict_ds_inference(cell, tp, int(layout.get("max_out_tokens", DS_MAX_OUT_TOKENS)))
    if backend == "ds-autotp":
        return _predict_ds_autotp(cell, int(layout.get("tp", n_gpus)))
    return _predict_ds_zero(cell, bool(layout.get("offload", False)))


@dataclass(frozen=True)
class _Cell:
    shape: ModelShape
    layers: int
    dtype: str
    batch: int
    gpus: GpuSpec
    n_gpus: int
    prompt_tokens: int
    new_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.new_tokens

    def kv(self, layers: int, shards: int = 1) -> int:
        return kv_bytes(self.shape, layers, self.dtype, self.batch, self.tokens) // shards

    def held_kv(self, layers: int, shards: int = 1) -> int:
        """A torch-managed, growing cache: the textbook bytes times KV_HEADROOM."""
        return int(self.kv(layers, shards) * KV_HEADROOM)

    def logits(self) -> int:
        return logits_bytes(self.shape, self.dtype, self.batch, self.prompt_tokens)

    def block_activations(self) -> int:
        return block_activation_bytes(self.shape, self.dtype, self.batch, self.prompt_tokens)

    def result(self, backend: str, per_gpu: list[GpuMemory], limit: str = "") -> MemoryPrediction:
        return _prediction(backend, self.dtype, self.batch, self.gpus, per_gpu, limit)


# ---- Accelerate: naive pipeline over a max_memory map ---------------------------------------


def _predict_accelerate(cell: _Cell, max_memory: str) -> MemoryPrediction:
    """The split comes from ``bloomperf.accelerate_map``: the map the backend passes, and where
    accelerate then puts each block."""
    shape, dtype = cell.shape, cell.dtype
    caps = weight_caps(max_memory, shape, cell.layers, dtype, cell.n_gpus, cell.gpus.memory_bytes)
    if len([k for k in caps if isinstance(k, int)]) != cell.n_gpus:
        raise BloomperfError(f"--max-memory: {len(caps)} entries for {cell.n_gpus} GPUs")
    free = cell.gpus.memory_bytes - CUDA_CONTEXT_BYTES
    split = split_model(shape, cell.layers, dtype, on_machine(max_memory_map(caps, dtype), free))
    if split is None:
        empty = [GpuMemory(context=CUDA_CONTEXT_BYTES)] * cell.n_gpus
        return cell.result("accelerate", empty, "max_memory map cannot hold the weights")
    weights, layer_counts, embedding_gpu = split.weights, split.layers, split.embedding_gpu
    per_gpu = []
    for index in range(cell.n_gpus):
        kv = cell.held_kv(layer_counts[index])
        # A block's own transients: the cache it was handed moved to its GPU and concatenated
        # with the new token (one layer, twice), and its prefill activations.
        one_layer = cell.kv(1) * 2 if layer_counts[index] else 0
        activations = one_layer + (cell.block_activations() if layer_counts[index] else 0)
        logits = cell.logits() if index in (0, embedding_gpu) else 0
        if index == 0:  # generate's GPU: the inputs are there, so the outputs come back there
            kv += ACCELERATE_IO_CACHE_COPIES * cell.held_kv(cell.layers)
        per_gpu.append(GpuMemory(weights[index], kv, activations, logits, 0, CUDA_CONTEXT_BYTES))
    return cell.result("accelerate", per_gpu)


# ---- DeepSpeed-Inference: tensor parallel, fused kernels, a pre-allocated workspace ---------


def ds_workspace(
    shape: ModelShape, layers: int, batch: int, tp: int, free_bytes: int, max_out_tokens: int
) -> tuple[int, int]:
    """DeepSpeed's ``GenWorkSpace``: (workspace bytes, tokens it can hold). Elements are fp16."""
    h, heads, elem = shape.hidden_size, shape.n_head, 2
    head_size = h // heads
    padded = 32 if head_size <= 32 else 64 if head_size <= 64 else 128
    effective = head_size if head_size > 128 else padded
    activation = 10 * heads * effective * batch
    temp = batch * (heads // tp) * max_out_tokens
    cache = layers * batch * (heads * effective // tp) * 2
    reserve = temp + (DS_WORKSPACE_RESERVE_BYTES if free_bytes > GiB else 100 * 1024**2)
    if free_bytes < reserve:
        return 0, 0
    tokens = min(max_out_tokens, (free_bytes - reserve) // elem // (activation + temp + cache))
    return (activation + temp + cache) * tokens * elem, tokens


def _predict_ds_inference(cell: _Cell, tp: int, max_out_tokens: int) -> MemoryPrediction:
    shape, dtype = cell.shape, cell.dtype
    check_tp(shape, tp, cell.n_gpus)
    # The blocks are sharded; the embedding (tied lm_head) stays whole on every rank.
    weights = cell.layers * layer_bytes(shape, dtype, tp) + embedding_bytes(shape, dtype)
    embedded = cell.batch * cell.prompt_tokens * shape.hidden_size * activation_bytes(dtype)
    activations = cell.block_activations() // tp + embedded
    logits = cell.logits()
    torch_side = weights + activations + logits + CUDA_CONTEXT_BYTES
    # The kernels size their workspace from what is free at the first forward (cudaMemGetInfo).
    free = max(0, cell.gpus.memory_bytes - torch_side)
    workspace, capacity_tokens = ds_workspace(
        shape, cell.layers, cell.batch, tp, free, max_out_tokens
    )
    needed = int(cell.tokens * KV_HEADROOM)
    limit = ""
    if capacity_tokens < needed:
        limit = (
            f"workspace holds {capacity_tokens} tokens, needs {needed} "
            f"({cell.tokens} x KV_HEADROOM {KV_HEADROOM})"
        )
    gpu = GpuMemory(weights, 0, activations, logits, workspace, CUDA_CONTEXT_BYTES)
    return cell.result("ds-inference", [gpu] * tp, limit)


def check_tp(shape: ModelShape, tp: int, n_gpus: int) -> None:
    if tp < 1 or tp > n_gpus or shape.n_head % tp:
        raise BloomperfError(
            f"--tp: {tp} must divide the {shape.n_head} heads and be at most {n_gpus} GPUs"
        )


# ---- DeepSpeed auto-TP: tensor parallel, plain torch modules --------------------------------


def _predict_ds_autotp(cell: _Cell, tp: int) -> MemoryPrediction:
    shape, dtype = cell.shape, cell.dtype
    check_tp(shape, tp, cell.n_gpus)
    weights = cell.layers * layer_bytes(shape, dtype, tp) + embedding_bytes(shape, dtype)
    kv = cell.held_kv(cell.layers, tp)
    activations = cell.block_activations() // tp + 2 * cell.kv(1, tp)
    gpu = GpuMemory(weights, kv, activations, cell.logits(), 0, CUDA_CONTEXT_BYTES)
    return cell.result("ds-autotp", [gpu] * tp)


# ---- DeepSpeed ZeRO-3: partitioned parameters, every rank runs its own batch ----------------


def _predict_ds_zero(cell: _Cell, offload: bool) -> MemoryPrediction:
    shape, dtype = cell.shape, cell.dtype
    if dtype == "int8":
        return cell.result("ds-zero", [GpuMemory()] * cell.n_gpus, "ZeRO-3 has no int8 inference")
    total = cell.layers * layer_bytes(shape, dtype) + embedding_bytes(shape, dtype)
    partition = 0 if offload else total // cell.n_gpus
    # Gathered on the fly: the module being run (its own parameters only) and the prefetch.
    # The peak is at the embedding, with the first block's fused QKV prefetched behind it.
    largest = zero_largest_gather(shape, dtype)
    width = weight_bytes_per_param(dtype)
    bucket = int(ZERO_PREFETCH_HIDDEN2 * shape.hidden_size**2) * width
    prefetch = max(bucket, 3 * shape.hidden_size**2 * width)
    kv = cell.held_kv(cell.layers)  # the whole model's cache, for this rank's own batch
    activations = cell.block_activations() + 2 * cell.kv(1)
    pinned = ZERO_PINNED_GATHER_BLOCKS * largest
    gpu = GpuMemory(
        partition + largest + prefetch,
        kv,
        activations,
        cell.logits(),
        0,
        CUDA_CONTEXT_BYTES,
        pinned,
    )
    return cell.result("ds-zero", [gpu] * cell.n_gpus)


def zero_largest_gather(shape: ModelShape, dtype: str) -> int:
    """The largest single module's parameters: the embedding, or a block's 4h x h MLP matmul."""
    mlp = 4 * shape.hidden_size**2 * weight_bytes_per_param(dtype)
    return max(embedding_bytes(shape, dtype), mlp)


# ---- boundaries -----------------------------------------------------------------------------


def predict_boundary(
    shape: ModelShape,
    layers: int | None,
    backend: str,
    dtype: str,
    gpus: GpuSpec,
    n_gpus: int,
    batches: tuple[int, ...] = BATCH_SIZES,
    **kwargs: Any,
) -> int | None:
    """The largest of ``batches`` that fits, None when not even the smallest does.

    Memory grows with the batch, so the first batch that does not fit ends the search.
    """
    largest = None
    for batch in sorted(batches):
        if not predict_cell(shape, layers, backend, dtype, batch, gpus, n_gpus, **kwargs).fits:
            break
        largest = batch
    return largest


def batches_to_run(
    shape: ModelShape,
    layers: int | None,
    backend: str,
    dtype: str,
    gpus: GpuSpec,
    n_gpus: int,
    batches: tuple[int, ...] = BATCH_SIZES,
    beyond: int = 1,
    **kwargs: Any,
) -> tuple[int, ...]:
    """The batches worth loading and running where no baseline says where the OOM is: those
    predicted to fit and ``beyond`` more (to catch the model being pessimistic; an OOM there
    is the expected outcome, a success a model error, not a regression)."""
    fitting = predict_boundary(shape, layers, backend, dtype, gpus, n_gpus, batches, **kwargs)
    return batches_through(batches, fitting, beyond)


def batches_through(batches: tuple[int, ...], boundary: int | None, beyond: int) -> tuple[int, ...]:
    """The batches up to ``boundary`` (None: none fits) and ``beyond`` more."""
    ordered = sorted(batches)
    last = -1 if boundary is None else ordered.index(boundary)
    return tuple(ordered[: last + 1 + beyond])


@dataclass(frozen=True)
class BoundaryCheck:
    """One row of a baseline against the model: the largest batch that ran and the prediction."""

    backend: str
    dtype: str
    reference: int | None  # largest batch the baseline ran, None when none did
    reference_oom: int | None  # smallest batch the baseline ran out of memory at
    predicted: int | None
    steps_off: int  # batch-size steps between the two (positive: the model is optimistic)


def check_boundaries(
    baseline: Baseline, shape: ModelShape, gpus: GpuSpec, n_gpus: int
) -> list[BoundaryCheck]:
    """Every (backend, dtype) row of ``baseline`` that has an OOM, against ``predict_boundary``."""
    checks = []
    rows = dict.fromkeys((c.backend, c.dtype) for c in baseline.cells)
    for backend, dtype in rows:
        oom = oom_boundary(baseline, backend, dtype)
        if oom is None:
            continue
        ran = [
            c.batch_size
            for c in baseline.cells
            if (c.backend, c.dtype) == (backend, dtype) and c.outcome == EXPECT_OK
        ]
        batches = tuple(sorted({c.batch_size for c in baseline.cells}))
        reference = max(ran) if ran else None
        predicted = predict_boundary(
            shape, baseline.model_layers, backend, dtype, gpus, n_gpus, batches
        )
        steps = _step(predicted, batches) - _step(reference, batches)
        checks.append(BoundaryCheck(backend, dtype, reference, oom, predicted, steps))
    return checks


def _step(batch: int | None, batches: tuple[int, ...]) -> int:
    return -1 if batch is None else batches.index(batch)


def render_checks(checks: list[BoundaryCheck], title: str) -> str:
    lines = [
        f"**{title}**",
        "",
        "| backend | dtype | reference: largest batch run (first OOM) | predicted | |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in checks:
        if c.steps_off == 0:
            verdict = "equal"
        else:
            side = "optimistic" if c.steps_off > 0 else "pessimistic"
            verdict = f"{abs(c.steps_off)} step{'s' if abs(c.steps_off) > 1 else ''} {side}"
        lines.append(
            f"| {c.backend} | {c.dtype} | {c.reference} ({c.reference_oom}) "
            f"| {c.predicted} | {verdict} |"
        )
    return "\n".join(lines)


# ---- roofline -------------------------------------------------------------------------------


def roofline_ms_per_token(
    shape: ModelShape,
    layers: int | None,
    backend: str,
    dtype: str,
    batch: int,
    gpus: GpuSpec,
    n_gpus: int,
    *,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = 100,
    streams: int | None = None,
) -> float:
    """A lower bound on ms per generated token (the blog's metric: step time / batch).

    A decode step reads every weight once and the KV cache (at its mean length), and does
    2 x parameters x batch FLOPs; the larger of bytes / bandwidth and FLOPs / peak rate bounds
    the step. Tensor-parallel backends use every GPU's bandwidth at once; Accelerate's pipeline
    runs one GPU at a time, and each ZeRO rank runs the whole model for its own batch.
    ``streams``: independent batches generated at once; ZeRO's default is one per GPU, as the
    blog's script counts every rank's tokens. (ZeRO's all-gathers over the interconnect, its
    real limit, are not in this bound.)
    """
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    parallel = parallel_gpus(backend, n_gpus)
    step_bytes = decode_step_bytes(shape, n_layer, dtype, batch, prompt_tokens, new_tokens)
    memory_s = step_bytes / (gpus.bandwidth_bytes_per_s * parallel)
    flops = 2 * shape.parameters(n_layer) * batch
    compute_s = flops / (gpus.peak_rate(dtype) * parallel)
    if streams is None:
        streams = n_gpus if backend == "ds-zero" else 1
    return max(memory_s, compute_s) * 1000.0 / (batch * streams)


def parallel_gpus(backend: str, n_gpus: int) -> int:
    """GPUs whose bandwidth and FLOPs one step uses at once: every GPU under tensor
    parallelism; one under Accelerate's pipeline (one stage at a time) and per ZeRO rank."""
    return n_gpus if backend in ("ds-inference", "ds-autotp") else 1


def decode_step_bytes(
    shape: ModelShape, n_layer: int, dtype: str, batch: int, prompt_tokens: int, new_tokens: int
) -> int:
    """Bytes one decode step reads: every weight once, and the KV cache at its mean length."""
    weights = n_layer * layer_bytes(shape, dtype) + embedding_bytes(shape, dtype)
    mean_tokens = prompt_tokens + new_tokens // 2
    return weights + kv_bytes(shape, n_layer, dtype, batch, mean_tokens)


def efficiency(measured_ms_per_token: float, bound_ms_per_token: float) -> float:
    """The bound as a percentage of the measured time: 100% would run at the roofline."""
    if measured_ms_per_token <= 0:
        raise BloomperfError(f"measured ms/token must be positive, got {measured_ms_per_token}")
    return 100.0 * bound_ms_per_token / measured_ms_per_token


# ---- CPU ------------------------------------------------------------------------------------


def predict_cpu_rss(
    shape: ModelShape,
    layers: int | None,
    batch: int,
    *,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = 100,
    checkpoint_dtype: str | None = None,
) -> int:
    """Peak RSS of one process that loads the model in fp32 and generates.

    Loading maps the safetensors file, whose pages count in RSS while the fp32 copies are made;
    generating adds the KV cache (torch's CPU allocator hands large blocks back, so no
    headroom), the prefill's activations and the logits. The larger of the two phases counts.
    """
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    weights = n_layer * layer_bytes(shape, "fp32") + embedding_bytes(shape, "fp32")
    stored = {"float32": 4, "bfloat16": 2, "float16": 2}[checkpoint_dtype or shape.checkpoint_dtype]
    checkpoint = shape.parameters(n_layer) * stored
    kv = kv_bytes(shape, n_layer, "fp32", batch, prompt_tokens + new_tokens)
    activations = block_activation_bytes(shape, "fp32", batch, prompt_tokens)
    logits = logits_bytes(shape, "fp32", batch, prompt_tokens)
    return CPU_RUNTIME_RSS_BYTES + weights + max(checkpoint, kv + activations + logits)


# ---- `bloomperf predict` --------------------------------------------------------------------


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="predict peak memory per GPU, the OOM boundary and the roofline of every cell",
    )
    parser.add_argument("--model", required=True, help=f"shape: {', '.join(MODEL_SHAPES)}")
    parser.add_argument("--layers", type=int, default=None, help="only the first N blocks")
    parser.add_argument(
        "--topology",
        required=True,
        help="[NODESx]GPUSxGPU, e.g. 8xA100-80GB, 2x8xA100-40GB, or 'detect'",
    )
    parser.add_argument("--backends", default="accelerate,ds-inference,ds-zero")
    parser.add_argument("--dtypes", default="bf16,fp16,int8")
    parser.add_argument("--batches", default=",".join(str(b) for b in BATCH_SIZES))
    parser.add_argument("--prompt-tokens", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run_predict)


@dataclass(frozen=True)
class PredictedRow:
    backend: str
    dtype: str
    boundary: int | None
    cells: tuple[MemoryPrediction, ...]
    roofline_ms_per_token: tuple[float, ...]


def _split(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    for value in values:
        if value not in allowed:
            raise BloomperfError(f"{option}: unknown value {value!r} (known: {', '.join(allowed)})")
    if not values:
        raise BloomperfError(f"{option}: empty list")
    return values


def _batches(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise BloomperfError(
            f"--batches: {text!r} is not a comma-separated list of integers"
        ) from None
    if not values or values[0] < 1:
        raise BloomperfError("--batches: batch sizes must be positive integers")
    return values


# The dtypes each backend runs (the blog's rows): DeepSpeed's fused kernels have no bf16,
# Accelerate's int8 is bitsandbytes, ZeRO-3 has no int8.
SUPPORTED_DTYPES: dict[str, tuple[str, ...]] = {
    "accelerate": ("fp32", "bf16", "fp16", "int8"),
    "ds-inference": ("fp32", "fp16", "int8"),
    "ds-autotp": ("fp32", "bf16", "fp16"),
    "ds-zero": ("fp32", "bf16", "fp16"),
}


def predict_rows(
    shape: ModelShape,
    layers: int | None,
    backends: list[str],
    dtypes: list[str],
    gpus: GpuSpec,
    n_gpus: int,
    batches: tuple[int, ...],
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = 100,
    nodes: int = 1,
) -> list[PredictedRow]:
    tokens: dict[str, Any] = {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens}
    layout: dict[str, Any] = {**tokens, "nodes": nodes}
    rows = []
    for backend in backends:
        for dtype in dtypes:
            if dtype not in SUPPORTED_DTYPES[backend]:
                continue
            cells = tuple(
                predict_cell(shape, layers, backend, dtype, b, gpus, n_gpus, **layout)
                for b in batches
            )
            bounds = tuple(
                roofline_ms_per_token(shape, layers, backend, dtype, b, gpus, n_gpus, **tokens)
                for b in batches
            )
            boundary = predict_boundary(
                shape, layers, backend, dtype, gpus, n_gpus, batches, **layout
            )
            rows.append(PredictedRow(backend, dtype, boundary, cells, bounds))
    return rows


def render_text(rows: list[PredictedRow], batches: tuple[int, ...], title: str) -> str:
    header = ["backend dtype", *(f"bs{b}" for b in batches), "boundary"]
    table = [header]
    for row in rows:
        cells = []
        for cell, bound in zip(row.cells, row.roofline_ms_per_token, strict=True):
            memory = f"{cell.peak_per_gpu_bytes / GiB:.1f}G" if cell.fits else "OOM"
            cells.append(f"{memory} {_ms(bound)}")
        table.append([f"{row.backend} {row.dtype}", *cells, str(row.boundary or "none")])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [title, "cells: predicted peak GiB per GPU (or OOM) and roofline ms/token"]
    for r in table:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    lines.append("")
    lines.append("per row: the peak GPU at the largest batch that fits, and why the next does not")
    lines.extend(_row_details(row) for row in rows)
    lines.append(
        f"constants: CUDA_CONTEXT {CUDA_CONTEXT_BYTES / GiB:.1f} GiB/GPU, "
        f"KV_HEADROOM {KV_HEADROOM} (calibrated), ACCELERATE_IO_CACHE_COPIES "
        f"{ACCELERATE_IO_CACHE_COPIES}, ZERO_PINNED_GATHER_BLOCKS {ZERO_PINNED_GATHER_BLOCKS}"
    )
    return "\n".join(lines)


def _row_details(row: PredictedRow) -> str:
    fitting = [c for c in row.cells if c.fits]
    failing = [c for c in row.cells if not c.fits]
    parts = [f"{row.backend} {row.dtype}:"]
    if fitting:
        parts.append(f"bs{fitting[-1].batch_size} {breakdown_text(fitting[-1])};")
    if failing:
        parts.append(f"bs{failing[0].batch_size} does not fit: {failing[0].limit}")
    return " ".join(parts)


def breakdown_text(cell: MemoryPrediction) -> str:
    """``GPU 0: weights 41.0 + KV 6.6 + ... = 55.8 GiB`` for the GPU at the peak."""
    index = max(range(len(cell.per_gpu)), key=lambda i: cell.per_gpu[i].total)
    gpu = cell.per_gpu[index]
    terms = [
        ("weights", gpu.weights),
        ("KV", gpu.kv_cache),
        ("activations", gpu.activations),
        ("logits", gpu.logits),
        ("workspace", gpu.workspace),
        ("context", gpu.context),
        ("fragmentation", gpu.fragmentation),
    ]
    summed = " + ".join(f"{name} {value / GiB:.1f}" for name, value in terms if value)
    return f"GPU {index}: {summed} = {gpu.total / GiB:.1f} GiB"


def _ms(value: float) -> str:
    return f"{value:.2f}ms" if value < 10 else f"{value:.1f}ms"


def render_json(rows: list[PredictedRow], topology: str, model: str) -> str:
    data = {
        "topology": topology,
        "model": model,
        "constants": {
            "cuda_context_bytes": CUDA_CONTEXT_BYTES,
            "kv_headroom": KV_HEADROOM,
            "accelerate_io_cache_copies": ACCELERATE_IO_CACHE_COPIES,
            "zero_pinned_gather_blocks": ZERO_PINNED_GATHER_BLOCKS,
        },
        "rows": [
            {
                "backend": row.backend,
                "dtype": row.dtype,
                "boundary": row.boundary,
                "cells": [
                    {
                        **asdict(cell),
                        "per_gpu": [_gpu_dict(g) for g in cell.per_gpu],
                        "roofline_ms_per_token": bound,
                    }
                    for cell, bound in zip(row.cells, row.roofline_ms_per_token, strict=True)
                ],
            }
            for row in rows
        ],
    }
    return json.dumps(data, indent=2, allow_nan=False)


def _gpu_dict(gpu: GpuMemory) -> dict[str, int]:
    return {**asdict(gpu), "total": gpu.total}


def _topology_text(text: str) -> str:
    """``detect``: this machine's GPUs through NVML (bloomperf.topology)."""
    if text != "detect":
        return text
    from bloomperf.topology import detect_topology

    found = detect_topology()
    if found.device != "cuda":
        raise BloomperfError(f"--topology detect: no GPU found ({found.nvml_reason or 'CPU only'})")
    return found.id


def run_predict(args: argparse.Namespace) -> int:
    if args.model not in MODEL_SHAPES:
        known = ", ".join(MODEL_SHAPES)
        raise BloomperfError(f"--model: unknown shape {args.model!r} (known: {known})")
    shape = MODEL_SHAPES[args.model]
    nodes, per_node, gpus = parse_topology_id(_topology_text(args.topology))
    n_gpus = nodes * per_node
    backends = _split(args.backends, BACKEND_NAMES, "--backends")
    dtypes = _split(args.dtypes, DTYPES, "--dtypes")
    batches = _batches(args.batches)
    if args.prompt_tokens < 1 or args.new_tokens < 1:
        raise BloomperfError("--prompt-tokens/--new-tokens: must be at least 1")
    rows = predict_rows(
        shape,
        args.layers,
        backends,
        dtypes,
        gpus,
        n_gpus,
        batches,
        args.prompt_tokens,
        args.new_tokens,
        nodes,
    )
    topology = topology_id(nodes, per_node, gpus)
    if args.format == "json":
        print(render_json(rows, topology, shape.name))
    else:
        print(render_text(rows, batches, f"{shape.name} on {topology} (predicted)"))
        baseline = find_baseline(topology, shape.name)
        if baseline is not None and args.layers in (None, baseline.model_layers):
            checks = check_boundaries(baseline, shape, gpus, n_gpus)
            print()
            print(render_checks(checks, f"OOM boundary, predicted vs {baseline.path}"))
    return 0


# ---- used by the suite ----------------------------------------------------------------------


def cell_prediction(
    shape: ModelShape | None,
    layers: int | None,
    topology: str,
    backend: str,
    dtype: str,
    batch: int,
    new_tokens: int,
) -> dict[str, Any]:
    """What the model predicts for a cell the suite measures, for its results' ``details``:
    peak memory (per GPU, or process RSS on CPU), whether it fits, and the roofline bound.
    Empty where there is nothing to predict from (an external checkpoint, an unknown GPU)."""
    if shape is None:
        return {}
    if topology == "cpu":
        # The CPU model knows one process loading in fp32 (accelerate's path), not rank groups.
        if dtype != "fp32" or backend != "accelerate":
            return {}
        rss = predict_cpu_rss(shape, layers, batch, new_tokens=new_tokens)
        return {"predicted_peak_bytes": rss, "predicted_peak_scope": "process RSS"}
    known = known_topology(topology)
    if known is None:
        return {}
    nodes, per_node, gpus = known
    n_gpus = nodes * per_node
    try:
        memory = predict_cell(
            shape, layers, backend, dtype, batch, gpus, n_gpus, new_tokens=new_tokens, nodes=nodes
        )
        bound = roofline_ms_per_token(
            shape, layers, backend, dtype, batch, gpus, n_gpus, new_tokens=new_tokens
        )
    except (BloomperfError, KeyError, ValueError):
        return {}
    return {
        "predicted_peak_bytes": memory.peak_per_gpu_bytes,
        "predicted_peak_scope": "per GPU",
        "predicted_fits": memory.fits,
        "predicted_limit": memory.limit,
        "roofline_ms_per_token": bound,
    }


def predicted_skip_reason(
    shape: ModelShape | None,
    layers: int | None,
    topology: str,
    backend: str,
    dtype: str,
    batch: int,
    batch_sizes: tuple[int, ...],
    new_tokens: int,
    largest_ok: int | None = None,
) -> str | None:
    """Why a cell is not worth loading and running where no baseline knows the OOM boundary:
    it is more than one batch step beyond the boundary the memory model predicts, and beyond
    ``largest_ok`` (the largest batch of its group that ran). The step beyond still runs, so a
    pessimistic model shows up as a success there, and the sweep goes on from it."""
    known = known_topology(topology)
    if shape is None or known is None:  # known_topology: None for "cpu" and unknown GPUs
        return None
    nodes, per_node, gpus = known
    n_gpus = nodes * per_node
    try:
        boundary = predict_boundary(
            shape, layers, backend, dtype, gpus, n_gpus, batch_sizes, new_tokens=new_tokens,
            nodes=nodes,
        )  # fmt: skip
    except (BloomperfError, KeyError, ValueError):
        return None
    if largest_ok is not None and (boundary is None or largest_ok > boundary):
        boundary = largest_ok
    if batch not in batch_sizes or batch in batches_through(batch_sizes, boundary, 1):
        return None
    largest = "no batch" if boundary is None else f"batch {boundary}"
    return (
        f"predicted to run out of memory: more than one step beyond {largest}, the largest "
        f"that the memory model fits or that ran on {topology} (no baseline; --probe runs it)"
    )
