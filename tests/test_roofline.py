"""The roofline's own arithmetic, by property: the bytes a decode step reads, the FLOPs that
bound a large batch, and the efficiency a report prints (the blog's rows: tests/test_predict.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.roofline import decode_step_bytes, efficiency, roofline_ms_per_token
from bloomperf.analysis.scenario import Scenario
from bloomperf.catalog.hardware import GPU_SPECS
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.core.errors import BloomperfError

BLOOM = MODEL_SHAPES["bloom-176b"]
A100 = GPU_SPECS["A100-80GB"]
# Bytes per K or V value in the cache: int8 quantises weights only, its cache is fp16.
CACHE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 2}


@given(
    shape=st.sampled_from(sorted(MODEL_SHAPES)),
    data=st.data(),
    dtype=st.sampled_from(sorted(CACHE_BYTES)),
    prompt_tokens=st.integers(1, 2048),
    new_tokens=st.integers(0, 2048),
    batch=st.integers(1, 512),
)
def test_a_decode_step_reads_each_sequences_cache_at_its_mean_length(
    shape: str, data: st.DataObject, dtype: str, prompt_tokens: int, new_tokens: int, batch: int
) -> None:
    """One more sequence in the batch adds its K and V over every layer at the mean length of a
    generation, the prompt and half the new tokens (whole tokens: a step reads no half token)."""
    model = MODEL_SHAPES[shape]
    layers = data.draw(st.integers(1, model.n_layer))
    s = Scenario(model, layers, "ds-inference", dtype, A100, 8)
    s = replace(s, prompt_tokens=prompt_tokens, new_tokens=new_tokens)
    mean_tokens = prompt_tokens + new_tokens // 2
    per_sequence = 2 * layers * model.hidden_size * mean_tokens * CACHE_BYTES[dtype]
    assert decode_step_bytes(s, batch + 1) - decode_step_bytes(s, batch) == per_sequence


@pytest.mark.parametrize(("dtype", "peak"), [("fp32", A100.peak_fp32), ("bf16", A100.peak_bf16)])
@pytest.mark.parametrize("layers", [1, 3, 70])
def test_a_large_batch_is_bound_by_the_flops_of_the_layers_it_runs(
    dtype: str, peak: float, layers: int
) -> None:
    """Batch 4096 of bloom-176b is compute bound: 2 FLOPs per parameter of the blocks it runs
    (12h² + 13h each) and the tied embedding and norms, at the dtype's peak on all 8 GPUs."""
    h = BLOOM.hidden_size
    parameters = layers * (12 * h * h + 13 * h) + BLOOM.vocab_size * h + 4 * h
    expected_ms = 2 * parameters / (peak * 8) * 1000.0
    bound = roofline_ms_per_token(Scenario(BLOOM, layers, "ds-inference", dtype, A100, 8), 4096)
    assert bound == pytest.approx(expected_ms, rel=1e-9)


@pytest.mark.parametrize(
    ("measured", "bound", "percent"),
    [(44.0, 22.0, 50.0), (0.5, 0.25, 50.0), (0.01, 0.01, 100.0), (2.0, 3.0, 150.0)],
)
def test_efficiency_is_the_bound_as_a_percentage_of_the_measured_time(
    measured: float, bound: float, percent: float
) -> None:
    assert efficiency(measured, bound) == pytest.approx(percent, rel=1e-12)


@pytest.mark.parametrize("measured", [0.0, -1.5])
def test_efficiency_of_a_non_positive_time_says_which(measured: float) -> None:
    with pytest.raises(BloomperfError, match=f"must be positive, got {measured}$"):
        efficiency(measured, 20.0)
