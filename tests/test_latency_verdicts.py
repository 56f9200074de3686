"""TTFT and TPOT judged only against baselines recorded from runs, with per-metric tolerances."""

from __future__ import annotations

from bloomperf.analysis.compare import judge
from bloomperf.cli.diff import baseline_of_run
from bloomperf.store.baseline.codec import cell_from_dict, cell_to_dict
from bloomperf.store.results import CellResult, Outcome, RunResult
from tests.builders import bloom_run


def cycles(ttft: float, decode: float, tail: float, n: int = 7) -> tuple[tuple[float, ...], ...]:
    """n cycles of 1 prefill + 99 decode steps, the two slowest (the p99 of 99) being the tail."""
    return tuple(
        (ttft * (1 + 0.002 * i), *[decode * (1 + 0.001 * i)] * 97, *[tail * (1 + 0.002 * i)] * 2)
        for i in range(n)
    )


def run_of(steps: tuple[tuple[float, ...], ...]) -> RunResult:
    cell = CellResult(
        "ds-inference", "fp16", 1, Outcome.OK,
        samples_ms_per_token=tuple(sum(s) / 100 for s in steps), samples_step_ms=steps,
    )  # fmt: skip
    return bloom_run(cell, cycles=len(steps))


def verdicts(before: RunResult, after: RunResult) -> dict[str, str]:
    baseline = baseline_of_run(before, "before.json", None)
    return {m.metric: m.status for m in judge(after, baseline).cells[0].metrics}


def test_a_tail_that_grows_past_its_wider_tolerance_regresses_and_a_median_past_its_own() -> None:
    before = run_of(cycles(40.0, 20.0, 60.0))
    # The p99 moves +10 %: within its 15 %; +50 %: regressed.
    assert verdicts(before, run_of(cycles(40.0, 20.0, 66.0)))["tpot_p99_ms"] == "same"
    assert verdicts(before, run_of(cycles(40.0, 20.0, 90.0)))["tpot_p99_ms"] == "regressed"
    # The median decode step +10 %: past TPOT's 5 %; TTFT +50 %: past its 10 %.
    moved = verdicts(before, run_of(cycles(40.0, 22.0, 66.0)))
    assert moved["tpot_ms"] == "regressed"
    assert verdicts(before, run_of(cycles(60.0, 20.0, 60.0)))["ttft_ms"] == "regressed"
    assert verdicts(before, before)["ttft_ms"] == "same"


def test_latency_tolerances_travel_in_the_baseline_file_and_blog_cells_have_none() -> None:
    baseline = baseline_of_run(run_of(cycles(40.0, 20.0, 60.0)), "before.json", None)
    cell = baseline.cells[0]
    assert cell.figure_tolerances == {"ttft_ms": 0.10, "tpot_ms": 0.05, "tpot_p99_ms": 0.15}
    assert cell_from_dict(cell_to_dict(cell), "b.json") == cell
    blog = cell_from_dict(
        {"backend": "ds-inference", "dtype": "fp16", "batch_size": 1, "outcome": "ok",
         "ms_per_token": 44.0, "ms_per_token_tolerance": 0.05},
        "blog.json",
    )  # fmt: skip
    assert blog.figure_samples == {}
