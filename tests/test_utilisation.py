"""MBU and MFU from the one roofline model: a step at the roofline is 100 %."""

from __future__ import annotations

import pytest

from bloomperf.analysis.roofline import roofline_ms_per_token
from bloomperf.analysis.scenario import PROMPT_TOKENS, Scenario, SuiteCell
from bloomperf.analysis.utilisation import cell_utilisation
from bloomperf.catalog.hardware import known_topology
from bloomperf.catalog.models import MODEL_SHAPES

SHAPE = MODEL_SHAPES["bloom-176b"]
TOPOLOGY = "8xA100-SXM4-80GB"


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
