"""What ``bloomperf ab`` writes and prints: each compared cell as JSON (its samples, each with
what else used the machine meanwhile) and the verdict table, with a line for each cell whose
pairs were set aside because the machine was busy.
"""

from __future__ import annotations

import statistics
import textwrap
from typing import Any

from bloomperf.analysis.paired import FASTER, SLOWER
from bloomperf.core.formatting import markdown_table
from bloomperf.core.jsonfile import json_fields
from bloomperf.core.metrics import HEADLINE, metric, metrics
from bloomperf.harness.interleave import Comparison, PairLog, Settings

WIDTH = 100  # terminal columns
KIND = "bloomperf-ab"  # the results file of ab, ab --serve and bisect's steps
SCHEMA_VERSION = 1


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """One compared cell and metric; a metric other than ms/token (a serving figure) names its
    samples' and medians' key ``value`` and ``median``."""
    estimate = comparison.estimate
    headline = comparison.metric == HEADLINE
    arms = {}
    for name, result in comparison.arms.items():
        arms[name] = {
            "outcome": result.outcome.value,
            "median_ms_per_token" if headline else "median": comparison.median(name),
            "load_time_s": result.load_time_s,
            "peak_memory_bytes": result.peak_memory_bytes,
            # Every registered metric the arm measured (its median), the outside ones too.
            "figures": {
                m.name: statistics.median(samples)
                for m in metrics()
                if (samples := m.samples(result))
            },
            "message": result.message[-2000:],
        }
    return {
        "id": comparison.cell.id,
        **json_fields(comparison.cell),
        "metric": comparison.metric,
        "outcome": comparison.outcome.value,
        "verdict": comparison.verdict,
        "ratio": estimate.ratio if estimate else None,
        "low": estimate.low if estimate else None,
        "high": estimate.high if estimate else None,
        "pairs": estimate.pairs if estimate else 0,
        **busy_json(comparison),
        "stopped": comparison.stopped,
        "elapsed_s": round(comparison.elapsed_s, 3),
        "message": comparison.message[-2000:],
        "arms": arms,
        "samples": [sample_json(json_fields(s), headline) for s in comparison.samples],
    }


def sample_json(fields: dict[str, Any], headline: bool) -> dict[str, Any]:
    if not headline:
        fields["value"] = fields.pop("ms_per_token")
    return fields


def busy_json(comparison: Comparison) -> dict[str, Any]:
    """The pairs measured and set aside for contention, and, when that left the cell
    inconclusive, the figures of how busy the machine was (``pairs`` counts the clean ones)."""
    busy = comparison.busy
    return {
        "pairs_measured": busy.pairs if busy else 0,
        "pairs_set_aside": busy.set_aside if busy else 0,
        "busy": json_fields(busy) if busy is not None and busy.set_aside else None,
        "busy_verdict": comparison.busy_verdict,
    }


def log_json(log: PairLog) -> dict[str, Any]:
    """The cell being measured, as far as it got (kept if the run is interrupted)."""
    estimate = log.estimate
    return {
        "id": log.cell.id,
        **json_fields(log.cell),
        "pairs": log.pairs,
        "pairs_set_aside": log.pairs - log.clean_pairs,
        "ratio": estimate.ratio if estimate else None,
        "low": estimate.low if estimate else None,
        "high": estimate.high if estimate else None,
        "samples": [json_fields(s) for s in log.samples],
    }


def render_table(comparisons: list[Comparison], settings: Settings) -> str:
    header = ["cell", "A ms/token", "B ms/token", "B/A", "interval", "pairs", "verdict"]
    rows = []
    for c in comparisons:
        a, b = c.median("a"), c.median("b")
        verdict = (
            c.verdict or f"{c.outcome.value}: {c.message.splitlines()[0] if c.message else ''}"
        )
        if c.busy_verdict:
            verdict = f"{c.verdict}: busy"
        rows.append(
            [
                c.cell.id,
                f"{a:.3f}" if a else "–",
                f"{b:.3f}" if b else "–",
                *interval_cells(c),
                verdict,
            ]
        )
    lines = markdown_table(header, rows)
    lines.append(
        f"(intervals at {settings.look_confidence * 100:.2f} % each: "
        f"{settings.confidence * 100:g} % over all the looks at them)"
    )
    lines += busy_lines(comparisons)
    return "\n".join(lines)


def interval_cells(c: Comparison) -> list[str]:
    """B/A, its interval and the pairs behind it: the columns every verdict table shares."""
    e = c.estimate
    if e is None:
        return ["–", "–", "0"]
    return [f"{e.ratio:.3f}", f"[{e.low:.3f}, {e.high:.3f}]", str(e.pairs)]


# A serving figure's verdict in plain words: "slower" is B worse in the metric's direction.
METRIC_WORDS = {SLOWER: "worse", FASTER: "better"}


def render_metric_table(comparisons: list[Comparison], settings: Settings) -> str:
    """The verdict table of a comparison judged on several metrics (``ab --serve``): one row
    per cell and metric, the arms' medians in the metric's unit."""
    header = ["cell", "metric", "A", "B", "B/A", "interval", "pairs", "verdict"]
    rows = []
    for c in comparisons:
        found = metric(c.metric)
        a, b = c.median("a"), c.median("b")
        first = c.message.splitlines()[0] if c.message else ""
        verdict = METRIC_WORDS.get(c.verdict or "", c.verdict) or f"{c.outcome.value}: {first}"
        rows.append(
            [
                c.cell.id,
                found.abbrev,
                found.format(a) if a else "–",
                found.format(b) if b else "–",
                *interval_cells(c),
                verdict,
            ]
        )
    lines = markdown_table(header, rows)
    lines.append(
        f"(worse: B/A beyond the metric's tolerance in its direction; intervals at "
        f"{settings.look_confidence * 100:.2f} % each, {settings.confidence * 100:g} % in all)"
    )
    return "\n".join(lines)


def busy_lines(comparisons: list[Comparison]) -> list[str]:
    """A line for each cell with pairs set aside for contention, saying how busy it was."""
    lines = []
    for c in comparisons:
        if c.busy is None or not c.busy.set_aside:
            continue
        what = "inconclusive: the machine was busy" if c.busy_verdict else "pairs set aside"
        text = f"{c.cell.id}: {what} ({c.busy.describe()})"
        lines += textwrap.wrap(text, WIDTH, subsequent_indent="  ")
    return lines
