"""The report's trend plot: ms/token of every cell over the nights of a history (and a serving
sweep's effective throughput and p99 TTFT and ITL: it has no ms/token), the nights where a
persistent change started (``bloomperf.analysis.changes`` finds them) marked in red.

Each panel is one cell's figure relative to its own median, all on one y scale: ±3 % of noise
must look small next to a 15 % step, which autoscaled axes would both blow up to full height.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloomperf.analysis.changes import Change
from bloomperf.core.metrics import format_value, label_of
from bloomperf.render.report.figure import COLOURS, OOM_COLOUR, new_figure, save_figure
from bloomperf.store.history.nights import METRIC_MS, Night, series
from bloomperf.store.results import CellResult
from bloomperf.store.serving import EFFECTIVE, ITL_P99, TTFT_P99

# What a panel draws: a cell's ms/token, else (a serving sweep) the figures the gate judges of it.
TREND_METRICS = (METRIC_MS, EFFECTIVE, TTFT_P99, ITL_P99)
Panel = tuple[CellResult, str]  # a cell and one metric of it
MIN_WIDTH = 9.0  # inches: the title's line, at its font size


def trend_panels(nights: Sequence[Night]) -> list[Panel]:
    """Every cell of the history with each trend metric it has figures of, in table order."""
    cells = sorted(
        {c.id: c for n in nights for c in n.run.cells}.values(),
        key=lambda c: (c.backend, c.dtype, c.batch_size),
    )
    return [(c, m) for c in cells for m in TREND_METRICS if series(nights, c.id, m)]


def percent_range(nights: Sequence[Night], panels: Sequence[Panel]) -> tuple[float, float]:
    """A y range shared by every trend panel: at least ±10 %, wider where the data go."""
    low, high = -10.0, 10.0
    for cell, metric in panels:
        values = [v for _, v in series(nights, cell.id, metric)]
        centre = statistics.median(values)
        low = min(low, *((v / centre - 1) * 100 for v in values))
        high = max(high, *((v / centre - 1) * 100 for v in values))
    return low * 1.1, high * 1.25  # headroom at the top for the change labels


def mark_change(ax: Any, change: Change, colour: str = OOM_COLOUR) -> None:
    """A dashed line on the night a persistent change started, labelled with its size."""
    ax.axvline(change.night, color=colour, ls="--", lw=1.2)
    rel = change.relative
    text = f"{rel * 100:+.0f}%" if rel is not None else f"→ {change.after}"
    ax.annotate(
        f"{text} from\n{change.night_label}",
        (change.night, 0.96),
        xycoords=("data", "axes fraction"),
        va="top",
        ha="right",
        fontsize=7,
        color=colour,
        xytext=(-3, 0),
        textcoords="offset points",
    )


def plot_trend(
    nights: Sequence[Night], changes: Sequence[Change], path: Path, tolerance: float
) -> Path:
    """The report's trend plot, written to ``path``."""
    return save_figure(draw_trend(nights, changes, tolerance), path)


def draw_trend(nights: Sequence[Night], changes: Sequence[Change], tolerance: float) -> Any:
    """Each panel's figure over the nights; a red line where a persistent change started."""
    panels = trend_panels(nights)
    columns = 4 if len(panels) > 4 else max(1, len(panels))
    lines = max(1, math.ceil(len(panels) / columns))
    # A fixed grid: constrained layout costs seconds per panel with a month of cells. Never
    # narrower than the title's one line: one panel 3.2 inches wide cut the title and the
    # per cent labels at both edges.
    width, height = max(3.2 * columns, MIN_WIDTH), 2.3 * lines + 0.7
    fig = new_figure(width, height, layout=None)
    # Inches, not shares: one row of panels must still show its dates under the axes, and a
    # narrow figure its per cent labels left of them.
    # A served figure's title takes a second line (its metric): room for it above each row.
    titled = 2 if any(metric != METRIC_MS for _, metric in panels) else 1
    top, bottom = 1 - (0.45 + 0.15 * titled) / height, 0.3 / height
    left, right = 0.75 / width, 1 - 0.1 / width
    fig.subplots_adjust(
        left=left, right=right, bottom=bottom, top=top, hspace=0.3 + 0.15 * titled, wspace=0.25
    )
    axes = fig.subplots(lines, columns, squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    step = max(1, math.ceil(len(nights) / 5))  # five dates fit a panel's width
    ticks = list(range(0, len(nights), step))
    low, high = percent_range(nights, panels)
    for ax, (cell, metric) in zip(axes.flat, panels, strict=False):
        points = series(nights, cell.id, metric)
        # Relative to the cell's median, on one scale for all cells: ±3 % of noise must look
        # small next to a 15 % step, which autoscaled axes would both blow up to full height.
        centre = statistics.median(v for _, v in points)
        percent = [(v / centre - 1) * 100 for _, v in points]
        ax.axhspan(-tolerance * 100, tolerance * 100, color="grey", alpha=0.12, lw=0)
        ax.plot([i for i, _ in points], percent, "-o", ms=3, color=COLOURS[0])
        for change in changes:
            if change.cell == cell.id and change.metric in (metric, "outcome"):
                mark_change(ax, change)
        shown = "" if metric == METRIC_MS else f"\n{label_of(metric)}"
        median = format_value(metric, centre)
        ax.set_title(f"{cell.id}{shown} (median {median})", fontsize=8)
        ax.set_xticks(ticks, [nights[i].label[5:10] for i in ticks], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlim(-0.5, len(nights) - 0.5)
        ax.set_ylim(low, high)
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("% vs median", fontsize=8)
    what = "ms per token" if all(m == METRIC_MS for _, m in panels) else "each cell's figures"
    fig.suptitle(
        f"{what} over {len(nights)} nights ({nights[0].label} … {nights[-1].label}); "
        f"grey band: ±{tolerance * 100:g} %; dashed red: a persistent change started",
        fontsize=10,
    )
    return fig
