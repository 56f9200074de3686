"""The gate's rules that mutmut's first full run found unstated (docs/testing.md): what an
untrustworthy cell keeps, which figures a verdict lists, where the expectations came from, and
the exact line the gate prints for each way a run can be unjudged or incomplete.

These lines are what a nightly log shows a user; each is asserted whole, so that a reworded or
misrouted reason fails here rather than in a user's CI.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.compare import (
    compare_cell,
    compare_metric,
    compare_metrics,
    incompleteness,
    judge,
    judge_cell,
)
from bloomperf.backends.ds_checkpoint import HOST_RAM_SKIP
from bloomperf.store.baseline import EXPECT_OK, EXPECT_OOM, BaselineCell
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.telemetry import Telemetry
from tests.builders import cpu_baseline, ok_cell, tiny_run

ADVICE = (
    "(accept a baseline with `bloomperf baseline accept RESULTS`; --allow-no-baseline passes a "
    "run with nothing to compare)"
)


def cpu_cell(ms: float = 2.0, batch_size: int = 1, **changes: object) -> CellResult:
    return replace(
        ok_cell(ms, batch_size=batch_size), backend="accelerate", dtype="fp32", **changes
    )  # type: ignore[arg-type]


def expectation(
    ms: float = 2.0, batch_size: int = 1, tolerance: float | None = 0.05
) -> BaselineCell:
    return BaselineCell(
        "accelerate", "fp32", batch_size, EXPECT_OK, ms, ms_per_token_tolerance=tolerance
    )


# ---- untrustworthy --------------------------------------------------------------------------


@given(
    factor=st.sampled_from((0.5, 1.0, 1.6)),
    flags=st.lists(
        st.sampled_from(("thermal throttling", "SM clock moved 12 %", "power cap")),
        min_size=1,
        max_size=3,
        unique=True,
    ),
)
def test_an_untrustworthy_cell_keeps_its_figures_and_names_every_flag(
    factor: float, flags: list[str]
) -> None:
    """Throttling makes a cell untrustworthy, never hides its figures: the metrics are those of
    the same cell without flags, and the message lists every flag, in order."""
    plain = cpu_cell(2.0 * factor)
    flagged = replace(plain, telemetry=Telemetry(samples=4, flags=tuple(flags)))
    expected = expectation()
    verdict = compare_cell(flagged, expected)
    assert verdict.status == "untrustworthy"
    assert verdict.metrics == compare_cell(plain, expected).metrics
    assert verdict.message == "; ".join(flags)
    assert verdict.explain().startswith(f"untrustworthy ({'; '.join(flags)}); ms/token ")


# ---- which figures a verdict lists ----------------------------------------------------------


@given(
    tolerance=st.one_of(st.none(), st.floats(0.01, 0.5)),
    samples=st.lists(st.floats(0.5, 50.0), max_size=4),
)
def test_a_figure_without_a_baseline_keeps_its_tolerance_and_median(
    tolerance: float | None, samples: list[float]
) -> None:
    verdict = compare_metric("ms_per_token", samples, None, tolerance)
    assert verdict.status == "no-baseline"
    assert verdict.tolerance == tolerance
    assert verdict.expected is None
    if samples:
        assert verdict.measured == pytest.approx(sorted(samples)[len(samples) // 2]) or (
            len(samples) % 2 == 0
        )


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
@pytest.mark.parametrize("measured", [[1e300, 1e300, 1e300], [1e300]])
@pytest.mark.parametrize(
    ("metric", "status"), [("ms_per_token", "regressed"), ("serving_effective_rps", "improved")]
)
def test_an_unbounded_ratio_is_beyond_every_tolerance_in_its_metrics_direction(
    measured: list[float], metric: str, status: str
) -> None:
    """A ratio that overflows (a reading astronomically above its baseline) is beyond every
    tolerance: regressed for a time, improved for a throughput, never "same"."""
    verdict = compare_metric(metric, measured, 1e-10, 0.05)
    assert verdict.status == status


@pytest.mark.parametrize(
    ("metric", "factor", "status"),
    [
        ("ms_per_token", 1.2, "regressed"),
        ("ms_per_token", 0.8, "improved"),
        ("serving_effective_rps", 1.5, "improved"),
        ("serving_effective_rps", 0.5, "regressed"),
        ("serving_effective_rps", 1.01, "same"),
    ],
)
def test_a_figure_is_judged_in_its_metrics_direction(
    metric: str, factor: float, status: str
) -> None:
    """A throughput that rose is better, a time that rose is worse (beyond the tolerance)."""
    measured = [10.0 * factor * (1 + d) for d in (-0.001, 0.0, 0.001)]
    assert compare_metric(metric, measured, 10.0, 0.15).status == status


def test_a_sweep_under_another_design_than_its_baseline_cells_is_incomparable() -> None:
    """The cell's own reason (its serving sweep's settings), even when the run is comparable."""
    serving = {"serving": {"settings": {"rates": "2,4"}}}
    baseline = cpu_baseline(replace(expectation(), details={"serving": {"settings": {}}}))
    assert judge_cell(tiny_run(cpu_cell()), baseline, cpu_cell()).status == "same"
    baseline = cpu_baseline(
        replace(expectation(), details={"serving": {"settings": {"rates": "8"}}})
    )
    cell = cpu_cell(details=serving)
    verdict = judge_cell(tiny_run(cell), baseline, cell)
    assert verdict.status == "incomparable"
    assert "the sweep's --rates 2,4 is not the baseline's 8" in verdict.message


@pytest.mark.parametrize("has_load_time", [True, False])
@pytest.mark.parametrize("baseline_load_time", [True, False])
def test_a_figure_one_side_has_is_listed_and_one_neither_has_is_not(
    has_load_time: bool, baseline_load_time: bool
) -> None:
    cell = cpu_cell(load_time_s=30.0 if has_load_time else None)
    expected = replace(
        expectation(), load_time_s=30.0 if baseline_load_time else None, load_time_tolerance=0.1
    )
    listed = {m.metric for m in compare_metrics(cell, expected)}
    assert ("load_time" in listed) == (has_load_time or baseline_load_time)


def test_a_latency_figure_the_baseline_holds_no_cycles_of_is_not_judged() -> None:
    expected = replace(expectation(), figure_samples={"ttft_ms": ()}, figure_tolerances={})
    cell = cpu_cell(samples_step_ms=((50.0, 10.0, 10.0),) * 3)
    ttft = next(m for m in compare_metrics(cell, expected) if m.metric == "ttft_ms")
    assert ttft.status == "no-baseline" and ttft.expected is None and ttft.measured == 50.0


# ---- where the expectations came from -------------------------------------------------------


@pytest.mark.parametrize("path", ["", "/srv/baselines/cpu.tiny.json"])
def test_a_comparison_names_the_baseline_file_or_else_its_topology(path: str) -> None:
    baseline = replace(cpu_baseline(expectation()), path=path)
    comparison = judge(tiny_run(cpu_cell()), baseline)
    assert comparison.baseline == (path or "cpu")
    assert comparison.incomparable == ""
    assert not comparison.failed and comparison.unjudged == "" and comparison.incomplete == ""


def test_judge_cell_is_not_strict_unless_asked() -> None:
    """A cell that ran where the baseline ran out of memory is reported, and fails only under
    --strict: the plugin's per-cell judgement defaults to the gate's default."""
    baseline = cpu_baseline(BaselineCell("accelerate", "fp32", 1, EXPECT_OOM))
    run = tiny_run(cpu_cell())
    assert judge_cell(run, baseline, run.cells[0]).fails() is None
    assert judge_cell(run, baseline, run.cells[0], strict=True).fails() is not None


# ---- the gate's lines for a run that was not judged ------------------------------------------


def test_no_baseline_at_all() -> None:
    comparison = judge(tiny_run(cpu_cell()), None)
    assert comparison.baseline == "no baseline"
    assert comparison.unjudged == f"nothing judged: no baseline {ADVICE}"
    named = judge(tiny_run(cpu_cell()), None, no_baseline="no baseline in /srv/b for cpu")
    assert named.unjudged == f"nothing judged: no baseline in /srv/b for cpu {ADVICE}"


def test_a_baseline_without_the_runs_cells() -> None:
    baseline = replace(cpu_baseline(expectation(batch_size=64)), path="/srv/b/cpu.tiny.json")
    comparison = judge(tiny_run(cpu_cell(), cpu_cell(batch_size=2)), baseline)
    assert comparison.unjudged == (
        f"nothing judged: /srv/b/cpu.tiny.json has none of the run's cells {ADVICE}"
    )


def test_a_baseline_that_judges_no_figure() -> None:
    baseline = replace(cpu_baseline(expectation(tolerance=None)), path="/srv/b/cpu.tiny.json")
    comparison = judge(tiny_run(cpu_cell()), baseline)
    assert [c.status for c in comparison.cells] == ["same"]
    assert comparison.unjudged == (
        "nothing judged: /srv/b/cpu.tiny.json gives no figure of the run's cells a tolerance "
        + ADVICE
    )
    judged = judge(tiny_run(cpu_cell()), replace(baseline, cells=(expectation(),)))
    assert judged.unjudged == "" and not judged.failed


def test_another_topologys_baseline() -> None:
    baseline = replace(cpu_baseline(expectation()), topology="8xA100-SXM4-80GB")
    comparison = judge(tiny_run(cpu_cell()), baseline)
    reason = "topology cpu is not the baseline's 8xA100-SXM4-80GB"
    assert comparison.incomparable == reason
    assert comparison.unjudged == f"nothing judged: incomparable: {reason} {ADVICE}"


def test_every_cell_skipped_against_a_baseline() -> None:
    skipped = cpu_cell(outcome=Outcome.SKIPPED, samples_ms_per_token=(), message="beyond")
    comparison = judge(tiny_run(skipped), cpu_baseline(expectation()), allow_incomplete=True)
    assert comparison.unjudged == f"nothing judged: every cell was skipped {ADVICE}"


@given(statuses=st.lists(st.sampled_from(("ok", "skipped", "other-batch")), min_size=1, max_size=4))
def test_unjudged_exactly_when_no_cell_was_compared(statuses: list[str]) -> None:
    """Over runs of judged, skipped and baseline-less cells: the run is unjudged exactly when
    no cell met a baseline cell with a tolerance; --allow-no-baseline clears only that."""
    cells = []
    for i, status in enumerate(statuses):
        if status == "ok":
            cells.append(cpu_cell(batch_size=1 + 100 * i))
        elif status == "skipped":
            cells.append(
                cpu_cell(batch_size=1 + 100 * i, outcome=Outcome.SKIPPED, samples_ms_per_token=())
            )
        else:
            cells.append(cpu_cell(batch_size=2 + 100 * i))
    baseline = cpu_baseline(*(expectation(batch_size=1 + 100 * i) for i in range(len(statuses))))
    comparison = judge(tiny_run(*cells), baseline, allow_incomplete=True)
    assert bool(comparison.unjudged) == ("ok" not in statuses)
    allowed = judge(tiny_run(*cells), baseline, allow_incomplete=True, allow_no_baseline=True)
    assert allowed.unjudged == ""
    assert allowed.failed == any(c.fails() for c in allowed.cells)


# ---- the gate's lines for a run that measured nothing ---------------------------------------


def host_ram_skip(batch_size: int, why: str) -> CellResult:
    return cpu_cell(
        batch_size=batch_size,
        outcome=Outcome.SKIPPED,
        samples_ms_per_token=(),
        message=f"{HOST_RAM_SKIP}{why}",
    )


def test_a_run_skipped_for_host_ram_says_so_first() -> None:
    run = tiny_run(host_ram_skip(1, "needs 350 GiB, has 24"), host_ram_skip(8, "other"))
    assert incompleteness(run) == (
        "nothing measured: every one of the 2 cells was skipped for host RAM "
        "(needs 350 GiB, has 24) (--allow-incomplete accepts that)"
    )


@pytest.mark.parametrize(
    "other",
    [
        cpu_cell(batch_size=8, outcome=Outcome.SKIPPED, samples_ms_per_token=(), message="x"),
        cpu_cell(
            batch_size=8, outcome=Outcome.ERROR, samples_ms_per_token=(), message=HOST_RAM_SKIP
        ),
    ],
)
def test_a_run_skipped_partly_for_other_reasons_is_just_unmeasured(other: CellResult) -> None:
    run = tiny_run(host_ram_skip(1, "needs 350 GiB"), other)
    assert incompleteness(run) == (
        "nothing measured: 2 cells in the results, none ran (--allow-incomplete accepts that)"
    )


@given(
    outcomes=st.lists(st.sampled_from(list(Outcome)), min_size=1, max_size=5),
    complete=st.booleans(),
)
def test_a_run_is_incomplete_when_nothing_ran_or_it_did_not_finish(
    outcomes: list[Outcome], complete: bool
) -> None:
    cells = [
        cpu_cell(
            batch_size=1 + i, outcome=o, samples_ms_per_token=() if o != Outcome.OK else (2.0,)
        )
        for i, o in enumerate(outcomes)
    ]
    run = replace(tiny_run(*cells), complete=complete)
    measured = sum(o in (Outcome.OK, Outcome.OOM) for o in outcomes)
    gap = incompleteness(run)
    if measured == 0:
        assert gap == (
            f"nothing measured: {len(cells)} cells in the results, none ran "
            "(--allow-incomplete accepts that)"
        )
    elif not complete:
        assert gap == (
            f"incomplete run: the results say the run did not finish ({measured} cells "
            "measured; --allow-incomplete accepts that)"
        )
    else:
        assert gap is None
    judged = judge(run, None, allow_no_baseline=True)
    assert judged.incomplete == (gap or "")
    allowed = judge(run, None, allow_no_baseline=True, allow_incomplete=True)
    assert allowed.incomplete == ""
    assert allowed.failed == any(c.fails() for c in allowed.cells)


@pytest.mark.parametrize("strict", [False, True])
def test_a_run_of_expected_ooms_was_judged(strict: bool) -> None:
    """Outcomes against expected outcomes are a judgement: a run whose every cell ran out of
    memory where the baseline says it does passes, and one that ran where the baseline ran out
    of memory fails only under --strict; neither is "nothing judged"."""
    oom = cpu_cell(outcome=Outcome.OOM, samples_ms_per_token=(), message="out of memory")
    baseline = cpu_baseline(BaselineCell("accelerate", "fp32", 1, EXPECT_OOM))
    expected = judge(tiny_run(oom), baseline, strict=strict)
    assert expected.unjudged == "" and not expected.failed
    moved = judge(tiny_run(cpu_cell()), baseline, strict=strict)
    assert moved.unjudged == "" and moved.failed == strict
