"""What the suite records and skips on the memory model's word, cell by cell: the CPU's process
RSS, the GPU's per-GPU peak and roofline, and the skip reason a user reads where no baseline
knows the OOM boundary (the blog's rows and a whole session: tests/test_predict.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.boundaries import predict_boundary
from bloomperf.analysis.memory_model import predict_cell, predict_cpu_rss
from bloomperf.analysis.roofline import roofline_ms_per_token
from bloomperf.analysis.scenario import SuiteCell
from bloomperf.analysis.suite_prediction import cell_prediction, predicted_skip_reason
from bloomperf.catalog.models import MODEL_SHAPES

BLOOM = MODEL_SHAPES["bloom-176b"]
BATCHES = (1, 8, 16, 32, 64, 128, 256, 512)
ONE_PROCESS = "accelerate"  # the one backend whose whole model lives in one process
RANK_GROUPS = ("ds-inference", "ds-autotp", "ds-zero")


@given(
    shape=st.sampled_from(("tiny", "bloom-560m")),
    data=st.data(),
    batch=st.integers(1, 64),
    new_tokens=st.integers(1, 300),
)
def test_a_cpu_cell_records_the_process_rss_of_exactly_its_run(
    shape: str, data: st.DataObject, batch: int, new_tokens: int
) -> None:
    """Its layers, batch and generation length, not the defaults: the RSS model's figure for
    the very run, and that it is one process's RSS (not a GPU's peak)."""
    model = MODEL_SHAPES[shape]
    layers = data.draw(st.none() | st.integers(1, model.n_layer))
    cell = SuiteCell(model, layers, "cpu", ONE_PROCESS, "fp32", batch, new_tokens)
    assert cell_prediction(cell) == {
        "predicted_peak_bytes": predict_cpu_rss(model, layers, batch, new_tokens=new_tokens),
        "predicted_peak_scope": "process RSS",
    }


@pytest.mark.parametrize(
    ("backend", "dtype"),
    [(ONE_PROCESS, d) for d in ("bf16", "fp16", "int8")] + [(b, "fp32") for b in RANK_GROUPS],
)
def test_the_cpu_model_predicts_only_one_process_loading_in_fp32(backend: str, dtype: str) -> None:
    cell = SuiteCell(MODEL_SHAPES["tiny"], None, "cpu", backend, dtype, 1, 8)
    assert cell_prediction(cell) == {}


@pytest.mark.parametrize("backend", [ONE_PROCESS, *RANK_GROUPS])
def test_a_gpu_cell_records_the_per_gpu_peak_and_the_roofline(backend: str) -> None:
    cell = SuiteCell(BLOOM, None, "8xA100-80GB", backend, "bf16", 8, 100)
    scenario = cell.scenario()
    assert scenario is not None
    memory = predict_cell(scenario, 8)
    assert cell_prediction(cell) == {
        "predicted_peak_bytes": memory.peak_per_gpu_bytes,
        "predicted_peak_scope": "per GPU",
        "predicted_fits": memory.fits,
        "predicted_limit": memory.limit,
        "roofline_ms_per_token": roofline_ms_per_token(scenario, 8),
    }


def skip_message(beyond: str, topology: str) -> str:
    return (
        f"predicted to run out of memory: more than one step beyond {beyond}, the largest that "
        f"the memory model fits or that ran on {topology} (no baseline; --probe runs it)"
    )


@pytest.mark.parametrize("largest_ok", [None, 1, 16, 32, 64, 256])
@pytest.mark.parametrize("topology", ["8xA100-80GB", "1xA100-40GB"])
def test_the_sweep_runs_one_step_past_the_larger_of_the_model_and_what_ran(
    topology: str, largest_ok: int | None
) -> None:
    """The boundary is the model's or the largest batch that ran, whichever is larger (the
    model fits some batch on 8 x A100-80GB, none on 1 x A100-40GB); one step beyond it runs,
    every batch past that is skipped with the boundary named ("no batch" where none is known)."""
    cells = {b: SuiteCell(BLOOM, None, topology, ONE_PROCESS, "bf16", b, 100) for b in BATCHES}
    scenario = cells[1].scenario()
    assert scenario is not None
    predicted = predict_boundary(scenario, BATCHES)
    assert (predicted is None) is (topology == "1xA100-40GB")  # both sides of the property
    known = [b for b in (predicted, largest_ok) if b is not None]
    boundary = max(known, default=None)
    runs = BATCHES[: (-1 if boundary is None else BATCHES.index(boundary)) + 2]
    beyond = "no batch" if boundary is None else f"batch {boundary}"
    for batch, cell in cells.items():
        expected = None if batch in runs else skip_message(beyond, topology)
        assert predicted_skip_reason(cell, BATCHES, largest_ok) == expected, batch
