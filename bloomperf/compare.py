"""Verdicts: the ONE pass/fail rule, shared by the pytest plugin, `bloomperf run` and `diff`.

Each measured cell is judged against its baseline cell, per metric and per OOM boundary. Every
metric is lower-is-better (ms/token, peak memory, load time). A metric check is a small frozen
object whose ``fails()`` returns a message or None; a cell's verdict combines its outcome with its
metric checks:

* ``same`` / ``regressed`` / ``improved``: ran, as the baseline expected; the worst metric decides.
* ``expected-oom``: ran out of memory where the baseline did (passes).
* ``unexpected-oom``: ran out of memory where the baseline ran (fails).
* ``boundary-moved-up``: ran where the baseline ran out of memory (reported; fails if strict).
* ``no-baseline``: nothing to compare with (recorded, never fails). This holds for an OOM too:
  the baseline is the only expectation the gate judges against, and an OOM is a measurement
  (where the boundary lies), not a breakage. A user gating an upgrade accepts a baseline first;
  until then an OOM is reported, with what the memory model predicted, and the gate passes.
* ``incomparable``: the run's topology, model or workload is not the baseline's (never fails,
  never judged: another GPU model's figures say nothing about a regression).
* ``error`` / ``timeout``: the cell did not finish (fails: nothing was measured).
* ``skipped``: not run (e.g. beyond the OOM boundary without probing).

A whole run fails too when it measured nothing (no cell ran or ran out of memory) or did not
finish (``complete: false``), unless the caller allows incomplete runs: an empty or interrupted
results file must never pass a gate. ``judge`` applies all of this; ``judge_cell`` is the same rule
for one cell, as the plugin needs it while the run is still going.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.baseline import (
    EXPECT_OK,
    Baseline,
    BaselineCell,
    expected_cell,
)
from bloomperf.formatting import format_value
from bloomperf.latency import per_cycle
from bloomperf.results import CellResult, Outcome, RunResult, cell_id, latency_to_dict
from bloomperf.stats import IMPROVED, REGRESSED, SAME, RatioEstimate, classify_ratio, estimate_ratio

EXPECTED_OOM = "expected-oom"
UNEXPECTED_OOM = "unexpected-oom"
BOUNDARY_MOVED_UP = "boundary-moved-up"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
ERROR = "error"
TIMEOUT = "timeout"
SKIPPED = "skipped"
# Measured while the GPU throttled or its clocks moved (telemetry flags): neither same nor
# regressed, because the figure reflects the GPU's cooling or power budget, not the software.
UNTRUSTWORTHY = "untrustworthy"
# Metric-only states: a figure the run did not measure, or one the baseline keeps unjudged.
NOT_MEASURED = "not-measured"
NOT_JUDGED = "not-judged"

CELL_STATUSES = (
    SAME,
    REGRESSED,
    IMPROVED,
    EXPECTED_OOM,
    UNEXPECTED_OOM,
    BOUNDARY_MOVED_UP,
    NO_BASELINE,
    INCOMPARABLE,
    ERROR,
    TIMEOUT,
    SKIPPED,
    UNTRUSTWORTHY,
)

METRICS = {
    "ms_per_token": "ms/token",
    "peak_memory": "peak memory",
    "load_time": "load time",
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT p50",
    "tpot_p99_ms": "TPOT p99",
}


@dataclass(frozen=True)
class MetricVerdict:
    metric: str  # a key of METRICS
    status: str  # same | regressed | improved | no-baseline | not-measured | not-judged
    measured: float | None
    expected: float | None
    tolerance: float | None
    estimate: RatioEstimate | None = None

    def fails(self) -> str | None:
        if self.status != REGRESSED:
            return None
        return f"{METRICS[self.metric]} regressed: {self.describe()}"

    def describe(self) -> str:
        """Measured vs expected vs tolerance, and the ratio with its confidence interval."""
        text = f"measured {format_value(self.metric, self.measured)}"
        text += f" vs expected {format_value(self.metric, self.expected)}"
        text += " (not judged)" if self.tolerance is None else f" ±{self.tolerance * 100:g}%"
        if self.estimate is not None:
            e = self.estimate
            text += f", ratio {e.ratio:.3f} (95% CI {e.low:.3f}–{e.high:.3f})"
        return text


@dataclass(frozen=True)
class CellVerdict:
    backend: str
    dtype: str
    batch_size: int
    status: str
    measured_outcome: str
    expected_outcome: str | None = None
    metrics: tuple[MetricVerdict, ...] = ()
    measured_ms_per_token: float | None = None
    expected_ms_per_token: float | None = None
    strict: bool = False
    message: str = ""  # the incomparable reason, or the cell's own error message
    # TTFT, TPOT (p50/p90/p99) and tokens/s as measured, shown beside the verdict (not judged)
    latency: dict[str, float | None] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)

    def metric(self, name: str) -> MetricVerdict | None:
        return next((m for m in self.metrics if m.metric == name), None)

    def fails(self) -> str | None:
        """Why this cell fails, with measured vs expected vs tolerance; None when it passes."""
        if self.status == REGRESSED:
            reasons = [m.fails() for m in self.metrics]
            return f"{self.id}: " + "; ".join(r for r in reasons if r)
        if self.status == UNEXPECTED_OOM:
            expected = format_value("ms_per_token", self.expected_ms_per_token)
            return (
                f"{self.id}: unexpected OOM: measured out of memory vs expected to run"
                f" ({expected} in the baseline){self._detail()}"
            )
        if self.status == BOUNDARY_MOVED_UP and self.strict:
            return f"{self.id}: {self.explain()} (fails under --strict)"
        if self.status in (ERROR, TIMEOUT):
            return f"{self.id}: {self.status}{self._detail()}"
        return None

    def explain(self) -> str:
        """One line for every status, failing or not."""
        measured = format_value("ms_per_token", self.measured_ms_per_token)
        if self.status in (SAME, REGRESSED, IMPROVED):
            parts = [f"{METRICS[m.metric]} {m.status}: {m.describe()}" for m in self.metrics]
            return "; ".join(parts) if parts else self.status
        if self.status == BOUNDARY_MOVED_UP:
            beyond = " (beyond its OOM boundary)" if self.expected_outcome == "not-run" else ""
            return f"boundary moved up: ran at {measured} where the baseline expects OOM{beyond}"
        if self.status == EXPECTED_OOM:
            return "out of memory, as the baseline expects"
        if self.status == NO_BASELINE:
            figure = "" if self.measured_outcome == Outcome.OOM.value else f" {measured}"
            return f"no baseline cell; measured {self.measured_outcome}{figure}{self._detail()}"
        if self.status == INCOMPARABLE:
            return f"incomparable: {self.message}"
        if self.status == UNTRUSTWORTHY:
            parts = [f"{METRICS[m.metric]} {m.status}: {m.describe()}" for m in self.metrics]
            return f"untrustworthy ({self.message}); " + "; ".join(parts)
        return (self.fails() or self.status).removeprefix(f"{self.id}: ")

    def _detail(self) -> str:
        return f": {self.message}" if self.message else ""


@dataclass(frozen=True)
class Comparison:
    cells: tuple[CellVerdict, ...]
    topology: str
    model: str
    baseline: str  # where the expectations came from (a path, or "no baseline")
    incomparable: str = ""
    missing: tuple[str, ...] = ()  # baseline cells (ok or oom) of the run's rows it did not run
    incomplete: str = ""  # why the run as a whole fails: nothing measured, or it did not finish

    @property
    def failed(self) -> bool:
        return bool(self.incomplete) or any(c.fails() for c in self.cells)

    def failures(self) -> list[str]:
        cells = [message for message in (c.fails() for c in self.cells) if message]
        return [self.incomplete, *cells] if self.incomplete else cells

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(c.status for c in self.cells)
        return {status: counted[status] for status in CELL_STATUSES if counted[status]}

    @property
    def summary(self) -> str:
        parts = [f"{n} {status}" for status, n in self.counts.items()]
        text = f"{len(self.cells)} cells: " + (", ".join(parts) if parts else "none")
        if self.missing:
            text += f"; {len(self.missing)} baseline cells not in the results"
        return text + ("; FAILED" if self.failed else "")


# ---- comparing ------------------------------------------------------------------------------


def compare_metric(
    metric: str,
    measured: Sequence[float],
    expected: float | None,
    tolerance: float | None,
    expected_samples: Sequence[float] = (),
) -> MetricVerdict:
    """One metric of one cell: the median of ``measured`` against the baseline figure."""
    # A zero or negative reading is a broken measurement, not a figure to divide by.
    samples = [float(v) for v in measured if v > 0]
    point = statistics.median(samples) if samples else None
    if expected is None or expected <= 0:
        return MetricVerdict(metric, NO_BASELINE, point, None, tolerance)
    if not samples:
        return MetricVerdict(metric, NOT_MEASURED, None, expected, tolerance)
    reference: float | Sequence[float] = expected_samples if expected_samples else expected
    estimate = estimate_ratio(samples, reference)
    if tolerance is None:
        status = NOT_JUDGED
    elif not all(math.isfinite(x) for x in (estimate.ratio, estimate.low, estimate.high)):
        # An unbounded change is beyond every tolerance: never "same".
        status = REGRESSED if point is not None and point > expected else IMPROVED
    else:
        status = classify_ratio(estimate, tolerance)
    return MetricVerdict(metric, status, point, expected, tolerance, estimate)


def compare_metrics(cell: CellResult, expected: BaselineCell) -> tuple[MetricVerdict, ...]:
    memory = cell.peak_memory_bytes
    verdicts = [
        compare_metric(
            "ms_per_token",
            cell.samples_ms_per_token,
            expected.ms_per_token,
            expected.ms_per_token_tolerance,
            expected.ms_per_token_samples,
        ),
        compare_metric(
            "peak_memory",
            [float(memory)] if memory is not None else [],
            float(expected.peak_memory_bytes) if expected.peak_memory_bytes is not None else None,
            expected.peak_memory_tolerance,
        ),
        compare_metric(
            "load_time",
            [cell.load_time_s] if cell.load_time_s is not None else [],
            expected.load_time_s,
            expected.load_time_tolerance,
        ),
    ]
    # Latency only against baselines recorded from runs (the reference tables have none).
    measured_latency = per_cycle(cell.samples_step_ms)
    for metric, samples in expected.latency_samples.items():
        verdicts.append(
            compare_metric(
                metric,
                measured_latency.get(metric, ()),
                statistics.median(samples) if samples else None,
                expected.latency_tolerances.get(metric),
                samples,
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

    if incomparable:
        return verdict(INCOMPARABLE, message=incomparable)
    if cell.outcome == Outcome.SKIPPED:
        return verdict(SKIPPED)
    if cell.outcome == Outcome.ERROR:
        return verdict(ERROR)
    if cell.outcome == Outcome.TIMEOUT:
        return verdict(TIMEOUT)
    if expected is None:
        return verdict(NO_BASELINE, message=prediction_note(cell))
    if expected.outcome != EXPECT_OK:
        return verdict(EXPECTED_OOM if cell.outcome == Outcome.OOM else BOUNDARY_MOVED_UP)
    if cell.outcome == Outcome.OOM:
        return verdict(UNEXPECTED_OOM)
    metrics = compare_metrics(cell, expected)
    if cell.telemetry is not None and cell.telemetry.flags:
        return verdict(UNTRUSTWORTHY, metrics, "; ".join(cell.telemetry.flags))
    return verdict(status_of_metrics(metrics), metrics)


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


def judge_cell(
    run: RunResult, baseline: Baseline | None, cell: CellResult, *, strict: bool = False
) -> CellVerdict:
    """One cell of ``run``: the plugin judges each cell as soon as it is measured."""
    if baseline is None:
        return compare_cell(cell, None)
    reason = incomparable_reason(run, baseline)
    return compare_cell(cell, expected_cell(baseline, cell), strict=strict, incomparable=reason)


def judge(
    run: RunResult,
    baseline: Baseline | None,
    *,
    strict: bool = False,
    allow_incomplete: bool = False,
    no_baseline: str = "no baseline",
) -> Comparison:
    """The gate's verdict on a whole run; ``comparison.failed`` decides exit status 1."""
    if baseline is None:
        comparison = compare_without_baseline(run, no_baseline)
    else:
        comparison = compare_run(run, baseline, strict=strict)
    gap = None if allow_incomplete else incompleteness(run)
    return replace(comparison, incomplete=gap) if gap else comparison


def incompleteness(run: RunResult) -> str | None:
    """Why ``run`` cannot pass a gate as a whole: it measured nothing, or it did not finish."""
    measured = sum(c.outcome in (Outcome.OK, Outcome.OOM) for c in run.cells)
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


def compare_run(run: RunResult, baseline: Baseline, *, strict: bool = False) -> Comparison:
    reason = incomparable_reason(run, baseline)
    verdicts = tuple(
        compare_cell(c, expected_cell(baseline, c), strict=strict, incomparable=reason)
        for c in sorted(run.cells, key=_order)
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
    verdicts = tuple(compare_cell(c, None) for c in sorted(run.cells, key=_order))
    return Comparison(cells=verdicts, topology=run.topology, model=run.model.name, baseline=why)


def missing_cells(run: RunResult, baseline: Baseline) -> tuple[str, ...]:
    rows = {(c.backend, c.dtype) for c in run.cells}
    ran = {c.id for c in run.cells}
    return tuple(
        b.id
        for b in baseline.cells
        if (b.backend, b.dtype) in rows and b.id not in ran and b.outcome in (EXPECT_OK, "oom")
    )


def _order(cell: CellResult) -> tuple[int, int, int]:
    backend = BACKEND_NAMES.index(cell.backend) if cell.backend in BACKEND_NAMES else 99
    return (backend, DTYPES.index(cell.dtype) if cell.dtype in DTYPES else 99, cell.batch_size)
