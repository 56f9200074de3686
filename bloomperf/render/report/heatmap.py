"""The report's first plot: measured ÷ baseline per cell and metric, coloured by verdict.

On ms/token axes spanning three decades a 10 % slowdown is a pixel or two; as a ratio in a grid it
is a red square with "1.10" in it. Each row is a cell, each column a judged metric; a cell without
figures (an OOM, an error, a skipped cell) shows its status across the row.
"""

from __future__ import annotations

from typing import Any

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME
from bloomperf.analysis.verdicts import (
    ERROR,
    TIMEOUT,
    UNEXPECTED_OOM,
    CellVerdict,
    Comparison,
)
from bloomperf.core.metrics import label_of, metric_names
from bloomperf.render.report.figure import new_figure

COLOURS = {
    REGRESSED: "#e06666",
    IMPROVED: "#93c47d",
    SAME: "#f3f3f3",
    UNEXPECTED_OOM: "#b00020",
    ERROR: "#b00020",
    TIMEOUT: "#b00020",
}
OTHER = "#d9e2f3"  # not judged, no baseline, expected OOM, skipped: information, not a verdict


def cell_text(cell: CellVerdict, metric: str) -> tuple[str, str]:
    """(label, colour) of one square."""
    verdict = cell.metric(metric)
    if verdict is None and not cell.metrics:  # an OOM, an error, a skipped cell: no figures
        return cell.status, COLOURS.get(cell.status, OTHER)
    if verdict is None:
        return "–", OTHER  # a metric this cell's comparison does not cover
    if verdict.measured is None or not verdict.expected:
        return verdict.status, OTHER
    ratio = verdict.measured / verdict.expected
    label = f"{ratio:.2f}×" + ("" if verdict.status in (SAME, REGRESSED, IMPROVED) else "*")
    return label, COLOURS.get(verdict.status, OTHER)


def ratio_heatmap(comparison: Comparison) -> Any:
    """The heatmap as a matplotlib Figure. ``*``: a ratio shown but not judged."""
    from matplotlib.patches import Patch

    cells = comparison.cells
    # The metrics some cell was compared on (a baseline without TTFT adds no empty column).
    names = metric_names()
    metrics = [m for m in names if any(c.metric(m) for c in cells)] or list(names)
    fig = new_figure(8.0, 1.6 + 0.3 * len(cells))
    ax = fig.add_subplot()
    for row, cell in enumerate(cells):
        for col, metric in enumerate(metrics):
            label, colour = cell_text(cell, metric)
            ax.add_patch(_square(col, row, colour))
            dark = colour == COLOURS[ERROR]
            verdict = cell.metric(metric)
            bold = dark or (verdict is not None and verdict.status == REGRESSED)
            ax.text(
                col + 0.5,
                row + 0.5,
                label,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if dark else "black",
                fontweight="bold" if bold else "normal",
            )
    ax.set_xlim(0, len(metrics))
    ax.set_ylim(len(cells), 0)
    ax.set_xticks([i + 0.5 for i in range(len(metrics))], [label_of(m) for m in metrics])
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(cells))], [c.id for c in cells], fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(f"measured ÷ baseline, {comparison.summary}", fontsize=9, loc="left", pad=24)
    legend: list[Any] = [
        Patch(color=COLOURS[REGRESSED], label="regressed"),
        Patch(color=COLOURS[IMPROVED], label="improved"),
        Patch(color=COLOURS[SAME], label="same"),
        Patch(color=COLOURS[ERROR], label="unexpected OOM / error / timeout"),
        Patch(color=OTHER, label="not judged (* ratio shown), OOM expected, no baseline"),
    ]
    fig.legend(handles=legend, loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    return fig


def _square(col: int, row: int, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((col, row), 1, 1, facecolor=colour, edgecolor="white", linewidth=1.5)
