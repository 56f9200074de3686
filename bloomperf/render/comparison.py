"""A ``Comparison`` as text, markdown or JSON: the verdict table and the lines worth reading.

Only formats; the verdicts themselves are ``bloomperf.analysis.compare``'s.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME
from bloomperf.analysis.verdicts import (
    CELL_LABELS,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_JUDGED,
    NOT_RUN,
    OOM_LABELS,
    QUIET,
    SKIPPED,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.backends import row_label
from bloomperf.catalog.hardware import known_topology
from bloomperf.core.formatting import (
    GIB,
    format_ms,
    markdown_table,
    markdown_text,
    plain,
    table_layout,
)
from bloomperf.core.metrics import HEADLINE, Metric, metrics
from bloomperf.render.terminal import DEFAULT_WIDTH, fit_table, paint, wrap
from bloomperf.store.results import Outcome

METRIC_LABELS = {REGRESSED: " REGRESSED", IMPROVED: " improved"}
STATUS_STYLES = {REGRESSED: "regressed", IMPROVED: "improved", NOT_JUDGED: "dim"}


def side_metrics() -> tuple[Metric, ...]:
    """The metrics a batch cell names after its headline figure when they moved (a per-row
    one, the load, has its own column)."""
    return tuple(m for m in metrics() if m.name != HEADLINE and not m.per_row)


def row_metrics() -> tuple[Metric, ...]:
    """The metrics one figure of a row serves (one load serves every batch size)."""
    return tuple(m for m in metrics() if m.per_row)


def change_text(m: MetricVerdict | None, short: bool = False) -> str:
    """The change in percent when it is judged or shows at the displayed precision; nothing for
    noise: "(+0.0%)" on every cell hides the one that moved. ``short``, as a terminal shows it:
    whole percent from 10 % on, no parentheses."""
    if m is None or m.estimate is None:
        return ""
    percent = (m.estimate.ratio - 1) * 100
    if m.status not in (REGRESSED, IMPROVED) and f"{abs(percent):.1f}" == "0.0":
        return ""
    if short:
        return f" {percent:+.0f}%" if abs(percent) >= 10 else f" {percent:+.1f}%"
    note = ", not judged" if m.status == NOT_JUDGED else ""
    return f" ({percent:+.1f}%{note})"


def cell_text(v: CellVerdict | None, short: bool = False) -> str:
    """A batch cell: the headline figure, its change and verdict, then every other metric that
    moved; an OOM or a cell that did not run says its status. ``short``: a terminal's."""
    if v is None:
        return "–"
    if v.measured_outcome == Outcome.OOM.value:
        return OOM_LABELS.get(v.status, "OOM" + CELL_LABELS.get(v.status, f" ({v.status})"))
    if v.status in NOT_RUN:
        return v.status.upper() if v.status != SKIPPED else "skipped"
    ms = v.metric(HEADLINE)
    text = format_ms(v.measured_ms_per_token) if v.measured_ms_per_token else v.measured_outcome
    text += change_text(ms, short) + (METRIC_LABELS.get(ms.status, "") if ms is not None else "")
    for metric in side_metrics():
        m = v.metric(metric.name)
        if m is None or m.status not in METRIC_LABELS or m.measured is None:
            continue
        if short:
            text += f" ({metric.abbrev}{change_text(m, short)})"
        else:
            figure = metric.format(m.measured)
            text += f"; {metric.label} {figure}{change_text(m)}{METRIC_LABELS[m.status]}"
    if v.status not in (SAME, REGRESSED, IMPROVED):
        text += CELL_LABELS.get(v.status, f" ({v.status})")
    return text


def cell_style(v: CellVerdict | None) -> str | None:
    """A batch cell's style on a terminal: red when it fails, green when it improved, dim."""
    if v is None:
        return None
    failing = "regressed" if v.fails() else None
    if v.measured_outcome == Outcome.OOM.value or v.status in NOT_RUN:
        return failing
    ms = v.metric(HEADLINE)
    return (
        failing
        or STATUS_STYLES.get(v.status)
        or (STATUS_STYLES.get(ms.status) if ms is not None else None)
    )


def table_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    header, body, _ = styled_rows(comparison)
    return header, body


def styled_rows(
    comparison: Comparison, short: bool = False
) -> tuple[list[str], list[list[str]], list[list[str | None]]]:
    """The verdict table: a row per backend and dtype, a cell per batch size, then the per-row
    figures; ``short`` cells for a terminal, and a style per cell."""
    rows, sizes = table_layout(comparison.cells)
    by_key = {(v.backend, v.dtype, v.batch_size): v for v in comparison.cells}
    header = [
        "Solution (dtype)",
        *(f"Batch {s}" for s in sizes),
        *(m.label.capitalize() for m in row_metrics()),
        # Summed over the GPUs of a GPU topology; on a CPU the process's, over no GPU at all.
        "Peak memory (all GPUs)" if known_topology(comparison.topology) else "Peak memory",
    ]
    body, styles = [], []
    for row in rows:
        verdicts = [v for v in comparison.cells if (v.backend, v.dtype) == row]
        cells = [by_key.get((*row, s)) for s in sizes]
        loads = [(m, row_verdict(verdicts, m)) for m in row_metrics()]
        memory = memory_text(verdicts)
        body.append(
            [
                row_label(*row),
                *(cell_text(v, short) for v in cells),
                *(row_text(verdicts, m, short) for m, _ in loads),
                memory,
            ]
        )
        styles.append(
            [
                None,
                *(cell_style(v) for v in cells),
                *(STATUS_STYLES.get(load.status) if load else None for _, load in loads),
                "regressed" if "REGRESSED" in memory else None,
            ]
        )
    return header, body, styles


STATUS_WORDS = {
    SAME: "same",
    REGRESSED: "REGRESSED",
    IMPROVED: "improved",
    NO_BASELINE: "no baseline",
    NOT_JUDGED: "not judged",
}


def row_verdict(verdicts: list[CellVerdict], metric: Metric) -> MetricVerdict | None:
    """The row's figure of a per-row metric: the first cell's that has one."""
    return next((m for v in verdicts if (m := v.metric(metric.name)) and m.measured), None)


def row_text(verdicts: list[CellVerdict], metric: Metric, short: bool = False) -> str:
    """One load serves every batch size of a row: its figure and verdict, once per row."""
    m = row_verdict(verdicts, metric)
    if m is None or m.measured is None:
        return "–"
    change = change_text(m, short)
    if short:
        return f"{metric.format(m.measured)}{change}"
    # A change shown says "not judged" itself; "(+49.5%, not judged) (not judged)" would stutter.
    word = "" if m.status == NOT_JUDGED and change else verdict_word(m.status)
    return f"{metric.format(m.measured)}{change}{word}"


def verdict_word(status: str) -> str:
    """A verdict after a figure: a failure or an improvement loud, the rest in parentheses."""
    word = STATUS_WORDS.get(status, status)
    return f" {word}" if status in (REGRESSED, IMPROVED) else f" ({word})"


def memory_text(verdicts: list[CellVerdict]) -> str:
    """The row's largest peak and the memory verdict: the batch sizes that moved, if any."""
    metrics = [(v.batch_size, m) for v in verdicts if (m := v.metric("peak_memory"))]
    measured = [m.measured for _, m in metrics if m.measured]
    if not measured:
        return "–"
    peak = max(measured) / GIB
    # Whole GiB for a GPU's tens of them; a CPU's tiny model peaks below one ("≤ 0 GiB").
    figure = f"≤ {peak:.0f} GiB" if peak >= 10 else f"≤ {peak:.2g} GiB"
    moved = [
        f"{STATUS_WORDS[status]} at "
        + ", ".join(f"bs{b}" for b, m in metrics if m.status == status)
        for status in (REGRESSED, IMPROVED)
        if any(m.status == status for _, m in metrics)
    ]
    if moved:
        return f"{figure}, " + "; ".join(moved)
    statuses = {m.status for _, m in metrics if m.measured}
    words = [STATUS_WORDS.get(s, s) for s in sorted(statuses)]
    return f"{figure} (" + " / ".join(words) + ")"


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
    lines = comparison.failures()
    lines += [
        f"{v.id}: {v.explain()}"
        for v in comparison.cells
        if v.status not in QUIET and not v.fails()
    ]
    # A cell incomparable for a reason of its own (a sweep under another SLA) is said once:
    # the run's reason has its line already, and "nothing judged" may say the cell's.
    said = (comparison.incomparable, comparison.unjudged)
    lines += [
        f"{v.id}: {v.explain()}"
        for v in comparison.cells
        if v.status == INCOMPARABLE and v.message and not any(v.message in s for s in said)
    ]
    return lines


def render_comparison(
    comparison: Comparison, fmt: str = "text", *, colour: bool = False, width: int | None = None
) -> str:
    """``fmt`` text (also the head of github), markdown or json; ``colour`` and ``width`` for a
    terminal (see ``bloomperf.render.terminal``)."""
    if fmt == "json":
        return json.dumps(comparison_to_dict(comparison), indent=2, allow_nan=False) + "\n"
    header, body = table_rows(comparison)
    title = f"{comparison.topology} · {comparison.model} vs {comparison.baseline}"
    lines = notable(comparison)
    if comparison.incomparable:
        lines.insert(0, f"incomparable: {comparison.incomparable}")
    if comparison.missing:
        lines.append("not in the results: " + ", ".join(comparison.missing))
    # Messages come from workers and files: no escape sequence, markup or workflow command
    # reaches a terminal, a runner's log or a page.
    escape = markdown_text if fmt == "markdown" else plain
    lines = [escape(line) for line in lines]
    latency_header, latency_body = latency_rows(comparison)
    if fmt == "markdown":
        parts = [f"**{escape(title)}**", "", *markdown_table(header, body), ""]
        if latency_body:
            parts += [*markdown_table(latency_header, latency_body), ""]
        if lines:  # a blank line between the notes and the summary, one only
            parts += [*(f"- {line}" for line in lines), ""]
        parts.append(comparison.summary)
        return "\n".join(parts) + "\n"
    return render_text(comparison, lines, colour, width or DEFAULT_WIDTH)


def render_text(comparison: Comparison, notes: list[str], colour: bool, width: int) -> str:
    """For a terminal or a log: the baseline and the reason timing is not judged each on a line
    of their own, the table cut to ``width``, each note wrapped under it."""
    parts = [plain(f"{comparison.topology} · {comparison.model}")]
    parts += wrap(plain(f"baseline: {comparison.baseline}"), width)
    headline = timing_headline(comparison)
    if headline:
        parts += [paint(line, "dim", colour) for line in wrap(headline, width)]
    header, body, styles = styled_rows(comparison, short=True)
    parts += ["", fit_table(header, body, width, styles, colour) if body else "(no cells)"]
    latency_header, latency_body = latency_rows(comparison)
    if latency_body:
        parts += ["", fit_table(latency_header, latency_body, width)]
    if notes:
        parts.append("")
        for note in notes:
            style = "regressed" if note in comparison.failures() else None
            parts += [paint(line, style, colour) for line in wrap(note, width)]
    verdict = "regressed" if comparison.failed else "improved"
    parts += ["", paint(comparison.summary, verdict, colour)]
    return "\n".join(parts) + "\n"


def timing_headline(comparison: Comparison) -> str:
    """One line when no timing was judged at all (a CPU baseline carries no tolerance for it):
    the figures' changes are shown, and this says why none of them decides."""
    timed = {m.name for m in metrics() if m.unit in ("ms", "s")}
    timing = [m for v in comparison.cells for m in v.metrics if m.metric in timed]
    if not timing or any(m.status != NOT_JUDGED for m in timing):
        return ""
    why = (
        "a shared CPU's timing swings run to run; use bloomperf ab"
        if comparison.topology.endswith("cpu")
        else "the baseline holds no tolerance for it"
    )
    return f"timing recorded, not judged ({why})"


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
        "unjudged": c.unjudged or None,
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
