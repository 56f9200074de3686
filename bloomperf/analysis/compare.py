"""Verdicts: the ONE pass/fail rule, shared by the pytest plugin, `bloomperf run` and `diff`.

Each measured cell is judged against its baseline cell, per metric of the registry
(``bloomperf.core.metrics``, each with its direction) and per OOM boundary. A metric check is
a small frozen object whose ``fails()`` returns a message or None; a cell's verdict combines its
outcome with its metric checks:

* ``same`` / ``regressed`` / ``improved``: ran, as the baseline expected; the worst metric decides.
* ``expected-oom``: ran out of memory where the baseline did (passes).
* ``unexpected-oom``: ran out of memory where the baseline ran (fails).
* ``boundary-moved-up``: ran where the baseline ran out of memory (reported; fails if strict).
* ``not-measured``: ran, but a figure its baseline judges (ms/token on a GPU, peak memory on
  CPU, ...) is missing from the results (fails: deleting a figure must never turn a fail into a
  pass).
* ``no-baseline``: nothing to compare with (recorded; fails no cell). This holds for an OOM too:
  the baseline is the only expectation the gate judges against, and an OOM is a measurement
  (where the boundary lies), not a breakage. A user gating an upgrade accepts a baseline first;
  until then an OOM is reported, with what the memory model predicted, and the gate passes.
* ``incomparable``: the run's topology, model or workload is not the baseline's (never fails,
  never judged: another GPU model's figures say nothing about a regression).
* ``error`` / ``timeout``: the cell did not finish (fails: nothing was measured), whatever the
  baseline says, with no baseline or an incomparable one as well.
* ``skipped``: not run (e.g. beyond the OOM boundary without probing).

A whole run fails too when it measured nothing (no cell ran or ran out of memory) or did not
finish (``complete: false``), unless the caller allows incomplete runs: an empty or interrupted
results file must never pass a gate. It fails as well when no cell was judged (every cell
``no-baseline``, ``incomparable`` or ``skipped``: no baseline, another topology's, an empty
one), unless the caller allows a run without a baseline (``--allow-no-baseline``, a first run):
a pass means something was measured and compared (docs/gate.md). ``judge`` applies all of
this; ``judge_cell`` is the same rule for one cell, as the plugin needs it while the run is
still going. The statuses and the verdict
types (with the text that explains them) are ``verdicts``'s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME, classify_ratio, estimate_ratio
from bloomperf.analysis.verdicts import (
    BOUNDARY_MOVED_UP,
    ERROR,
    EXPECTED_OOM,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_JUDGED,
    NOT_MEASURED,
    SKIPPED,
    TIMEOUT,
    UNEXPECTED_OOM,
    UNJUDGED,
    UNTRUSTWORTHY,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.backends.ds_checkpoint import HOST_RAM_SKIP
from bloomperf.core.metrics import LOWER, Metric, metrics
from bloomperf.core.metrics import metric as find
from bloomperf.store.baseline import (
    EXPECT_OK,
    Baseline,
    BaselineCell,
    expected_cell,
    expected_figure,
)
from bloomperf.store.results import CellResult, Outcome, RunResult, latency_to_dict, table_order
from bloomperf.store.serving import sweep_mismatch

# ---- comparing ------------------------------------------------------------------------------


def compare_metric(
    metric: Metric | str,
    measured: Sequence[float],
    expected: float | None,
    tolerance: float | None,
    expected_samples: Sequence[float] = (),
) -> MetricVerdict:
    """One metric (a record, or a registered name) of one cell: the median of ``measured``
    against the baseline figure."""
    metric = find(metric) if isinstance(metric, str) else metric
    # A zero or negative reading is a broken measurement, not a figure to divide by.
    samples = [float(v) for v in measured if v > 0]
    point = statistics.median(samples) if samples else None
    name = metric.name
    if expected is None or expected <= 0:
        return MetricVerdict(name, NO_BASELINE, point, None, tolerance)
    if not samples:
        return MetricVerdict(name, NOT_MEASURED, None, expected, tolerance)
    reference: float | Sequence[float] = expected_samples if expected_samples else expected
    estimate = estimate_ratio(samples, reference)
    if tolerance is None:
        status = NOT_JUDGED
    elif not all(math.isfinite(x) for x in (estimate.ratio, estimate.low, estimate.high)):
        # Positive finite figures give a non-finite ratio only by overflow: a reading
        # astronomically above its baseline (one far below underflows to 0, a finite ratio).
        status = REGRESSED if metric.direction == LOWER else IMPROVED
    else:
        status = classify_ratio(estimate, tolerance, direction=metric.direction)
    return MetricVerdict(name, status, point, expected, tolerance, estimate)


def compare_metrics(cell: CellResult, expected: BaselineCell) -> tuple[MetricVerdict, ...]:
    """Every registered metric of the cell against what the baseline cell expects of it."""
    verdicts = []
    for metric in metrics():
        figure = expected_figure(expected, metric.name)
        verdicts.append(
            compare_metric(
                metric, metric.samples(cell), figure.value, figure.tolerance, figure.samples
            )
        )
    # A figure neither side has is noise in a report; one side having it is worth saying.
    return tuple(v for v in verdicts if v.measured is not None or v.expected is not None)


def status_of_metrics(metrics: Sequence[MetricVerdict]) -> str:
    statuses = {m.status for m in metrics}
    if REGRESSED in statuses:
        return REGRESSED
    if IMPROVED in statuses:
        return IMPROVED
    return SAME


def compare_cell(
    cell: CellResult,
    expected: BaselineCell | None,
    *,
    strict: bool = False,
    incomparable: str | None = None,
) -> CellVerdict:
    """The verdict for one measured cell (``expected`` from ``baseline.expected_cell``)."""

    def verdict(
        status: str, metrics: tuple[MetricVerdict, ...] = (), message: str = ""
    ) -> CellVerdict:
        return CellVerdict(
            backend=cell.backend,
            dtype=cell.dtype,
            batch_size=cell.batch_size,
            status=status,
            measured_outcome=cell.outcome.value,
            expected_outcome=expected.outcome if expected is not None else None,
            metrics=metrics,
            measured_ms_per_token=cell.ms_per_token,
            expected_ms_per_token=expected.ms_per_token if expected is not None else None,
            strict=strict,
            message=message or cell.message,
            latency=latency_to_dict(cell),
        )

    # A cell that did not finish measured nothing: it fails against any baseline or none,
    # an incomparable one included (without a baseline it fails too).
    if cell.outcome == Outcome.ERROR:
        return verdict(ERROR)
    if cell.outcome == Outcome.TIMEOUT:
        return verdict(TIMEOUT)
    if incomparable:
        return verdict(INCOMPARABLE, message=incomparable)
    if cell.outcome == Outcome.SKIPPED:
        return verdict(SKIPPED)
    if expected is None:
        return verdict(NO_BASELINE, message=prediction_note(cell))
    if expected.outcome != EXPECT_OK:
        return verdict(EXPECTED_OOM if cell.outcome == Outcome.OOM else BOUNDARY_MOVED_UP)
    if cell.outcome == Outcome.OOM:
        return verdict(UNEXPECTED_OOM)
    metrics = compare_metrics(cell, expected)
    status = status_of_metrics(metrics)
    # A judged figure that is missing fails the cell, but a regression measured beside it is
    # the more useful word: both fail.
    missing = any(m.status == NOT_MEASURED and m.tolerance is not None for m in metrics)
    if missing and status != REGRESSED:
        return verdict(NOT_MEASURED, metrics)
    if cell.telemetry is not None and cell.telemetry.flags:
        return verdict(UNTRUSTWORTHY, metrics, "; ".join(cell.telemetry.flags))
    return verdict(status, metrics)


def prediction_note(cell: CellResult) -> str:
    """What the memory model said of an OOM cell that has no baseline (informative only)."""
    if cell.outcome is not Outcome.OOM:
        return ""
    fits = cell.details.get("predicted_fits")
    if fits is True:
        return "the memory model predicted it to fit: accept a baseline to judge it"
    if fits is False:
        return "the memory model predicted this OOM"
    return ""


def incomparable_reason(run: RunResult, baseline: Baseline) -> str | None:
    """What makes the run's figures meaningless against this baseline, or None."""
    if not baseline.matches_topology(run.topology):
        return f"topology {run.topology} is not the baseline's {baseline.topology}"
    if not baseline.matches_model(run.model.name):
        return f"model {run.model.name} is not the baseline's {baseline.model}"
    if baseline.model_layers and run.model.layers and baseline.model_layers != run.model.layers:
        return f"model has {run.model.layers} layers, the baseline's {baseline.model_layers}"
    if baseline.new_tokens and run.workload.new_tokens != baseline.new_tokens:
        return (
            f"run generates {run.workload.new_tokens} new tokens, the baseline "
            f"{baseline.new_tokens}"
        )
    return None


def compare_in(
    run_reason: str | None, cell: CellResult, baseline: Baseline, *, strict: bool
) -> CellVerdict:
    """One cell against its baseline cell, incomparable for the run's reason or its own (a
    serving sweep under another SLA or design than the baseline's)."""
    expected = expected_cell(baseline, cell)
    own = sweep_mismatch(cell.details, expected.details) if expected is not None else None
    return compare_cell(cell, expected, strict=strict, incomparable=run_reason or own)


def judge_cell(
    run: RunResult, baseline: Baseline | None, cell: CellResult, *, strict: bool = False
) -> CellVerdict:
    """One cell of ``run``: the plugin judges each cell as soon as it is measured."""
    if baseline is None:
        return compare_cell(cell, None)
    return compare_in(incomparable_reason(run, baseline), cell, baseline, strict=strict)


def judge(
    run: RunResult,
    baseline: Baseline | None,
    *,
    strict: bool = False,
    allow_incomplete: bool = False,
    allow_no_baseline: bool = False,
    no_baseline: str = "no baseline",
) -> Comparison:
    """The gate's verdict on a whole run; ``comparison.failed`` decides exit status 1."""
    if baseline is None:
        comparison = compare_without_baseline(run, no_baseline)
    else:
        comparison = compare_run(run, baseline, strict=strict)
    return replace(
        comparison,
        incomplete="" if allow_incomplete else incompleteness(run) or "",
        unjudged="" if allow_no_baseline else unjudged(comparison) or "",
    )


def unjudged(comparison: Comparison) -> str | None:
    """Why no cell of a run with cells was compared with anything, or None when one was."""
    if not comparison.cells or any(was_judged(c) for c in comparison.cells):
        return None
    statuses = {c.status for c in comparison.cells}
    if comparison.why_incomparable:
        why = f"incomparable: {comparison.why_incomparable}"
    elif statuses - set(UNJUDGED):
        why = f"{comparison.baseline} gives no figure of the run's cells a tolerance"
    elif statuses == {SKIPPED}:
        why = "every cell was skipped"
    elif comparison.baseline.startswith("no baseline"):
        why = comparison.baseline
    else:  # the cells that ran are every one no-baseline
        why = f"{comparison.baseline} has none of the run's cells"
    return (
        f"nothing judged: {why} (accept a baseline with `bloomperf baseline accept RESULTS`; "
        "--allow-no-baseline passes a run with nothing to compare)"
    )


def was_judged(cell: CellVerdict) -> bool:
    """Compared with something: an outcome against the expected one, or a figure against a
    figure with a tolerance (a cell whose every figure is "not judged" reads same, unjudged)."""
    if cell.status in UNJUDGED:
        return False
    if cell.status in (SAME, IMPROVED, UNTRUSTWORTHY):
        return any(m.status in (SAME, REGRESSED, IMPROVED) for m in cell.metrics)
    return True


def incompleteness(run: RunResult) -> str | None:
    """Why ``run`` cannot pass a gate as a whole: it measured nothing, or it did not finish."""
    measured = sum(c.outcome in (Outcome.OK, Outcome.OOM) for c in run.cells)
    ram = host_ram_headline(run)
    if ram:
        return f"{ram} (--allow-incomplete accepts that)"
    if measured == 0:
        return (
            f"nothing measured: {len(run.cells)} cells in the results, none ran "
            "(--allow-incomplete accepts that)"
        )
    if not run.complete:
        return (
            f"incomplete run: the results say the run did not finish ({measured} cells measured; "
            "--allow-incomplete accepts that)"
        )
    return None


def host_ram_headline(run: RunResult) -> str | None:
    """What a run that skipped every cell for host RAM must say first, or None."""
    reasons = [c.message for c in run.cells]
    if not reasons or not all(
        c.outcome is Outcome.SKIPPED and c.message.startswith(HOST_RAM_SKIP) for c in run.cells
    ):
        return None
    return (
        f"nothing measured: every one of the {len(reasons)} cells was skipped for host RAM "
        f"({reasons[0][len(HOST_RAM_SKIP) :]})"
    )


def compare_run(run: RunResult, baseline: Baseline, *, strict: bool = False) -> Comparison:
    reason = incomparable_reason(run, baseline)
    verdicts = tuple(
        compare_in(reason, c, baseline, strict=strict) for c in sorted(run.cells, key=table_order)
    )
    return Comparison(
        cells=verdicts,
        topology=run.topology,
        model=run.model.name,
        baseline=baseline.path or baseline.topology,
        incomparable=reason or "",
        missing=missing_cells(run, baseline) if reason is None else (),
    )


def compare_without_baseline(run: RunResult, why: str) -> Comparison:
    """Every cell recorded as having no baseline (never a failure, except errors)."""
    verdicts = tuple(compare_cell(c, None) for c in sorted(run.cells, key=table_order))
    return Comparison(cells=verdicts, topology=run.topology, model=run.model.name, baseline=why)


def missing_cells(run: RunResult, baseline: Baseline) -> tuple[str, ...]:
    rows = {(c.backend, c.dtype) for c in run.cells}
    ran = {c.id for c in run.cells}
    return tuple(
        b.id
        for b in baseline.cells
        if (b.backend, b.dtype) in rows and b.id not in ran and b.outcome in (EXPECT_OK, "oom")
    )
