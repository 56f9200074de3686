"""Verdicts: each measured cell against its baseline cell, per metric and per OOM boundary.

Every metric is lower-is-better (ms/token, peak memory, load time). A metric check is a small
frozen object whose ``fails()`` returns a message or None; a cell's verdict combines its outcome
with its metric checks:

* ``same`` / ``regressed`` / ``improved``: ran, as the baseline expected; the worst metric decides.
* ``expected-oom``: ran out of memory where the baseline did (passes).
* ``unexpected-oom``: ran out of memory where the baseline ran (fails).
* ``boundary-moved-up``: ran where the baseline ran out of memory (reported; fails if strict).
* ``no-baseline``: nothing to compare with (recorded, never fails).
* ``incomparable``: the run's topology, model or workload is not the baseline's (never fails,
  never judged: another GPU model's figures say nothing about a regression).
* ``error`` / ``timeout``: the cell did not finish (fails: nothing was measured).
* ``skipped``: not run (e.g. beyond the OOM boundary without probing).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.baseline import (
    EXPECT_OK,
    Baseline,
    BaselineCell,
    expected_cell,
    format_ms,
    format_table,
    oom_boundary,
    row_label,
)
from bloomperf.results import CellResult, Outcome, RunResult, cell_id
from bloomperf.stats import IMPROVED, REGRESSED, SAME, RatioEstimate, classify_ratio, estimate_ratio

EXPECTED_OOM = "expected-oom"
UNEXPECTED_OOM = "unexpected-oom"
BOUNDARY_MOVED_UP = "boundary-moved-up"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
ERROR = "error"
TIMEOUT = "timeout"
SKIPPED = "skipped"
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
)

METRICS = {"ms_per_token": "ms/token", "peak_memory": "peak memory", "load_time": "load time"}


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


def format_value(metric: str, value: float | None) -> str:
    if value is None:
        return "nothing"
    if metric == "ms_per_token":
        return format_ms(value)
    if metric == "peak_memory":
        return f"{value / 2**30:.2f} GiB"
    return f"{value:.3g} s" if value < 1000 else f"{value:.0f} s"


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
            return f"no baseline cell; measured {self.measured_outcome} {measured}"
        if self.status == INCOMPARABLE:
            return f"incomparable: {self.message}"
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

    @property
    def failed(self) -> bool:
        return any(c.fails() for c in self.cells)

    def failures(self) -> list[str]:
        return [message for message in (c.fails() for c in self.cells) if message]

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
    status = NOT_JUDGED if tolerance is None else classify_ratio(estimate, tolerance)
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
        return verdict(NO_BASELINE)
    if expected.outcome != EXPECT_OK:
        return verdict(EXPECTED_OOM if cell.outcome == Outcome.OOM else BOUNDARY_MOVED_UP)
    if cell.outcome == Outcome.OOM:
        return verdict(UNEXPECTED_OOM)
    metrics = compare_metrics(cell, expected)
    return verdict(status_of_metrics(metrics), metrics)


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


def cells_beyond_boundary(baseline: Baseline, backend: str, dtype: str) -> set[int]:
    """Batch sizes the baseline lists beyond its first expected OOM: skip them unless probing.

    A batch size the baseline does not list at all is beyond the boundary when it is larger than
    ``oom_boundary(baseline, backend, dtype)``.
    """
    boundary = oom_boundary(baseline, backend, dtype)
    if boundary is None:
        return set()
    return {
        c.batch_size
        for c in baseline.cells
        if (c.backend, c.dtype) == (backend, dtype) and c.batch_size > boundary
    }


def _order(cell: CellResult) -> tuple[int, int, int]:
    backend = BACKEND_NAMES.index(cell.backend) if cell.backend in BACKEND_NAMES else 99
    return (backend, DTYPES.index(cell.dtype) if cell.dtype in DTYPES else 99, cell.batch_size)


# ---- rendering ------------------------------------------------------------------------------


def cell_text(v: CellVerdict | None) -> str:
    """A table cell: the measured figure, its change and the verdict when it is not 'same'."""
    if v is None:
        return "–"
    measured = format_ms(v.measured_ms_per_token) if v.measured_ms_per_token else ""
    ms = v.metric("ms_per_token")
    change = ""
    if ms is not None and ms.estimate is not None:
        judged = "" if ms.status != NOT_JUDGED else ", not judged"
        change = f" ({(ms.estimate.ratio - 1) * 100:+.1f}%{judged})"
    label = {
        SAME: "",
        REGRESSED: " REGRESSED",
        IMPROVED: " improved",
        BOUNDARY_MOVED_UP: " (OOM expected)",
        NO_BASELINE: " (no baseline)",
        INCOMPARABLE: " (incomparable)",
    }
    if v.measured_outcome == Outcome.OOM.value:
        oom = {EXPECTED_OOM: "OOM (expected)", UNEXPECTED_OOM: "OOM UNEXPECTED"}
        return oom.get(v.status, "OOM" + label.get(v.status, f" ({v.status})"))
    if v.status in (ERROR, TIMEOUT, SKIPPED):
        return v.status.upper() if v.status != SKIPPED else "skipped"
    return (measured or v.measured_outcome) + change + label.get(v.status, f" ({v.status})")


def table_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    rows: list[tuple[str, str]] = []
    for v in comparison.cells:
        if (v.backend, v.dtype) not in rows:
            rows.append((v.backend, v.dtype))
    sizes = sorted({v.batch_size for v in comparison.cells})
    by_key = {(v.backend, v.dtype, v.batch_size): v for v in comparison.cells}
    header = ["Solution (dtype)", *(f"Batch {s}" for s in sizes)]
    body = [[row_label(*row), *(cell_text(by_key.get((*row, s))) for s in sizes)] for row in rows]
    return header, body


def notable(comparison: Comparison) -> list[str]:
    """A line for every cell worth reading about: failures first, then the rest that moved."""
    quiet = (SAME, EXPECTED_OOM, SKIPPED, INCOMPARABLE, NO_BASELINE)
    lines = comparison.failures()
    lines += [
        f"{v.id}: {v.explain()}"
        for v in comparison.cells
        if v.status not in quiet and not v.fails()
    ]
    return lines


def render_comparison(comparison: Comparison, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(comparison_to_dict(comparison), indent=2) + "\n"
    header, body = table_rows(comparison)
    title = f"{comparison.topology} · {comparison.model} vs {comparison.baseline}"
    lines = notable(comparison)
    if comparison.incomparable:
        lines.insert(0, f"incomparable: {comparison.incomparable}")
    if comparison.missing:
        lines.append("not in the results: " + ", ".join(comparison.missing))
    if fmt == "markdown":
        table = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(row) + " |" for row in body),
        ]
        parts = [f"**{title}**", "", *table, ""]
        parts += [f"- {line}" for line in lines]
        parts += ["", comparison.summary]
        return "\n".join(parts) + "\n"
    parts = [title, format_table(header, body) if body else "(no cells)"]
    if lines:
        parts += ["", *lines]
    parts += ["", comparison.summary]
    return "\n".join(parts) + "\n"


def metric_to_dict(m: MetricVerdict) -> dict[str, Any]:
    e = m.estimate
    return {
        "metric": m.metric,
        "status": m.status,
        "measured": m.measured,
        "expected": m.expected,
        "tolerance": m.tolerance,
        "ratio": e.ratio if e else None,
        "low": e.low if e else None,
        "high": e.high if e else None,
    }


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
    return {
        "kind": "bloomperf-comparison",
        "schema_version": 1,
        "topology": c.topology,
        "model": c.model,
        "baseline": c.baseline,
        "incomparable": c.incomparable or None,
        "failed": c.failed,
        "counts": c.counts,
        "summary": c.summary,
        "missing": list(c.missing),
        "cells": [
            {
                "id": v.id,
                "backend": v.backend,
                "dtype": v.dtype,
                "batch_size": v.batch_size,
                "status": v.status,
                "measured_outcome": v.measured_outcome,
                "expected_outcome": v.expected_outcome,
                "ms_per_token": v.measured_ms_per_token,
                "expected_ms_per_token": v.expected_ms_per_token,
                "fails": v.fails(),
                "explain": v.explain(),
                "metrics": [metric_to_dict(m) for m in v.metrics],
            }
            for v in c.cells
        ],
    }
