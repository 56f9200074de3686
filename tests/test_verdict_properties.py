"""Properties of a cell's verdict and of the figures every reader shows, over the whole space.

* A cell's verdict combines its metrics: for every judged metric, and every direction of the
  others (faster, unchanged, not measured), regressing that metric alone fails the cell, and
  improving it alone never does.
* A cell's peak is the larger of its load and generation peaks, whichever is larger, and every
  reader (verdict, table, baseline, history) uses that figure.
* Robust figures: one outlier cycle moves no reported figure (the table, an accepted baseline,
  a history night, the latency summary) outside the span of the other cycles: the figure is the
  median, not the mean.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bloomperf.analysis.compare import compare_cell, compare_metric, judge
from bloomperf.analysis.stats import estimate_ratio
from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.core.formatting import GIB, ms_number, plain
from bloomperf.core.metrics import BUILT_INS, label_of
from bloomperf.render.comparison import render_comparison
from bloomperf.render.table import render_run_table
from bloomperf.store.baseline import BaselineCell
from bloomperf.store.baseline.accept import accept_run, baseline_cell_of
from bloomperf.store.history.nights import add_to_history, load_history, series
from bloomperf.store.latency import per_cycle, percentile, summarize_steps
from bloomperf.store.results import CellResult, MemoryReading, Outcome, table_order
from bloomperf.store.results.codec import save_run
from tests.builders import BLOG_TOPOLOGY, bloom_run, nvml

# What a run's cell yields: ms_per_token, peak_memory, load_time, ttft_ms, tpot_ms, tpot_p99_ms
# (the serving_* metrics come from `bloomperf serve`'s cells: tests/test_serving_gate.py).
JUDGED = tuple(m.name for m in BUILT_INS if not m.name.startswith("serving_"))
TOLERANCES = {
    "ms_per_token": 0.05,
    "peak_memory": 0.05,
    "load_time": 0.10,
    "ttft_ms": 0.10,
    "tpot_ms": 0.05,
    "tpot_p99_ms": 0.15,
}
# Small, fixed cycle-to-cycle jitter: enough spread for a bootstrap interval, far below every
# tolerance.
JITTER = (0.995, 1.0, 1.004, 0.998, 1.002, 0.997, 1.003)
SAME, FASTER, ABSENT = "same", "faster", "absent"
LATENCY = frozenset({"ttft_ms", "tpot_ms", "tpot_p99_ms"})


def cell_of(factors: dict[str, float], absent: frozenset[str] = frozenset()) -> CellResult:
    """An ok cell whose metrics are each ``factors[metric]`` times the reference cell's.

    Each metric moves alone: ms/token has its own cycles; a cycle's steps are a prefill (TTFT),
    four ordinary decode steps (TPOT p50) and one slow one (the p99 tail).
    """
    f = {m: factors.get(m, 1.0) for m in JUDGED}
    steps = tuple(
        (50.0 * f["ttft_ms"] * j, *(10.0 * f["tpot_ms"] * j,) * 4, 30.0 * f["tpot_p99_ms"] * j)
        for j in JITTER
    )
    return CellResult(
        "accelerate",
        "bf16",
        8,
        Outcome.OK,
        tuple(2.0 * f["ms_per_token"] * j for j in JITTER),
        load_time_s=None if "load_time" in absent else 120.0 * f["load_time"],
        load_memory=None if "peak_memory" in absent else nvml(20.0),
        generate_memory=None if "peak_memory" in absent else nvml(40.0 * f["peak_memory"]),
        samples_step_ms=() if absent & LATENCY else steps,
    )


REFERENCE = cell_of({})


def expected() -> BaselineCell:
    """The reference cell accepted as a baseline, every metric judged."""
    accepted = baseline_cell_of(REFERENCE, None, BLOG_TOPOLOGY, "p")
    return replace(
        accepted,
        ms_per_token_tolerance=TOLERANCES["ms_per_token"],
        peak_memory_tolerance=TOLERANCES["peak_memory"],
        load_time_tolerance=TOLERANCES["load_time"],
        figure_tolerances={m: TOLERANCES[m] for m in per_cycle(REFERENCE.samples_step_ms)},
    )


def test_the_reference_cell_is_the_same_as_its_own_baseline() -> None:
    verdict = compare_cell(REFERENCE, expected())
    assert verdict.status == "same"
    assert {m.metric for m in verdict.metrics} == set(JUDGED)
    assert all(m.status == "same" for m in verdict.metrics)


others = st.fixed_dictionaries({m: st.sampled_from((SAME, FASTER, ABSENT)) for m in JUDGED})


def build(metric: str, factor: float, directions: dict[str, str], faster: float) -> CellResult:
    """``metric`` times ``factor``; every other metric faster, unchanged or not measured."""
    factors = {m: faster for m, d in directions.items() if d == FASTER and m != metric}
    factors[metric] = factor
    # A cell that ran has cycles (ms/token is never absent); latency is absent as a whole.
    absent = {m for m, d in directions.items() if d == ABSENT} - {metric, "ms_per_token"}
    if metric in LATENCY:
        absent -= LATENCY
    elif absent & LATENCY:
        absent |= LATENCY
    return cell_of(factors, frozenset(absent))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metric=st.sampled_from(JUDGED),
    worse=st.floats(1.25, 2.5),
    faster=st.floats(0.3, 0.8),
    directions=others,
)
def test_regressing_any_one_metric_fails_the_cell_whatever_the_others_do(
    metric: str, worse: float, faster: float, directions: dict[str, str]
) -> None:
    cell = build(metric, worse, directions, faster)
    verdict = compare_cell(cell, expected())
    assert verdict.status == "regressed", (metric, directions, verdict.explain())
    assert verdict.metric(metric) is not None
    assert verdict.metric(metric).status == "regressed"  # type: ignore[union-attr]
    failure = verdict.fails()
    assert failure is not None and f"{label_of(metric)} regressed" in failure
    # The whole run fails with it, through the gate's own rule.
    # No baseline: nothing judged fails the gate, unless a first run opts in.
    assert judge(bloom_run(cell), None).unjudged
    assert not judge(bloom_run(cell), None, allow_no_baseline=True).failed
    run = bloom_run(cell, topology=BLOG_TOPOLOGY)
    assert judge_against_reference(run).failed


def judge_against_reference(run):  # type: ignore[no-untyped-def]
    baseline = accept_run(bloom_run(REFERENCE), None, source="reference", force=True)
    cells = tuple(expected() if c.id == REFERENCE.id else c for c in baseline.cells)
    return judge(run, replace(baseline, cells=cells))


@settings(max_examples=80, deadline=None)
@given(metric=st.sampled_from(JUDGED), faster=st.floats(0.3, 0.8), directions=others)
def test_improving_metrics_never_fails_and_reads_improved(
    metric: str, faster: float, directions: dict[str, str]
) -> None:
    cell = build(metric, faster, directions, faster)
    verdict = compare_cell(cell, expected())
    if any(m.status == "not-measured" for m in verdict.metrics):
        # A judged figure missing is never a pass: deleting samples cannot pass.
        assert verdict.status == "not-measured" and verdict.fails() is not None
        return
    assert verdict.fails() is None
    assert verdict.status == "improved", (metric, directions, verdict.explain())


@settings(max_examples=60, deadline=None)
@given(
    metric=st.sampled_from(JUDGED),
    worse=st.floats(1.25, 2.5),
    faster=st.floats(0.3, 0.8),
    order=st.permutations(JUDGED),
)
def test_a_regression_outranks_any_number_of_improvements(
    metric: str, worse: float, faster: float, order: list[str]
) -> None:
    """Every other metric faster: the verdict is still regressed (no check order can hide it)."""
    factors = {m: faster for m in order}
    factors[metric] = worse
    verdict = compare_cell(cell_of(factors), expected())
    assert verdict.status == "regressed"
    assert [m.metric for m in verdict.metrics if m.status == "regressed"] == [metric]


# ---- peak memory -----------------------------------------------------------------------------

peaks = st.one_of(st.none(), st.integers(1, 2**40))


def reading(peak: int | None) -> MemoryReading | None:
    return None if peak is None else MemoryReading("nvml", peak)


@given(load=peaks, generate=peaks)
def test_a_cells_peak_is_the_larger_of_its_load_and_generate_peaks(
    load: int | None, generate: int | None
) -> None:
    cell = replace(REFERENCE, load_memory=reading(load), generate_memory=reading(generate))
    known = [p for p in (load, generate) if p is not None]
    assert cell.peak_memory_bytes == (max(known) if known else None)
    accepted = baseline_cell_of(cell, None, BLOG_TOPOLOGY, "p")
    assert accepted.peak_memory_bytes == cell.peak_memory_bytes
    table = render_run_table(bloom_run(cell))
    if known:
        assert f"{max(known) / GIB:.2f}" in table.splitlines()[-1]


@settings(max_examples=60, deadline=None)
@given(
    generate=st.floats(0.5, 1.0),
    load=st.floats(1.3, 3.0),
    swap=st.booleans(),
)
def test_a_load_peak_above_the_generation_peak_is_judged(
    generate: float, load: float, swap: bool
) -> None:
    """The baseline's 40 GiB peak; the load phase alone grows past it: regressed."""
    big, small = nvml(40.0 * load), nvml(40.0 * generate)
    cell = replace(REFERENCE, load_memory=big, generate_memory=small)
    if swap:
        cell = replace(REFERENCE, load_memory=small, generate_memory=big)
    verdict = compare_cell(cell, expected())
    assert verdict.metric("peak_memory").status == "regressed"  # type: ignore[union-attr]
    assert verdict.fails() is not None


# ---- robust figures --------------------------------------------------------------------------

cycles = st.lists(st.floats(1.0, 100.0), min_size=3, max_size=9)
outliers = st.one_of(st.floats(1e3, 1e6), st.floats(1e-3, 0.5))


def history_figure(tmp: Path, cell: CellResult, metric: str) -> float:
    """The figure a history night shows for ``cell``, through the files the nightly job writes."""
    folder, result = tmp / "history", tmp / "night.json"
    folder.mkdir(exist_ok=True)
    save_run(bloom_run(cell, started_at="2026-10-01T01:30:00Z"), result)
    add_to_history(result, folder, date(2026, 10, 1))
    ((_, value),) = series(load_history(folder), cell.id, metric)
    for path in folder.iterdir():
        path.unlink()
    return value


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(samples=cycles, outlier=outliers)
def test_one_outlier_cycle_moves_no_reported_figure_beyond_the_other_cycles(
    tmp_path: Path, samples: list[float], outlier: float
) -> None:
    cell = replace(REFERENCE, samples_ms_per_token=tuple(samples), samples_step_ms=())
    spoiled = replace(cell, samples_ms_per_token=(*samples, outlier))
    low, high = min(samples), max(samples)
    median = statistics.median((*samples, outlier))
    for figure in (
        spoiled.ms_per_token,
        baseline_cell_of(spoiled, None, BLOG_TOPOLOGY, "p").ms_per_token,
        history_figure(tmp_path, spoiled, "ms_per_token"),
    ):
        assert figure is not None
        assert low <= figure <= high
        assert figure == median
    assert ms_number(median) in render_run_table(bloom_run(spoiled)).splitlines()[3]
    # The baseline keeps every cycle for the statistics, the outlier included.
    assert baseline_cell_of(spoiled, None, BLOG_TOPOLOGY, "p").ms_per_token_samples == (
        *samples,
        outlier,
    )


@settings(max_examples=60, deadline=None)
@given(
    prefills=cycles,
    decode=st.lists(st.floats(1.0, 100.0), min_size=3, max_size=9),
    outlier=outliers,
)
def test_one_outlier_cycle_or_step_moves_no_latency_figure_beyond_the_others(
    prefills: list[float], decode: list[float], outlier: float
) -> None:
    runs = [(p, *decode) for p in prefills]
    summary = summarize_steps([*runs, (outlier, *decode)])
    assert summary is not None
    assert min(prefills) <= summary.ttft_ms <= max(prefills)
    assert summary.ttft_ms == statistics.median((*prefills, outlier))
    # One slow decode step in one cycle: the TPOT median stays among the others.
    slow = summarize_steps([*runs[1:], (prefills[0], *decode[:-1], outlier)])
    assert slow is not None
    assert min(decode) <= slow.tpot_ms <= max(decode)
    per = per_cycle([*runs, (outlier, *decode)])
    assert per["ttft_ms"] == (*prefills, outlier)
    assert per["tpot_ms"] == (statistics.median(decode),) * (len(prefills) + 1)


@settings(max_examples=40, deadline=None)
@given(metric=st.sampled_from(JUDGED), factor=st.floats(0.5, 2.0))
def test_each_metric_is_judged_against_the_baselines_own_cycles(metric: str, factor: float) -> None:
    """Where the baseline kept its cycles (ms/token, latency), both sides are resampled; a
    figure kept alone (memory, load time) is one value."""
    cell = cell_of({metric: factor})
    verdict = compare_cell(cell, expected())
    judged = verdict.metric(metric)
    assert judged is not None and judged.estimate is not None
    base = expected()
    if metric == "ms_per_token":
        mine, theirs = cell.samples_ms_per_token, base.ms_per_token_samples
    elif metric in LATENCY:
        mine, theirs = per_cycle(cell.samples_step_ms)[metric], base.figure_samples[metric]
    else:
        return
    assert judged.estimate == estimate_ratio(mine, theirs)
    assert judged.measured == statistics.median(mine)
    assert judged.expected == statistics.median(theirs)


@given(
    readings=st.lists(st.floats(1.0, 100.0), min_size=1, max_size=7),
    zeros=st.integers(1, 3),
)
def test_zero_readings_are_dropped_and_a_zero_baseline_is_no_baseline(
    readings: list[float], zeros: int
) -> None:
    measured = [0.0] * zeros + readings
    verdict = compare_metric("ms_per_token", measured, statistics.median(readings), 0.05)
    assert verdict.measured == statistics.median(readings)
    assert verdict.status == "same"
    none = compare_metric("ms_per_token", readings, 0.0, 0.05)
    assert (none.status, none.measured, none.expected) == (
        "no-baseline",
        statistics.median(readings),
        None,
    )
    missing = compare_metric("ms_per_token", [0.0] * zeros, 10.0, 0.05)
    assert (missing.status, missing.expected, missing.tolerance) == ("not-measured", 10.0, 0.05)


@settings(max_examples=40, deadline=None)
@given(
    factors=st.fixed_dictionaries({m: st.floats(0.5, 2.0) for m in JUDGED}),
    gpus=st.integers(0, 8),
)
def test_the_latency_shown_beside_a_verdict_is_the_cells_own(
    factors: dict[str, float], gpus: int
) -> None:
    cell = cell_of(factors)
    if gpus:
        per_device = (int(40 * GIB / gpus),) * gpus
        cell = replace(cell, generate_memory=MemoryReading("nvml", 40 * GIB, per_device))
    else:
        cell = replace(cell, load_memory=None, generate_memory=MemoryReading("rss", GIB))
    steps = summarize_steps(cell.samples_step_ms)
    assert steps is not None and cell.ms_per_token is not None
    rate = 1000.0 / cell.ms_per_token
    shown = compare_cell(cell, expected()).latency
    assert shown == {
        "ttft_ms": steps.ttft_ms,
        "tpot_ms": steps.tpot_ms,
        "tpot_p90_ms": steps.tpot_p90_ms,
        "tpot_p99_ms": steps.tpot_p99_ms,
        "tokens_per_s": rate,
        "tokens_per_s_per_gpu": rate / gpus if gpus else None,
    }
    assert compare_cell(replace(cell, samples_step_ms=()), expected()).latency["ttft_ms"] is None


@given(
    cells=st.lists(
        st.tuples(
            st.sampled_from((*BACKEND_NAMES, "zz-other")),
            st.sampled_from((*DTYPES, "zz")),
            st.integers(1, 512),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_tables_sort_by_the_catalogs_backends_then_dtypes_then_batch(
    cells: list[tuple[str, str, int]],
) -> None:
    made = [CellResult(b, d, n, Outcome.OK) for b, d, n in cells]

    def rank(name: str, known: tuple[str, ...]) -> int:
        return known.index(name) if name in known else len(known) + 100

    expected_order = sorted(
        made, key=lambda c: (rank(c.backend, BACKEND_NAMES), rank(c.dtype, DTYPES), c.batch_size)
    )

    # The cells themselves, not their keys: a constant key would give equal lists of keys.
    def named(order: list[CellResult]) -> list[tuple[str, str, int]]:
        return [(c.backend, c.dtype, c.batch_size) for c in order]

    assert named(sorted(made, key=table_order)) == named(expected_order)
    for c in made:
        if c.backend not in BACKEND_NAMES or c.dtype not in DTYPES:
            assert max(table_order(c)[:2]) >= max(len(BACKEND_NAMES), len(DTYPES))


@given(
    values=st.lists(st.floats(0.1, 1000.0), min_size=1, max_size=40),
    percent=st.floats(0.0, 100.0),
)
def test_a_percentile_is_numpys_linear_percentile(values: list[float], percent: float) -> None:
    assert percentile(values, percent) == pytest.approx(float(np.percentile(values, percent)))


@given(
    cycles=st.lists(st.lists(st.floats(0.1, 100.0), min_size=2, max_size=6), min_size=1, max_size=5)
)
def test_every_cycle_with_a_decode_step_has_its_latency_figures(cycles: list[list[float]]) -> None:
    """Two steps (a prefill and one decode step) are enough; each cycle's figures are its own."""
    per = per_cycle(cycles)
    assert per["ttft_ms"] == tuple(c[0] for c in cycles)
    assert per["tpot_ms"] == tuple(statistics.median(c[1:]) for c in cycles)
    assert per["tpot_p99_ms"] == tuple(
        pytest.approx(float(np.percentile(c[1:], 99.0))) for c in cycles
    )
    assert summarize_steps(cycles) is not None
    assert per_cycle([*cycles, [5.0]]) == {} and summarize_steps([*cycles, [5.0]]) is None


@settings(max_examples=60, deadline=None)
@given(
    metric=st.sampled_from(JUDGED),
    worse=st.floats(1.25, 2.5),
    which=st.sampled_from((8, 16)),
    larger=st.floats(0.5, 2.0),
)
@example(metric="load_time", worse=2.0, which=8, larger=1.0)
@example(metric="peak_memory", worse=1.5, which=8, larger=0.5)
@example(metric="peak_memory", worse=1.5, which=16, larger=1.2)
@example(metric="ms_per_token", worse=1.5, which=16, larger=1.0)
def test_a_regression_is_said_in_the_table_where_its_metric_is_shown(
    metric: str, worse: float, which: int, larger: float
) -> None:
    """Two cells of one row, one of them regressed in ``metric``: the failure lines say it, the
    markdown table says it where the metric is shown (the cell for ms/token and memory, the
    row's memory and load columns), and the row's memory figure is its largest peak."""
    second = replace(cell_of({"peak_memory": larger}), batch_size=16)
    reference = bloom_run(REFERENCE, replace(REFERENCE, batch_size=16))
    baseline = accept_run(reference, None, source="reference", force=True)
    baseline = replace(
        baseline, cells=tuple(replace(expected(), batch_size=c.batch_size) for c in baseline.cells)
    )
    cells = {8: REFERENCE, 16: second}
    cells[which] = replace(build(metric, worse, {}, 1.0), batch_size=which)
    if metric == "peak_memory" and which == 16:
        cells[16] = replace(cell_of({"peak_memory": max(worse, larger * worse)}), batch_size=16)
    comparison = judge(bloom_run(*cells.values()), baseline)
    moved = {c.batch_size for c in comparison.cells for m in c.metrics if m.status == "regressed"}
    assert which in moved
    text = render_comparison(comparison, "text", width=400)  # a terminal: colour marks it
    for failure in comparison.failures():
        assert plain(failure) in text
    markdown = render_comparison(comparison, "markdown")  # a page: words say it
    row = next(line for line in markdown.splitlines() if line.startswith("| Accelerate"))
    peaks = [c.peak_memory_bytes or 0 for c in cells.values()]
    figure = max(peaks) / GIB
    assert (f"≤ {figure:.0f} GiB" if figure >= 10 else f"≤ {figure:.2g} GiB") in row
    if metric == "peak_memory":
        assert f"REGRESSED at {', '.join(f'bs{b}' for b in sorted(moved))}" in row
        assert "memory" in row and row.count("REGRESSED") >= 2  # the cell and the column
    elif metric == "ms_per_token" or (metric == "load_time" and which == 8):
        assert "REGRESSED" in row  # the row's load column shows its first cell's load


@settings(max_examples=30, deadline=None)
@given(kept=st.sets(st.sampled_from((1, 8, 16, 32)), min_size=1))
def test_every_format_names_the_baselines_cells_a_run_left_out(kept: set[int]) -> None:
    """A run of a row that skipped some of the baseline's batch sizes: each format names them
    (a left-out cell is neither a pass nor a failure, and must not go unsaid)."""
    sizes = (1, 8, 16, 32)
    baseline = accept_run(
        bloom_run(*(replace(REFERENCE, batch_size=b) for b in sizes)), None, source="r", force=True
    )
    run = bloom_run(*(replace(REFERENCE, batch_size=b) for b in sorted(kept)))
    comparison = judge(run, baseline)
    left_out = [f"accelerate-bf16-bs{b}" for b in sizes if b not in kept]
    assert list(comparison.missing) == left_out
    for fmt in ("text", "markdown"):
        shown = render_comparison(comparison, fmt, width=400)
        said = [line for line in shown.splitlines() if "not in the results" in line]
        assert bool(said) == bool(left_out), (fmt, shown)
        assert all(cell in " ".join(said) for cell in left_out)
