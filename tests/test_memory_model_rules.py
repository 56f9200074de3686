"""The memory model's accounts, stated per backend (mutmut's first full run left 169 of its 656
mutants alive: only the boundaries it predicts were tested, never what each GPU holds).

* DeepSpeed-Inference's workspace is DeepSpeed's own arithmetic: ``GenWorkSpace`` is cut from
  the installed DeepSpeed's ``inference_context.h``, compiled with a stub for the CUDA calls,
  and run beside ``ds_workspace`` over shapes that reach every head-size branch.
* The textbook sizes (K and V, a block's prefill tensors, the logits) against BLOOM-176B's
  figures worked out by hand.
* Each backend's per-GPU account, from its documented layout: which GPU holds the weights,
  cache, activations and logits, and how each scales with the batch and the parallel degree.
* The CPU's peak: the runtime, the fp32 weights, and the larger of the mapped checkpoint and
  the generation's working set.
"""

from __future__ import annotations

import subprocess
from dataclasses import fields, replace
from pathlib import Path

import deepspeed
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.memory_model import (
    ACCELERATE_IO_CACHE_COPIES,
    CPU_RUNTIME_RSS_BYTES,
    CUDA_CONTEXT_BYTES,
    KV_HEADROOM,
    ZERO_PINNED_GATHER_BLOCKS,
    MemoryPrediction,
    block_activation_bytes,
    ds_workspace,
    kv_bytes,
    logits_bytes,
    memory_model_of,
    predict_cell,
    predict_cpu_rss,
    zero_largest_gather,
)
from bloomperf.analysis.scenario import Scenario
from bloomperf.backends import backend_class
from bloomperf.catalog.hardware import GPU_SPECS, GiB
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.weights import embedding_bytes, layer_bytes, model_weight_bytes
from bloomperf.core.errors import BloomperfError
from tests.tools import require

BLOOM = MODEL_SHAPES["bloom-176b"]
TINY = MODEL_SHAPES["tiny"]
A100 = GPU_SPECS["A100-80GB"]
HEADER = (
    Path(deepspeed.__file__).parent / "ops/csrc/transformer/inference/includes/inference_context.h"
)

# ---- DeepSpeed's GenWorkSpace ----------------------------------------------------------------

HARNESS = """
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#define MEGABYTE (1024 * 1024)
#define GIGABYTE (1024 * 1024 * 1024)
// GenWorkSpace's own messages go to stderr: stdout carries the answers.
#define printf(...) std::fprintf(stderr, __VA_ARGS__)
int main() {
    unsigned num_layers, num_heads, mp_size, max_out_tokens;
    size_t batch_size, hidden_dim, _free_memory_size;
    while (std::scanf("%u %u %zu %zu %u %zu %u", &num_layers, &num_heads, &batch_size,
                      &hidden_dim, &mp_size, &_free_memory_size, &max_out_tokens) == 7) {
        const size_t elem_size = 2;
        const bool external_cache = false;
        size_t total_size = 0, _max_seq_len = 0, workSpaceSize = 0;
        try {
            BODY
            std::fprintf(stdout, "%zu %zu\\n", workSpaceSize, _max_seq_len);
        } catch (const std::runtime_error&) {
            std::fprintf(stdout, "0 0\\n");
        }
    }
}
"""


def genworkspace_body() -> str:
    """The arithmetic of DeepSpeed's GenWorkSpace: from the head size to the workspace size."""
    text = HEADER.read_text()
    start = text.index("const int head_size", text.index("void GenWorkSpace("))
    end = text.index(";", text.index("temp_size *= _max_seq_len", start)) + 1
    return text[start:end].replace("size_t workSpaceSize =", "workSpaceSize =")


@pytest.fixture(scope="module")
def genworkspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = require("g++")
    folder = tmp_path_factory.mktemp("genworkspace")
    source = folder / "genworkspace.cpp"
    source.write_text(HARNESS.replace("BODY", genworkspace_body()))
    binary = folder / "genworkspace"
    subprocess.run([compiler, "-O0", "-o", str(binary), str(source)], check=True)
    return binary


# Head sizes 16, 48, 64, 96, 128 (BLOOM), 160: every padding branch and the unpadded one.
# Head sizes 16, 32, 33, 48, 64, 65, 96, 128 (BLOOM), 129, 160: every padding branch, each
# side of each limit, and the unpadded one.
SHAPES = [(64 * size, 64) for size in (16, 32, 33, 48, 64, 65, 96, 129, 160)] + [
    (BLOOM.hidden_size, BLOOM.n_head)
]
CASES = [
    (layers, heads, batch, hidden, tp, free, max_out)
    for hidden, heads in SHAPES
    for layers in (2, 70)
    for batch in (1, 16, 128)
    for tp in (1, 8)
    for free in (50 * 2**20, 900 * 2**20, GiB, GiB + 1, 3 * GiB, 40 * GiB)
    for max_out in (1024, 4096)
]


def test_the_workspace_is_deepspeeds_own_arithmetic(genworkspace: Path) -> None:
    feed = "".join(" ".join(map(str, case)) + "\n" for case in CASES)
    answers = subprocess.run(
        [str(genworkspace)], input=feed, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for case, answer in zip(CASES, answers, strict=False):
        layers, heads, batch, hidden, tp, free, max_out = case
        shape = replace(BLOOM, hidden_size=hidden, n_head=heads)
        ours = ds_workspace(shape, layers, batch, tp, free, max_out)
        assert ours == tuple(int(x) for x in answer.split()), case


# ---- textbook sizes, by hand for BLOOM-176B (hidden 14336, vocabulary 250880) ---------------


def test_the_textbook_sizes_of_bloom() -> None:
    # K and V: 2 x 14336 values per token per layer, 2 bytes each in bf16.
    assert kv_bytes(BLOOM, 1, "bf16", 1, 1) == 57_344
    assert kv_bytes(BLOOM, 70, "bf16", 8, 107) == 57_344 * 70 * 8 * 107
    assert kv_bytes(BLOOM, 1, "fp32", 1, 1) == 114_688
    # A block at prefill: hidden (h), fused QKV (3h) and the MLP's 4h, per prompt token.
    assert block_activation_bytes(BLOOM, "bf16", 1, 1) == 8 * 14_336 * 2
    assert block_activation_bytes(BLOOM, "bf16", 4, 7) == 8 * 14_336 * 2 * 28
    # Logits over the prompt in the model's dtype, plus generate's fp32 scores for one token.
    assert logits_bytes(BLOOM, "bf16", 1, 7) == 250_880 * (7 * 2 + 4)
    assert logits_bytes(BLOOM, "bf16", 3, 7) == 3 * 250_880 * (7 * 2 + 4)
    # ZeRO-3's largest gathered module: the tied embedding (250880 x 14336, and its layer
    # norm's 2 x 14336), not a block's 4h x h MLP matmul.
    assert zero_largest_gather(BLOOM, "bf16") == (250_880 * 14_336 + 2 * 14_336) * 2


# ---- each backend's account ------------------------------------------------------------------

batches = st.sampled_from((1, 2, 8, 32))
layer_counts = st.sampled_from((None, 4, 24))


def bloom(backend: str, dtype: str, layers: int | None, n_gpus: int = 8) -> Scenario:
    return Scenario(BLOOM, layers, backend, dtype, A100, n_gpus)


def cache(s: Scenario, layers: int, batch: int) -> int:
    return kv_bytes(s.shape, layers, s.dtype, batch, s.prompt_tokens + s.new_tokens)


@settings(max_examples=30, deadline=None)
@given(batch=batches, layers=layer_counts, tp=st.sampled_from((1, 2, 4, 8)))
def test_ds_inference_shards_the_blocks_and_keeps_its_cache_in_the_workspace(
    batch: int, layers: int | None, tp: int
) -> None:
    s = bloom("ds-inference", "fp16", layers)
    p = predict_cell(s, batch, tp=tp)
    n = s.n_layer
    assert len(p.per_gpu) == tp and len(set(p.per_gpu)) == 1
    gpu = p.per_gpu[0]
    assert gpu.weights == n * layer_bytes(BLOOM, "fp16", tp) + embedding_bytes(BLOOM, "fp16")
    assert gpu.kv_cache == 0  # DeepSpeed's kernels keep K and V in their workspace
    embedded = batch * s.prompt_tokens * BLOOM.hidden_size * 2
    assert (
        gpu.activations
        == block_activation_bytes(BLOOM, "fp16", batch, s.prompt_tokens) // tp + embedded
    )
    assert gpu.logits == logits_bytes(BLOOM, "fp16", batch, s.prompt_tokens)
    assert gpu.context == CUDA_CONTEXT_BYTES
    free = max(0, A100.memory_bytes - (gpu.weights + gpu.activations + gpu.logits + gpu.context))
    assert (gpu.workspace, None) == (ds_workspace(BLOOM, n, batch, tp, free, 1024)[0], None)
    tokens = ds_workspace(BLOOM, n, batch, tp, free, 1024)[1]
    needed = int((s.prompt_tokens + s.new_tokens) * KV_HEADROOM)
    assert p.fits == (tokens >= needed and gpu.total <= A100.memory_bytes)
    if tokens < needed:
        assert p.limit.startswith(f"workspace holds {tokens} tokens, needs {needed}")
    if p.fits:
        assert p.limit == ""


@settings(max_examples=30, deadline=None)
@given(batch=batches, layers=layer_counts, tp=st.sampled_from((1, 2, 4, 8)))
def test_ds_autotp_shards_weights_cache_and_activations(
    batch: int, layers: int | None, tp: int
) -> None:
    s = bloom("ds-autotp", "bf16", layers)
    p = predict_cell(s, batch, tp=tp)
    n = s.n_layer
    assert len(p.per_gpu) == tp and len(set(p.per_gpu)) == 1
    gpu = p.per_gpu[0]
    assert gpu.weights == n * layer_bytes(BLOOM, "bf16", tp) + embedding_bytes(BLOOM, "bf16")
    assert gpu.kv_cache == int(cache(s, n, batch) // tp * KV_HEADROOM)
    assert gpu.activations == (
        block_activation_bytes(BLOOM, "bf16", batch, s.prompt_tokens) // tp
        + 2 * (cache(s, 1, batch) // tp)
    )
    assert gpu.logits == logits_bytes(BLOOM, "bf16", batch, s.prompt_tokens)
    assert (gpu.workspace, gpu.context, gpu.fragmentation) == (0, CUDA_CONTEXT_BYTES, 0)
    assert p.peak_per_gpu_bytes == gpu.total and p.fits == (gpu.total <= A100.memory_bytes)


@settings(max_examples=30, deadline=None)
@given(batch=batches, layers=layer_counts, offload=st.booleans(), n_gpus=st.sampled_from((1, 4, 8)))
def test_ds_zero_partitions_the_weights_and_gathers_the_largest_module(
    batch: int, layers: int | None, offload: bool, n_gpus: int
) -> None:
    s = bloom("ds-zero", "bf16", layers, n_gpus)
    p = predict_cell(s, batch, offload=offload)
    n = s.n_layer
    assert len(p.per_gpu) == n_gpus and len(set(p.per_gpu)) == 1
    gpu = p.per_gpu[0]
    total = n * layer_bytes(BLOOM, "bf16") + embedding_bytes(BLOOM, "bf16")
    partition = 0 if offload else total // n_gpus
    largest = zero_largest_gather(BLOOM, "bf16")
    h2 = BLOOM.hidden_size**2
    prefetch = max(int(0.9 * h2) * 2, 3 * h2 * 2)
    assert gpu.weights == partition + largest + prefetch
    assert gpu.kv_cache == int(cache(s, n, batch) * KV_HEADROOM)
    assert gpu.activations == (
        block_activation_bytes(BLOOM, "bf16", batch, s.prompt_tokens) + 2 * cache(s, 1, batch)
    )
    assert gpu.logits == logits_bytes(BLOOM, "bf16", batch, s.prompt_tokens)
    assert gpu.fragmentation == ZERO_PINNED_GATHER_BLOCKS * largest
    assert (gpu.workspace, gpu.context) == (0, CUDA_CONTEXT_BYTES)


def test_ds_zero_has_no_int8() -> None:
    p = predict_cell(bloom("ds-zero", "int8", None), 1)
    assert not p.fits and p.limit == "ZeRO-3 has no int8 inference" and len(p.per_gpu) == 8


@settings(max_examples=30, deadline=None)
@given(batch=batches, layers=layer_counts, max_memory=st.sampled_from(("auto", "even", "blog")))
def test_accelerate_places_cache_activations_and_logits_where_its_blocks_run(
    batch: int, layers: int | None, max_memory: str
) -> None:
    """Each GPU: its blocks' cache (with headroom) and, if it runs blocks, one block's transients;
    the logits on the first GPU and the embedding's; generate's GPU holds the cache of the blocks
    on other GPUs returned to it, twice."""
    s = bloom("accelerate", "bf16", layers)
    p = predict_cell(s, batch, max_memory=max_memory)
    assert len(p.per_gpu) == 8
    held_layers = [round(g.kv_cache / (cache(s, 1, batch) * KV_HEADROOM)) for g in p.per_gpu]
    transients = 2 * cache(s, 1, batch) + block_activation_bytes(
        BLOOM, "bf16", batch, s.prompt_tokens
    )
    logits = logits_bytes(BLOOM, "bf16", batch, s.prompt_tokens)
    # Every other GPU holds its own blocks' cache alone; the first holds the rest's and, for
    # generate, copies of the cache of every block on another GPU.
    on_first = s.n_layer - sum(held_layers[1:])
    for index, gpu in enumerate(p.per_gpu):
        moved = int(cache(s, s.n_layer - on_first, batch) * KV_HEADROOM)
        returned = ACCELERATE_IO_CACHE_COPIES * moved if index == 0 else 0
        own = gpu.kv_cache - returned
        if index == 0:
            assert own == int(cache(s, on_first, batch) * KV_HEADROOM)
        runs_blocks = own > 0
        assert gpu.activations == (transients if runs_blocks else 0), index
        assert gpu.logits in (0, logits), index
        assert (gpu.workspace, gpu.context) == (0, CUDA_CONTEXT_BYTES)
    assert p.per_gpu[0].logits == logits
    assert sum(1 for g in p.per_gpu if g.logits) in (1, 2)
    assert sum(held_layers) >= s.n_layer
    assert p.peak_per_gpu_bytes == max(g.total for g in p.per_gpu)
    assert p.fits == (p.peak_per_gpu_bytes <= A100.memory_bytes and not p.limit)


# ---- the CPU ---------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    layers=st.sampled_from((None, 1, 2)),
    batch=st.integers(1, 64),
    prompt=st.integers(1, 64),
    new=st.integers(1, 64),
    stored=st.sampled_from(("float32", "bfloat16", "float16")),
)
def test_the_cpu_peak_is_runtime_weights_and_the_larger_phase(
    layers: int | None, batch: int, prompt: int, new: int, stored: str
) -> None:
    n = layers or TINY.n_layer
    weights = n * layer_bytes(TINY, "fp32") + embedding_bytes(TINY, "fp32")
    checkpoint = TINY.parameters(n) * {"float32": 4, "bfloat16": 2, "float16": 2}[stored]
    working = (
        kv_bytes(TINY, n, "fp32", batch, prompt + new)
        + block_activation_bytes(TINY, "fp32", batch, prompt)
        + logits_bytes(TINY, "fp32", batch, prompt)
    )
    predicted = predict_cpu_rss(
        TINY, layers, batch, prompt_tokens=prompt, new_tokens=new, checkpoint_dtype=stored
    )
    assert predicted == CPU_RUNTIME_RSS_BYTES + weights + max(checkpoint, working)
    # More of anything never needs less.
    assert (
        predict_cpu_rss(
            TINY, layers, batch + 1, prompt_tokens=prompt, new_tokens=new, checkpoint_dtype=stored
        )
        >= predicted
    )


def test_a_cell_that_does_not_fit_names_its_fullest_gpu() -> None:
    p = predict_cell(bloom("accelerate", "bf16", None), 512)
    fullest = max(range(8), key=lambda i: p.per_gpu[i].total)
    assert (p.backend, p.dtype, p.batch_size, p.fits) == ("accelerate", "bf16", 512, False)
    assert p.limit == (
        f"GPU {fullest}: {p.peak_per_gpu_bytes / GiB:.1f} GiB > {A100.memory_bytes / GiB:.1f} GiB"
    )
    assert p.per_gpu[fullest].total == p.peak_per_gpu_bytes > A100.memory_bytes


@pytest.mark.parametrize("tp", [0, 3, 16])
def test_a_tensor_parallel_degree_must_divide_the_heads_and_fit_the_gpus(tp: int) -> None:
    for backend in ("ds-inference", "ds-autotp"):
        with pytest.raises(BloomperfError) as refused:
            predict_cell(bloom(backend, "fp16", None), 1, tp=tp)
        assert str(refused.value) == (f"--tp: {tp} must divide the 112 heads and be at most 8 GPUs")


def test_the_workspaces_token_limit_reaches_the_prediction() -> None:
    s = bloom("ds-inference", "fp16", 24)
    small, default = predict_cell(s, 8, max_out_tokens=64), predict_cell(s, 8)
    assert small.per_gpu[0].workspace < default.per_gpu[0].workspace
    assert not small.fits and small.limit.startswith("workspace holds 64 tokens")


def test_zero_gathers_the_mlp_where_it_outweighs_the_embedding() -> None:
    narrow = replace(BLOOM, vocab_size=1000)  # a 1000-token vocabulary: the 4h x h MLP wins
    assert zero_largest_gather(narrow, "bf16") == 4 * BLOOM.hidden_size**2 * 2
    assert zero_largest_gather(narrow, "fp32") == 4 * BLOOM.hidden_size**2 * 4


# ---- edges: refusals, bounds, whole bytes ----------------------------------------------------


@pytest.mark.parametrize(("n_gpus", "layers"), [(1, 16), (2, 30), (2, 31)])
def test_an_explicit_map_is_lowered_to_what_the_context_leaves_free(
    n_gpus: int, layers: int
) -> None:
    """A 200 GiB cap on an 80 GiB GPU: transformers lowers it to the memory free on the GPU,
    which is its capacity less the CUDA context (16 blocks of BLOOM-176B need 80.2 GiB)."""
    s = bloom("accelerate", "bf16", layers, n_gpus)
    p = predict_cell(s, 1, max_memory=",".join(f"{i}:200GiB" for i in range(n_gpus)))
    if n_gpus == 1:
        assert p.limit == "max_memory map cannot hold the weights" and not p.fits
    else:
        assert sum(g.weights for g in p.per_gpu) == model_weight_bytes(BLOOM, layers, "bf16")
    assert all(g.weights <= A100.memory_bytes - CUDA_CONTEXT_BYTES for g in p.per_gpu)


def test_a_map_with_another_gpu_count_and_accelerate_over_nodes_are_refused() -> None:
    with pytest.raises(BloomperfError) as refused:
        predict_cell(bloom("accelerate", "bf16", 4, 4), 1, max_memory="0:10GiB,1:10GiB")
    assert str(refused.value) == "--max-memory: 2 entries for 4 GPUs"
    two_nodes = replace(bloom("accelerate", "bf16", 4, 16), nodes=2)
    p = predict_cell(two_nodes, 1)
    assert (p.fits, p.limit, len(p.per_gpu)) == (False, "Accelerate runs on one node only", 16)


def test_a_backend_without_a_model_or_a_dtype_unknown_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert memory_model_of("vllm") is None
    with pytest.raises(BloomperfError) as refused:
        predict_cell(bloom("vllm", "bf16", 4), 1)
    assert str(refused.value) == "--backends vllm: has no memory model to predict by"
    with pytest.raises(BloomperfError) as refused:
        predict_cell(bloom("ds-zero", "fp8", 4), 1)
    assert str(refused.value) == "--dtypes: unknown dtype 'fp8'"
    # A plug-in backend naming a model bloomperf does not have.
    monkeypatch.setattr(backend_class("ds-zero"), "memory_model", "warp")
    with pytest.raises(BloomperfError) as refused:
        memory_model_of("ds-zero")
    assert str(refused.value) == "--backends ds-zero: unknown memory model 'warp'"


@pytest.mark.parametrize("spare", [-1, 0, 1])
def test_the_workspace_fits_from_exactly_the_tokens_it_needs(spare: int) -> None:
    s = bloom("ds-inference", "fp16", 24)
    needed = int((s.prompt_tokens + s.new_tokens) * KV_HEADROOM)
    p = predict_cell(s, 1, max_out_tokens=needed + spare)
    assert p.fits == (spare >= 0)
    assert p.limit == (
        ""
        if spare >= 0
        else f"workspace holds {needed - 1} tokens, needs {needed} "
        f"({s.prompt_tokens + s.new_tokens} x KV_HEADROOM {KV_HEADROOM})"
    )


def test_the_workspace_is_sized_from_what_the_torch_side_leaves_free() -> None:
    """batch 128 of 24 blocks over 4 GPUs: the workspace is below its 1024-token cap, so every
    byte of the activations moves it."""
    s = bloom("ds-inference", "fp16", 24)
    gpu = predict_cell(s, 128, tp=4).per_gpu[0]
    free = A100.memory_bytes - (gpu.weights + gpu.activations + gpu.logits + gpu.context)
    workspace, tokens = ds_workspace(BLOOM, 24, 128, 4, free, 1024)
    assert gpu.workspace == workspace and 0 < tokens < 1024


@pytest.mark.parametrize("over", [-1, 0, 1])
def test_a_cell_fits_up_to_exactly_its_gpus_capacity(over: int) -> None:
    """ZeRO-3's bytes do not depend on the capacity: put the GPU's capacity at the peak."""
    peak = predict_cell(bloom("ds-zero", "bf16", 4, 2), 8).peak_per_gpu_bytes
    gpus = replace(A100, memory_bytes=peak - over)
    p = predict_cell(replace(bloom("ds-zero", "bf16", 4, 2), gpus=gpus), 8)
    assert p.peak_per_gpu_bytes == peak and p.fits == (over <= 0)
    assert (p.limit == "") == (over <= 0)


def whole_bytes(p: MemoryPrediction) -> bool:
    figures = [p.peak_per_gpu_bytes, p.capacity_bytes]
    figures += [getattr(g, f.name) for g in p.per_gpu for f in fields(g)]
    return all(type(x) is int for x in figures)


@settings(max_examples=30, deadline=None)
@given(
    backend=st.sampled_from(("ds-inference", "ds-autotp", "ds-zero")),
    tp=st.sampled_from((1, 2, 4, 8)),
    batch=st.sampled_from((1, 3, 8, 128)),
    layers=st.sampled_from((4, 24)),
)
def test_every_figure_is_whole_bytes(backend: str, tp: int, batch: int, layers: int) -> None:
    """Bytes are ints however the GPUs divide them: a results file carries no fractional byte,
    and a parallel degree that does not divide a count rounds it down, as torch's shards do."""
    # 7 heads x 256 (head size above 128, DeepSpeed's own branch) over 7 GPUs: nothing divides.
    odd = replace(BLOOM, name="odd", hidden_size=7 * 256, n_head=7, vocab_size=1001)
    assert whole_bytes(predict_cell(bloom(backend, "fp16", layers), batch, tp=tp))
    p = predict_cell(Scenario(odd, layers, backend, "fp16", A100, 7), batch, tp=7)
    assert whole_bytes(p)
    for free in (2 * GiB, 20 * GiB):
        workspace, tokens = ds_workspace(odd, layers, batch, 7, free, 100_000)
        assert type(workspace) is int and type(tokens) is int and 0 < tokens < 100_000


# ---- the CPU's edges -------------------------------------------------------------------------


@pytest.mark.parametrize(("stored", "width"), [("float32", 4), ("bfloat16", 2), ("float16", 2)])
def test_a_checkpoint_larger_than_the_working_set_sets_the_cpu_peak(
    stored: str, width: int
) -> None:
    """bloom-560m at batch 1 of one token: its mapped checkpoint (1.1 GB in bf16) outweighs
    the working set (a few MB), so the peak moves by its bytes per parameter."""
    shape = MODEL_SHAPES["bloom-560m"]
    weights = shape.n_layer * layer_bytes(shape, "fp32") + embedding_bytes(shape, "fp32")
    predicted = predict_cpu_rss(
        shape, None, 1, prompt_tokens=1, new_tokens=1, checkpoint_dtype=stored
    )
    assert predicted == CPU_RUNTIME_RSS_BYTES + weights + shape.parameters(24) * width
    # Without a dtype, the checkpoint's own (bfloat16 for bloom-560m).
    assert predict_cpu_rss(shape, None, 1, prompt_tokens=1, new_tokens=1) == predict_cpu_rss(
        shape, None, 1, prompt_tokens=1, new_tokens=1, checkpoint_dtype="bfloat16"
    )


def test_too_many_cpu_layers_are_refused_naming_the_model() -> None:
    with pytest.raises(BloomperfError) as refused:
        predict_cpu_rss(TINY, TINY.n_layer + 1, 1)
    assert str(refused.value) == (
        f"--layers: {TINY.n_layer + 1} is out of range for tiny (1 to {TINY.n_layer})"
    )
