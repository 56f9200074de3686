"""The memory model: per-GPU bytes of one cell, and whether it fits.

Physics from the model shape (weights, KV cache, activations, logits) plus each backend's own
layout: Accelerate's layer split over a ``max_memory`` map, DeepSpeed's tensor parallelism and
its kernel workspace, ZeRO-3's partitions and gathered layers. The few constants that are
calibrated rather than derived are named below, with what they stand for and the range of
values that fits the reference tables (see ``tests/test_predict.py``). The CPU has its own,
simpler model (``predict_cpu_rss``).

Everything is per GPU, in bytes; a ``Scenario`` says what runs where
(``bloomperf.analysis.scenario``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bloomperf.analysis.scenario import NEW_TOKENS, PROMPT_TOKENS, Scenario
from bloomperf.backends import DTYPES, backend_class
from bloomperf.catalog.accelerate_map import max_memory_map, on_machine, split_model, weight_caps
from bloomperf.catalog.hardware import GiB
from bloomperf.catalog.models import ModelShape, check_layers
from bloomperf.catalog.weights import (
    activation_bytes,
    embedding_bytes,
    layer_bytes,
    weight_bytes_per_param,
)
from bloomperf.core.errors import BloomperfError

# ---- constants ------------------------------------------------------------------------------

# Per GPU, outside any tensor: the CUDA context with its kernels, cuBLAS handles, NCCL's buffers
# and what the driver keeps for itself (torch sees 79.35 of the 80 GiB of an A100-80GB).
# Physics, order of magnitude: a context is 0.3-0.5 GiB on an A100 with lazy module loading.
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
# referenced by ``generate``. Physics: two copies, on the input GPU, of the cache of the blocks
# that run on other GPUs.
ACCELERATE_IO_CACHE_COPIES = 2

# DeepSpeed-Inference (ops/csrc/transformer/inference/includes/inference_context.h): tokens the
# workspace is sized for at most, and the memory it leaves free (500 MB when over 1 GB is free).
DS_MAX_OUT_TOKENS = 1024
DS_WORKSPACE_RESERVE_BYTES = 500 * 1024**2


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


DEVICE_MAP = "device-map"  # accelerate's: ``run --dry-run`` plans the map itself

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


def predict_cell(scenario: Scenario, batch: int, **layout: Any) -> MemoryPrediction:
    """Per-GPU memory of ``scenario`` at ``batch``, by the memory model its backend names.
    ``layout``: ``max_memory`` (Accelerate: auto, blog, even or a map, as ``--max-memory``),
    ``tp`` (tensor-parallel degree, DeepSpeed), ``max_out_tokens`` (DeepSpeed-Inference),
    ``offload`` (ZeRO-3 parameters kept in CPU memory)."""
    model = memory_model_of(scenario.backend)
    if model is None:
        raise BloomperfError(f"--backends {scenario.backend}: has no memory model to predict by")
    if scenario.dtype not in DTYPES:
        raise BloomperfError(f"--dtypes: unknown dtype {scenario.dtype!r}")
    return model.predict(_Cell(scenario, scenario.n_layer, batch), layout)


@dataclass(frozen=True)
class MemoryModel:
    """How a backend places the model, as the memory model and the roofline count it. A backend
    names its model by key (``Backend.memory_model``), one of ``MEMORY_MODELS``."""

    predict: Callable[[_Cell, Mapping[str, Any]], MemoryPrediction]
    tensor_parallel: bool  # a step uses every GPU at once (else one stage, or one rank's own)
    batch_per_rank: bool  # every rank generates a batch of its own
    one_process: bool  # one process holds the whole model: the CPU's RSS model applies


def memory_model_of(backend: str) -> MemoryModel | None:
    """The memory model ``backend`` names, or None (then nothing is predicted for it)."""
    key = backend_class(backend).memory_model
    if key is not None and key not in MEMORY_MODELS:
        raise BloomperfError(f"--backends {backend}: unknown memory model {key!r}")
    return None if key is None else MEMORY_MODELS[key]


@dataclass(frozen=True)
class _Cell:
    """A scenario at one batch, its layers checked, with the byte counts every layout uses."""

    scenario: Scenario
    layers: int
    batch: int

    @property
    def tokens(self) -> int:
        return self.scenario.prompt_tokens + self.scenario.new_tokens

    def kv(self, layers: int, shards: int = 1) -> int:
        s = self.scenario
        return kv_bytes(s.shape, layers, s.dtype, self.batch, self.tokens) // shards

    def held_kv(self, layers: int, shards: int = 1) -> int:
        """A torch-managed, growing cache: the textbook bytes times KV_HEADROOM."""
        return int(self.kv(layers, shards) * KV_HEADROOM)

    def logits(self) -> int:
        s = self.scenario
        return logits_bytes(s.shape, s.dtype, self.batch, s.prompt_tokens)

    def block_activations(self) -> int:
        s = self.scenario
        return block_activation_bytes(s.shape, s.dtype, self.batch, s.prompt_tokens)

    def result(self, per_gpu: list[GpuMemory], limit: str = "") -> MemoryPrediction:
        s = self.scenario
        capacity = s.gpus.memory_bytes
        peak = max(g.total for g in per_gpu)
        if not limit and peak > capacity:
            worst = max(range(len(per_gpu)), key=lambda i: per_gpu[i].total)
            limit = f"GPU {worst}: {peak / GiB:.1f} GiB > {capacity / GiB:.1f} GiB"
        return MemoryPrediction(
            s.backend, s.dtype, self.batch, capacity, tuple(per_gpu), peak, not limit, limit
        )


# ---- Accelerate: naive pipeline over a max_memory map ---------------------------------------


def _predict_device_map(cell: _Cell, layout: Mapping[str, Any]) -> MemoryPrediction:
    """The split comes from ``bloomperf.catalog.accelerate_map``: the map the backend passes, and
    where accelerate then puts each block."""
    s = cell.scenario
    if s.nodes > 1:  # one process drives every GPU: it cannot reach another node's
        return cell.result([GpuMemory()] * s.n_gpus, "Accelerate runs on one node only")
    max_memory = str(layout.get("max_memory") or "auto")
    shape, dtype = s.shape, s.dtype
    caps = weight_caps(max_memory, shape, cell.layers, dtype, s.n_gpus, s.gpus.memory_bytes)
    if len([k for k in caps if isinstance(k, int)]) != s.n_gpus:
        raise BloomperfError(f"--max-memory: {len(caps)} entries for {s.n_gpus} GPUs")
    free = s.gpus.memory_bytes - CUDA_CONTEXT_BYTES
    split = split_model(shape, cell.layers, dtype, on_machine(max_memory_map(caps, dtype), free))
    if split is None:
        empty = [GpuMemory(context=CUDA_CONTEXT_BYTES)] * s.n_gpus
        return cell.result(empty, "max_memory map cannot hold the weights")
    weights, layer_counts, embedding_gpu = split.weights, split.layers, split.embedding_gpu
    per_gpu = []
    for index in range(s.n_gpus):
        kv = cell.held_kv(layer_counts[index])
        # A block's own transients: the cache it was handed moved to its GPU and concatenated
        # with the new token (one layer, twice), and its prefill activations.
        one_layer = cell.kv(1) * 2 if layer_counts[index] else 0
        activations = one_layer + (cell.block_activations() if layer_counts[index] else 0)
        logits = cell.logits() if index in (0, embedding_gpu) else 0
        if index == 0:  # generate's GPU: the inputs are there, so the outputs come back there
            # Only the other GPUs' layers are copied: ``.to`` of a tensor already on GPU 0
            # returns it. One GPU holds no copy (H100, 2-layer bloom-176b, bf16: 4096 rows ran,
            # 6144 ran out of memory; with copies of every layer the model said 2048).
            moved = cell.layers - layer_counts[0]
            kv += ACCELERATE_IO_CACHE_COPIES * cell.held_kv(moved)
        per_gpu.append(GpuMemory(weights[index], kv, activations, logits, 0, CUDA_CONTEXT_BYTES))
    return cell.result(per_gpu)


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


def _predict_ds_kernels(cell: _Cell, layout: Mapping[str, Any]) -> MemoryPrediction:
    s = cell.scenario
    tp = int(layout.get("tp", s.n_gpus))
    max_out_tokens = int(layout.get("max_out_tokens", DS_MAX_OUT_TOKENS))
    shape, dtype = s.shape, s.dtype
    check_tp(shape, tp, s.n_gpus)
    # The blocks are sharded; the embedding (tied lm_head) stays whole on every rank.
    weights = cell.layers * layer_bytes(shape, dtype, tp) + embedding_bytes(shape, dtype)
    embedded = cell.batch * s.prompt_tokens * shape.hidden_size * activation_bytes(dtype)
    activations = cell.block_activations() // tp + embedded
    logits = cell.logits()
    torch_side = weights + activations + logits + CUDA_CONTEXT_BYTES
    # The kernels size their workspace from what is free at the first forward (cudaMemGetInfo);
    # below nothing free, ds_workspace's reserve is not met either: no workspace.
    free = s.gpus.memory_bytes - torch_side
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
    return cell.result([gpu] * tp, limit)


def check_tp(shape: ModelShape, tp: int, n_gpus: int) -> None:
    if tp < 1 or tp > n_gpus or shape.n_head % tp:
        raise BloomperfError(
            f"--tp: {tp} must divide the {shape.n_head} heads and be at most {n_gpus} GPUs"
        )


# ---- DeepSpeed auto-TP: tensor parallel, plain torch modules --------------------------------


def _predict_tensor_parallel(cell: _Cell, layout: Mapping[str, Any]) -> MemoryPrediction:
    s = cell.scenario
    tp = int(layout.get("tp", s.n_gpus))
    shape, dtype = s.shape, s.dtype
    check_tp(shape, tp, s.n_gpus)
    weights = cell.layers * layer_bytes(shape, dtype, tp) + embedding_bytes(shape, dtype)
    kv = cell.held_kv(cell.layers, tp)
    activations = cell.block_activations() // tp + 2 * cell.kv(1, tp)
    gpu = GpuMemory(weights, kv, activations, cell.logits(), 0, CUDA_CONTEXT_BYTES)
    return cell.result([gpu] * tp)


# ---- DeepSpeed ZeRO-3: partitioned parameters, every rank runs its own batch ----------------


def _predict_zero3(cell: _Cell, layout: Mapping[str, Any]) -> MemoryPrediction:
    s = cell.scenario
    offload = bool(layout.get("offload"))
    shape, dtype = s.shape, s.dtype
    if dtype == "int8":
        return cell.result([GpuMemory()] * s.n_gpus, "ZeRO-3 has no int8 inference")
    total = cell.layers * layer_bytes(shape, dtype) + embedding_bytes(shape, dtype)
    partition = 0 if offload else total // s.n_gpus
    # Gathered on the fly: the module being run (its own parameters only) and the prefetch.
    # The peak is at the embedding, with the first block's fused QKV prefetched behind it.
    largest = zero_largest_gather(shape, dtype)
    # The blog's stage3_prefetch_bucket_size is 0.9 x hidden^2 parameters. DeepSpeed gathers
    # per module (``iter_params(module, recurse=False)``) and prefetches whole parameters until
    # the bucket is exceeded: the next one, the 3h x h fused QKV, alone exceeds it.
    prefetch = 3 * shape.hidden_size**2 * weight_bytes_per_param(dtype)
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
    return cell.result([gpu] * s.n_gpus)


def zero_largest_gather(shape: ModelShape, dtype: str) -> int:
    """The largest single module's parameters: the embedding, or a block's 4h x h MLP matmul."""
    mlp = 4 * shape.hidden_size**2 * weight_bytes_per_param(dtype)
    return max(embedding_bytes(shape, dtype), mlp)


MEMORY_MODELS: dict[str, MemoryModel] = {
    DEVICE_MAP: MemoryModel(_predict_device_map, False, False, True),
    "ds-kernels": MemoryModel(_predict_ds_kernels, True, False, False),
    "tensor-parallel": MemoryModel(_predict_tensor_parallel, True, False, False),
    "zero-3": MemoryModel(_predict_zero3, False, True, False),
}


# ---- CPU ------------------------------------------------------------------------------------


def predict_cpu_rss(
    shape: ModelShape,
    layers: int | None,
    batch: int,
    *,
    prompt_tokens: int = PROMPT_TOKENS,
    new_tokens: int = NEW_TOKENS,
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
