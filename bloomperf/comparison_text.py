"""A ``Comparison`` as text, markdown or JSON: the verdict table and the lines worth reading.

Only formats; the verdicts themselves are ``bloomperf.compare``'s.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bloomperf.compare import (
    BOUNDARY_MOVED_UP,
    ERROR,
    EXPECTED_OOM,
    IMPROVED,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_JUDGED,
    REGRESSED,
    SAME,
    SKIPPED,
    TIMEOUT,
    UNEXPECTED_OOM,
    UNTRUSTWORTHY,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.formatting import (
    clean,
    format_ms,
    format_table,
    markdown_table,
    row_label,
    table_layout,
)
from bloomperf.results import Outcome


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
        UNTRUSTWORTHY: " UNTRUSTWORTHY",
    }
    if v.measured_outcome == Outcome.OOM.value:
        oom = {EXPECTED_OOM: "OOM (expected)", UNEXPECTED_OOM: "OOM UNEXPECTED"}
        return oom.get(v.status, "OOM" + label.get(v.status, f" ({v.status})"))
    if v.status in (ERROR, TIMEOUT, SKIPPED):
        return v.status.upper() if v.status != SKIPPED else "skipped"
    return (measured or v.measured_outcome) + change + label.get(v.status, f" ({v.status})")


def table_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    rows, sizes = table_layout(comparison.cells)
    by_key = {(v.backend, v.dtype, v.batch_size): v for v in comparison.cells}
    header = ["Solution (dtype)", *(f"Batch {s}" for s in sizes)]
    body = [[row_label(*row), *(cell_text(by_key.get((*row, s))) for s in sizes)] for row in rows]
    return header, body


LATENCY_COLUMNS = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT p50"),
    ("tpot_p90_ms", "p90"),
    ("tpot_p99_ms", "p99"),
)


def latency_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Per cell with step times: prefill and decode latency, and throughput."""
    header = ["Cell", *(name for _, name in LATENCY_COLUMNS), "tokens/s"]
    body = []
    for v in comparison.cells:
        if v.latency.get("tpot_ms") is None:
            continue
        figures = [format_ms(v.latency[key] or 0.0) for key, _ in LATENCY_COLUMNS]
        body.append([v.id, *figures, f"{v.latency.get('tokens_per_s') or 0.0:.1f}"])
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
        return json.dumps(comparison_to_dict(comparison), indent=2, allow_nan=False) + "\n"
    header, body = table_rows(comparison)
    title = f"{comparison.topology} · {comparison.model} vs {comparison.baseline}"
    lines = notable(comparison)
    if comparison.incomparable:
        lines.insert(0, f"incomparable: {comparison.incomparable}")
    if comparison.missing:
        lines.append("not in the results: " + ", ".join(comparison.missing))
    # Messages come from workers and files: no escape sequence reaches a terminal or a page.
    lines = [clean(line) for line in lines]
    latency_header, latency_body = latency_rows(comparison)
    if fmt == "markdown":
        parts = [f"**{clean(title)}**", "", *markdown_table(header, body), ""]
        if latency_body:
            parts += [*markdown_table(latency_header, latency_body), ""]
        parts += [f"- {line}" for line in lines]
        parts += ["", comparison.summary]
        return "\n".join(parts) + "\n"
    parts = [clean(title), format_table(header, body) if body else "(no cells)"]
    if latency_body:
        parts += ["", format_table(latency_header, latency_body)]
    if lines:
        parts += ["", *lines]
    parts += ["", comparison.summary]
    return "\n".join(parts) + "\n"


def metric_to_dict(m: MetricVerdict) -> dict[str, Any]:
    e = m.estimate
    return {
        "metric": m.metric,
        "status": m.status,
        "measured": finite(m.measured),
        "expected": finite(m.expected),
        "tolerance": m.tolerance,
        "ratio": finite(e.ratio) if e else None,
        "low": finite(e.low) if e else None,
        "high": finite(e.high) if e else None,
    }


def finite(value: float | None) -> float | None:
    """JSON has no Infinity or NaN: an unbounded figure is written as null."""
    return value if value is not None and math.isfinite(value) else None


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
    return {
        "kind": "bloomperf-comparison",
        "schema_version": 1,
        "topology": c.topology,
        "model": c.model,
        "baseline": c.baseline,
        "incomparable": c.incomparable or None,
        "incomplete": c.incomplete or None,
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
                "latency": {k: finite(x) for k, x in v.latency.items()},
            }
            for v in c.cells
        ],
    }
