"""MBU and MFU from the one roofline model: a step at the roofline is 100 %; where a figure
cannot be had, both are null and the reason says why (the one thing a user reads)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.roofline import roofline_ms_per_token
from bloomperf.analysis.scenario import PROMPT_TOKENS, Scenario, SuiteCell
from bloomperf.analysis.utilisation import cell_utilisation
from bloomperf.catalog.hardware import GPU_SPECS, GpuSpec, known_topology, topology_id
from bloomperf.catalog.models import MODEL_SHAPES, ModelShape

SHAPE = MODEL_SHAPES["bloom-176b"]
TOPOLOGY = "8xA100-SXM4-80GB"
NULL = {"mbu_percent": None, "mfu_percent": None}
# The backends whose memory model says how a step spreads; the first two are tensor parallel
# (every GPU computes each step), the others run a step on one GPU at a time.
TENSOR_PARALLEL = ("ds-inference", "ds-autotp")
MODELLED = (*TENSOR_PARALLEL, "accelerate", "ds-zero")
DTYPES = ("fp32", "fp16", "bf16", "int8")

shapes = st.sampled_from(sorted(MODEL_SHAPES.values(), key=lambda shape: shape.name))
gpus = st.sampled_from(list(GPU_SPECS.values()))
known_topologies = st.builds(topology_id, st.integers(1, 2), st.integers(1, 8), gpus)
timings = st.floats(0.01, 1e5)


@pytest.mark.parametrize(("backend", "streams"), [("ds-inference", 1), ("accelerate", 1)])
def test_a_decode_step_at_the_memory_roofline_is_100_percent_mbu(
    backend: str, streams: int
) -> None:
    known = known_topology(TOPOLOGY)
    assert known is not None
    _, n_gpus, gpus = known
    # Batch 1 decode is memory bound: the roofline's step time is bytes / bandwidth.
    bound_ms = roofline_ms_per_token(Scenario(SHAPE, None, backend, "bf16", gpus, n_gpus), 1)
    cell = SuiteCell(SHAPE, None, TOPOLOGY, backend, "bf16", 1, 100)
    figures = cell_utilisation(cell, 1000.0, bound_ms)
    assert figures["mbu_percent"] == pytest.approx(100.0, rel=1e-9)
    slower = cell_utilisation(cell, 1000.0, 2 * bound_ms)
    assert slower["mbu_percent"] == pytest.approx(50.0, rel=1e-9)


def test_prefill_at_the_peak_rate_is_100_percent_mfu() -> None:
    known = known_topology(TOPOLOGY)
    assert known is not None
    _, n_gpus, gpus = known
    flops = 2 * SHAPE.parameters() * 4 * PROMPT_TOKENS
    ttft_ms = flops / (gpus.peak_rate("bf16") * n_gpus) * 1000.0  # TP: every GPU at once
    cell = SuiteCell(SHAPE, None, TOPOLOGY, "ds-inference", "bf16", 4, 100)
    figures = cell_utilisation(cell, ttft_ms, 50.0)
    assert figures["mfu_percent"] == pytest.approx(100.0, rel=1e-9)


def test_on_cpu_both_are_null_with_the_reason() -> None:
    figures = cell_utilisation(
        SuiteCell(MODEL_SHAPES["tiny"], None, "cpu", "accelerate", "fp32", 1, 8), 5.0, 1.0
    )
    assert figures == {
        "mbu_percent": None,
        "mfu_percent": None,
        "utilisation_reason": "cpu: no peak bandwidth or FLOP figures",
    }
    cell = SuiteCell(SHAPE, None, TOPOLOGY, "accelerate", "bf16", 1, 100)
    missing = cell_utilisation(cell, None, None)
    assert missing["mbu_percent"] is None and missing["utilisation_reason"] == "no per-step timing"


@given(
    topology=st.one_of(st.just("cpu"), known_topologies, st.just("8xB200-192GB")),
    backend=st.sampled_from((*MODELLED, "vllm")),
    dtype=st.sampled_from(DTYPES),
    batch=st.integers(1, 64),
    ttft_ms=st.none() | timings,
    tpot_ms=st.none() | timings,
)
def test_an_external_checkpoint_has_no_figures_whatever_else_is_known(
    topology: str, backend: str, dtype: str, batch: int, ttft_ms: float, tpot_ms: float
) -> None:
    cell = SuiteCell(None, None, topology, backend, dtype, batch, 100)
    assert cell_utilisation(cell, ttft_ms, tpot_ms) == {
        **NULL,
        "utilisation_reason": "an external checkpoint: no shape to count bytes",
    }


@given(
    shape=shapes,
    per_node=st.integers(1, 8),
    gpu=st.sampled_from(("B200-192GB", "MI300X", "T4-16GB", "RTX-4090")),
    backend=st.sampled_from(MODELLED),
)
def test_a_gpu_without_datasheet_figures_is_named_not_taken_for_a_cpu(
    shape: ModelShape, per_node: int, gpu: str, backend: str
) -> None:
    topology = f"{per_node}x{gpu}"
    cell = SuiteCell(shape, None, topology, backend, "fp16", 1, 100)
    assert cell_utilisation(cell, 5.0, 1.0) == {
        **NULL,
        "utilisation_reason": f"no datasheet figures for {topology}",
    }


@given(topology=known_topologies, backend=st.sampled_from(MODELLED), timing=timings)
def test_one_timing_missing_is_enough_for_no_figures(
    topology: str, backend: str, timing: float
) -> None:
    cell = SuiteCell(SHAPE, None, topology, backend, "bf16", 1, 100)
    for ttft_ms, tpot_ms in ((None, timing), (timing, None)):
        assert cell_utilisation(cell, ttft_ms, tpot_ms) == {
            **NULL,
            "utilisation_reason": "no per-step timing",
        }


@given(shape=shapes, data=st.data(), backend=st.sampled_from(MODELLED))
def test_a_layer_reduced_cell_counts_only_the_layers_it_runs(
    shape: ModelShape, data: st.DataObject, backend: str
) -> None:
    """``--layers K``: the prefill at the peak rate for K blocks is 100 %, and the same time
    over fewer blocks is less of the peak (the full model's FLOPs would say otherwise)."""
    n_layer = shape.n_layer
    layers = data.draw(st.integers(1, n_layer))
    known = known_topology(TOPOLOGY)
    assert known is not None
    _, n_gpus, gpu = known
    parallel = n_gpus if backend in TENSOR_PARALLEL else 1
    flops = 2 * shape.parameters(layers) * 4 * PROMPT_TOKENS
    ttft_ms = flops / (gpu.peak_rate("bf16") * parallel) * 1000.0
    cell = SuiteCell(shape, layers, TOPOLOGY, backend, "bf16", 4, 100)
    assert cell_utilisation(cell, ttft_ms, 50.0)["mfu_percent"] == pytest.approx(100.0, rel=1e-9)
    if layers < n_layer:
        deeper = SuiteCell(shape, layers + 1, TOPOLOGY, backend, "bf16", 4, 100)
        assert cell_utilisation(deeper, ttft_ms, 50.0)["mfu_percent"] > 100.0


@given(
    shape=shapes,
    beyond=st.one_of(st.integers(-3, 0), st.integers(1, 500)),
    backend=st.sampled_from(MODELLED),
)
def test_a_refused_layer_count_is_the_reason_given(
    shape: ModelShape, beyond: int, backend: str
) -> None:
    n_layer = shape.n_layer
    layers = beyond if beyond <= 0 else n_layer + beyond
    cell = SuiteCell(shape, layers, TOPOLOGY, backend, "bf16", 1, 100)
    figures = cell_utilisation(cell, 5.0, 1.0)
    reason = figures.pop("utilisation_reason")
    assert figures == NULL
    assert reason.startswith(f"--layers: {layers} is out of range")
    assert f"(1 to {n_layer})" in reason


@given(topology=known_topologies, dtype=st.sampled_from(("fp32", "fp16", "bf16")))
def test_a_backend_without_a_memory_model_has_no_figures_and_says_so(
    topology: str, dtype: str
) -> None:
    """vLLM's engine has no memory model: how many GPUs a step uses is not known."""
    cell = SuiteCell(SHAPE, None, topology, "vllm", dtype, 1, 100)
    assert cell_utilisation(cell, 5.0, 1.0) == {
        **NULL,
        "utilisation_reason": "vllm: no memory model says how many GPUs a step uses",
    }


def datasheet_peak(gpu: GpuSpec, dtype: str) -> float:
    """The dense matmul peak a dtype runs at, read from the datasheet fields: int8 weights
    are dequantised to fp16 for the matmul, bf16 on a chip without bf16 units runs at fp16."""
    if dtype == "fp32":
        return gpu.peak_fp32
    if dtype == "bf16" and gpu.peak_bf16 is not None:
        return gpu.peak_bf16
    return gpu.peak_fp16


@given(
    gpu=gpus,
    per_node=st.integers(1, 8),
    backend=st.sampled_from(MODELLED),
    dtype=st.sampled_from(DTYPES),
    batch=st.integers(1, 32),
)
def test_prefill_at_the_dtypes_own_peak_is_100_percent_mfu(
    gpu: GpuSpec, per_node: int, backend: str, dtype: str, batch: int
) -> None:
    """fp32 runs at the fp32 peak (16x below fp16's on an A100), not at the half-precision one."""
    parallel = per_node if backend in TENSOR_PARALLEL else 1
    flops = 2 * SHAPE.parameters() * batch * PROMPT_TOKENS
    ttft_ms = flops / (datasheet_peak(gpu, dtype) * parallel) * 1000.0
    cell = SuiteCell(SHAPE, None, topology_id(1, per_node, gpu), backend, dtype, batch, 100)
    figures = cell_utilisation(cell, ttft_ms, 50.0)
    assert figures["mfu_percent"] == pytest.approx(100.0, rel=1e-9)


@given(
    nodes=st.integers(1, 2),
    per_node=st.integers(1, 8),
    gpu=gpus,
    shape=shapes,
    backend=st.sampled_from(MODELLED),
    dtype=st.sampled_from(DTYPES),
    new_tokens=st.integers(1, 4096),
)
def test_a_suite_cell_is_predicted_on_every_gpu_of_every_node_for_its_own_length(
    nodes: int,
    per_node: int,
    gpu: GpuSpec,
    shape: ModelShape,
    backend: str,
    dtype: str,
    new_tokens: int,
) -> None:
    """``--new-tokens`` reaches the roofline's mean cache length (not the blog's 100), and the
    topology id's nodes times GPUs per node are the GPUs counted."""
    cell = SuiteCell(shape, 2, topology_id(nodes, per_node, gpu), backend, dtype, 1, new_tokens)
    expected = Scenario(
        shape, 2, backend, dtype, gpu, nodes * per_node, nodes, PROMPT_TOKENS, new_tokens
    )
    assert cell.scenario() == expected
