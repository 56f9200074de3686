"""Randomised explicit ``--max-memory`` maps: accelerate's own planner and bloomperf's memory model
agree on every one of them.

Each map gives each GPU its own cap (uneven, some zero, some far too small, some larger than the
GPU), for BLOOM shapes of a few layers and every dtype accelerate runs. accelerate's placement
comes from the real code ``from_pretrained`` runs on the meta device
(``catalog/device_map.infer_device_map``); bloomperf's from ``catalog/accelerate_map.split_model``
and the memory model's ``predict_cell``. They must agree on whether the weights stay on the GPUs,
on how many blocks each GPU holds, on where the embedding lies and on the bytes per GPU.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.analysis.memory_model import CUDA_CONTEXT_BYTES, predict_cell
from bloomperf.analysis.scenario import Scenario
from bloomperf.catalog.accelerate_map import max_memory_map, on_machine, split_model
from bloomperf.catalog.device_map import infer_device_map
from bloomperf.catalog.hardware import GPU_SPECS, GiB
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.weights import model_weight_bytes
from tests.test_accelerate_map import blocks_per_gpu, embedding_gpu

pytest.importorskip("bitsandbytes")

A100 = GPU_SPECS["A100-80GB"]


@st.composite
def explicit_maps(draw: st.DrawFn) -> tuple[str, int, str, list[int]]:
    """(model, layers, dtype, each GPU's cap in bytes): caps as fractions of the weights."""
    name = draw(st.sampled_from(["bloom-560m", "bloom-7b1"]))
    layers = draw(st.integers(2, 6))
    dtype = draw(st.sampled_from(["fp32", "bf16", "fp16", "int8"]))
    n_gpus = draw(st.integers(1, 4))
    total = model_weight_bytes(MODEL_SHAPES[name], layers, dtype)
    shares = draw(
        st.lists(st.one_of(st.just(0.0), st.floats(0.05, 1.5)), min_size=n_gpus, max_size=n_gpus)
    )
    return name, layers, dtype, [int(total * share) for share in shares]


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the mutation figure of catalog/accelerate_map rests on these examples
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=explicit_maps())
def test_accelerates_planner_and_the_memory_model_agree_on_explicit_maps(
    case: tuple[str, int, str, list[int]],
) -> None:
    name, layers, dtype, caps = case
    shape = MODEL_SHAPES[name]
    given_map = max_memory_map(dict(enumerate(caps)), dtype)  # what the backend passes
    plan = infer_device_map(shape, layers, dtype, dict(given_map))
    split = split_model(shape, layers, dtype, given_map)
    offloaded = bool(plan.offloaded) or bool(plan.refused)
    assert (split is None) == offloaded, (caps, plan.placement)
    if split is None:
        return
    assert split.layers == blocks_per_gpu(plan.placement, layers, len(caps))
    assert split.embedding_gpu == embedding_gpu(plan.placement)
    for gpu, weights in enumerate(split.weights):
        assert weights == plan.bytes_per_device.get(str(gpu), 0), (gpu, caps, plan.placement)
    assert sum(split.weights) == model_weight_bytes(shape, layers, dtype)
    # The memory model's prediction from the same map, as --max-memory text, on GPUs large
    # enough that the map is not lowered: the same weights on each GPU, its context on each.
    text = ",".join(f"{gpu}:{cap}B" for gpu, cap in enumerate(caps))
    scenario = Scenario(shape, layers, "accelerate", dtype, A100, len(caps))
    free = A100.memory_bytes - CUDA_CONTEXT_BYTES
    assert on_machine(given_map, free) == given_map or max(caps) > free
    if max(given_map.values()) <= free:
        predicted = predict_cell(scenario, 1, max_memory=text)
        assert tuple(g.weights for g in predicted.per_gpu) == split.weights
        assert all(g.context == CUDA_CONTEXT_BYTES for g in predicted.per_gpu)
        assert predicted.peak_per_gpu_bytes == max(g.total for g in predicted.per_gpu)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    batch=st.integers(1, 64),
    more=st.integers(2, 8),
    dtype=st.sampled_from(["bf16", "fp16", "int8"]),
)
def test_a_larger_batch_never_needs_less_memory(batch: int, more: int, dtype: str) -> None:
    shape = MODEL_SHAPES["bloom-176b"]
    scenario = Scenario(shape, None, "accelerate", dtype, A100, 8)
    small, large = predict_cell(scenario, batch), predict_cell(scenario, batch * more)
    assert large.peak_per_gpu_bytes > small.peak_per_gpu_bytes
    for a, b in zip(small.per_gpu, large.per_gpu, strict=True):
        assert a.weights == b.weights and b.total >= a.total
    assert not (large.fits and not small.fits)
    assert small.capacity_bytes == large.capacity_bytes == A100.memory_bytes
    assert (small.peak_per_gpu_bytes <= A100.memory_bytes) == small.fits


def test_a_map_of_zeros_holds_nothing() -> None:
    shape = MODEL_SHAPES["bloom-560m"]
    assert split_model(shape, 2, "bf16", {0: 0, 1: 0}) is None
    scenario = Scenario(shape, 2, "accelerate", "bf16", A100, 2)
    assert not predict_cell(scenario, 1, max_memory="0:0GiB,1:0GiB").fits
    assert predict_cell(scenario, 1, max_memory=f"0:0GiB,1:{10 * GiB}B").fits
