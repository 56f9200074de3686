"""The line each verdict prints, whole, for every status: the text under a nightly's table and in
``diff`` is how a user learns what failed, so a clause lost, misjoined or misplaced fails here.

The cells go through ``compare_cell`` from real results and baseline cells; the expected lines
are written out in full.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bloomperf.analysis.compare import compare_cell, compare_metric
from bloomperf.analysis.verdicts import CellVerdict
from bloomperf.store.baseline import EXPECT_NOT_RUN, EXPECT_OK, EXPECT_OOM, BaselineCell
from bloomperf.store.results import Outcome
from bloomperf.store.telemetry import Telemetry
from tests.builders import GiB, ok_cell

CELL = ok_cell(2.0)  # ds-inference fp16 bs1: 2.00 ms/token, 40 GiB, loaded in 60 s
BASELINE = BaselineCell(
    "ds-inference",
    "fp16",
    1,
    EXPECT_OK,
    1.0,
    0.05,
    peak_memory_bytes=20 * GiB,
    peak_memory_tolerance=0.05,
    load_time_s=60.0,
)
MS = (
    "ms/token regressed: measured 2.00 ms vs expected 1.00 ms ±5%, ratio 2.000 (95% CI 1.980–2.020)"
)
MEMORY = (
    "peak memory regressed: measured 40.00 GiB vs expected 20.00 GiB ±5%, ratio 2.000 "
    "(95% CI 2.000–2.000)"
)
LOAD = (
    "load time not-judged: measured 60 s vs expected 60 s (not judged), ratio 1.000 "
    "(95% CI 1.000–1.000)"
)


def test_a_regression_names_every_regressed_metric_and_only_those() -> None:
    verdict = compare_cell(CELL, BASELINE)
    assert verdict.fails() == f"ds-inference-fp16-bs1: {MS}; {MEMORY}"
    assert verdict.explain() == f"{MS}; {MEMORY}; {LOAD}"


def test_an_untrustworthy_cell_says_why_then_every_metric() -> None:
    flagged = replace(CELL, telemetry=Telemetry(3, flags=("throttled", "hot")))
    verdict = compare_cell(flagged, BASELINE)
    assert verdict.fails() is None
    assert verdict.explain() == f"untrustworthy (throttled; hot); {MS}; {MEMORY}; {LOAD}"


def test_a_missing_judged_figure_names_only_the_figures_missing() -> None:
    """Peak memory is judged and missing; ms/token is judged and present; load time is
    measured but not judged: only peak memory is named."""
    cell = replace(CELL, samples_ms_per_token=(1.0, 1.0, 1.0), generate_memory=None)
    verdict = compare_cell(cell, replace(BASELINE, load_time_tolerance=None))
    assert verdict.status == "not-measured"
    assert verdict.fails() == (
        "ds-inference-fp16-bs1: ran, but the figures its baseline judges are missing: "
        "peak memory measured nothing vs expected 20.00 GiB ±5%"
    )
    both = replace(cell, load_time_s=None)
    verdict = compare_cell(both, replace(BASELINE, load_time_tolerance=0.1))
    assert verdict.fails() == (
        "ds-inference-fp16-bs1: ran, but the figures its baseline judges are missing: "
        "peak memory measured nothing vs expected 20.00 GiB ±5%; "
        "load time measured nothing vs expected 60 s ±10%"
    )


@pytest.mark.parametrize(
    ("cell", "expected", "line"),
    [
        (
            CELL,
            BaselineCell("ds-inference", "fp16", 1, EXPECT_OOM),
            "boundary moved up: ran at 2.00 ms where the baseline expects OOM",
        ),
        (
            CELL,
            BaselineCell("ds-inference", "fp16", 1, EXPECT_NOT_RUN),
            "boundary moved up: ran at 2.00 ms where the baseline expects OOM "
            "(beyond its OOM boundary)",
        ),
        (CELL, None, "no baseline cell; measured ok 2.00 ms"),
        (
            replace(CELL, outcome=Outcome.OOM, samples_ms_per_token=(), message="CUDA OOM"),
            None,
            "no baseline cell; measured oom: CUDA OOM",
        ),
        (
            replace(CELL, outcome=Outcome.OOM, samples_ms_per_token=()),
            BaselineCell("ds-inference", "fp16", 1, EXPECT_OOM),
            "out of memory, as the baseline expects",
        ),
        (replace(CELL, outcome=Outcome.ERROR, message="boom"), None, "error: boom"),
        (replace(CELL, outcome=Outcome.ERROR, message=""), BASELINE, "error"),
        (
            replace(CELL, outcome=Outcome.TIMEOUT, message="no reply in 60 s"),
            None,
            "timeout: no reply in 60 s",
        ),
    ],
)
def test_each_status_explains_itself_in_one_line(
    cell: object, expected: BaselineCell | None, line: str
) -> None:
    assert compare_cell(cell, expected).explain() == line  # type: ignore[arg-type]


def test_a_verdict_without_metrics_reads_its_status() -> None:
    for status in ("same", "improved"):
        assert CellVerdict("accelerate", "fp32", 1, status, "ok").explain() == status


def test_a_figure_without_a_tolerance_says_it_is_not_judged() -> None:
    assert compare_metric("load_time", [60.0], 60.0, None).describe() == (
        "measured 60 s vs expected 60 s (not judged), ratio 1.000 (95% CI 1.000–1.000)"
    )
