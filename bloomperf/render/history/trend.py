"""The trend of each cell over one topology's nights: what is known of it, and its plot.

A ``Topology`` is one history folder read and judged: its nights, the persistent changes
``bloomperf.analysis.changes`` finds in them (the same as ``history changes`` lists) and each
night's verdicts against the baseline. ``plot_cell`` draws one cell's figures over the nights,
one panel per metric the cell has: nights regressed against the baseline ringed, each persistent
change a dashed line (red worse, green better), nights the cell did not finish crossed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.analysis.changes import Change
from bloomperf.analysis.stats import REGRESSED
from bloomperf.analysis.verdicts import CellVerdict, Comparison
from bloomperf.core.formatting import GIB
from bloomperf.core.metrics import metrics
from bloomperf.render.report.figure import new_figure, save_figure
from bloomperf.render.report.trend import mark_change
from bloomperf.store.baseline import Baseline
from bloomperf.store.history.nights import (
    METRIC_MEMORY,
    METRIC_OUTCOME,
    Night,
    find_cell,
    series,
)


def panels() -> tuple[tuple[str, str, str, float], ...]:
    """The panels of a trend page, top to bottom: one per registered metric, in the registry's
    order (an installed package's too): its name, title, unit and the divisor for that unit."""
    return tuple(panel(m.name, m.label, m.unit) for m in metrics())


def panel(name: str, title: str, unit: str) -> tuple[str, str, str, float]:
    return (name, title, "GiB", float(GIB)) if unit == "bytes" else (name, title, unit, 1.0)


MIN_SPAN = 0.10  # the y range of a panel shows at least ±10 % around the cell's median
WORSE, BETTER, LINE, REGRESSED_COLOUR = "#b00020", "#1b7f2a", "#1f77b4", "#d62728"


@dataclass(frozen=True)
class Topology:
    """One history folder, read and judged: what its trend pages show."""

    name: str
    nights: list[Night]
    changes: list[Change]
    verdicts: list[Comparison]  # one per night, against ``baseline``
    baseline: Baseline | None  # the baseline of the newest night's topology and model

    @property
    def latest(self) -> Comparison:
        return self.verdicts[-1]

    def newest_verdict(self, cell: str) -> CellVerdict | None:
        return next((v for v in self.latest.cells if v.id == cell), None)


# ---- the trend plot of one cell -----------------------------------------------------------------


def cell_changes(topology: Topology, cell: str) -> list[Change]:
    """The persistent changes of one cell, oldest first."""
    return [c for c in topology.changes if c.cell == cell]


def regressed_nights(topology: Topology, cell: str, metric: str) -> set[int]:
    """The nights on which this cell's metric was judged regressed against the baseline."""
    found = set()
    for i, comparison in enumerate(topology.verdicts):
        verdict = next((v for v in comparison.cells if v.id == cell), None)
        judged = verdict.metric(metric) if verdict is not None else None
        if judged is not None and judged.status == REGRESSED:
            found.add(i)
    return found


def plot_cell(topology: Topology, cell: str, path: Path) -> Path | None:
    """The cell's trend page plot written to ``path``; None (nothing written) if it has no
    figure on any night."""
    fig = draw_cell(topology, cell)
    return save_figure(fig, path) if fig is not None else None


def draw_cell(topology: Topology, cell: str) -> Any:
    """The cell's figures over the nights, one panel per metric it has; None if it has none."""
    nights = topology.nights
    panels = [(p, series(nights, cell, p[0])) for p in shown_panels(nights, cell)]
    if not panels:
        return None
    fig = new_figure(9.0, 1.2 + 1.9 * len(panels))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    changes = cell_changes(topology, cell)
    latest = topology.newest_verdict(cell)
    for ax, ((metric, title, unit, scale), points) in zip(axes, panels, strict=True):
        # NaN on the nights without a figure: the line breaks there instead of bridging them.
        ys = [math.nan] * len(nights)
        for i, v in points:
            ys[i] = v / scale
        ax.plot(range(len(nights)), ys, "-o", ms=3, color=LINE, label="measured")
        bad = regressed_nights(topology, cell, metric)
        hits = [(i, v / scale) for i, v in points if i in bad]
        if hits:
            ax.plot(
                *zip(*hits, strict=True),
                "o",
                ms=7,
                mfc="none",
                mec=REGRESSED_COLOUR,
                mew=1.6,
                label="regressed vs baseline",
            )
        expected = latest.metric(metric) if latest is not None else None
        if expected is not None and expected.expected is not None:
            ax.axhline(expected.expected / scale, color="grey", ls=":", lw=1.2, label="baseline")
        for change in changes:
            if change.metric in (metric, METRIC_OUTCOME):
                mark_change(ax, change, WORSE if change.worse else BETTER)
        where = memory_source(nights, cell) if metric == METRIC_MEMORY else ""
        ax.set_title(title + where, fontsize=9, loc="left")
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.margins(y=0.25)
        show_at_least(ax, statistics.median(v / scale for _, v in points))
    mark_failed_nights(axes[0], topology, cell)
    # Below the panels, where it can hide neither a point nor the label of a change.
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", fontsize=7, ncols=4)
    step = max(1, len(nights) // 8)
    ticks = list(range(0, len(nights), step))
    axes[-1].set_xticks(ticks, [nights[i].label for i in ticks], fontsize=7, rotation=30)
    axes[-1].set_xlim(-0.5, len(nights) - 0.5)
    fig.suptitle(f"{cell} on {topology.name}: {len(nights)} nights", fontsize=10)
    return fig


def memory_source(nights: Sequence[Night], cell: str) -> str:
    """What the memory figure is: the GPUs' (NVML, summed over them) or the process's (RSS)."""
    found = [find_cell(n.run, cell) for n in reversed(nights)]
    memories = (c.generate_memory or c.load_memory for c in found if c is not None)
    memory = next((m for m in memories if m is not None), None)
    if memory is None:
        return ""
    return ", all GPUs summed" if memory.source == "nvml" else f", of the process ({memory.source})"


def show_at_least(ax: Any, centre: float, span: float = MIN_SPAN) -> None:
    """A y range of at least ±``span`` around ``centre``: a few per cent of noise must look
    small next to a 15 % step, which an autoscaled axis would both blow up to full height."""
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, centre * (1 - span)), max(high, centre * (1 + span)))


def mark_failed_nights(ax: Any, topology: Topology, cell: str) -> None:
    """A red cross at the bottom edge on each night the cell ran but did not finish."""
    label = "did not finish"
    for i, night in enumerate(topology.nights):
        found = find_cell(night.run, cell)
        if found is not None and found.ms_per_token is None and found.outcome.value != "skipped":
            ax.plot(
                i,
                0.04,
                "x",
                color=WORSE,
                ms=8,
                mew=2,
                transform=ax.get_xaxis_transform(),
                label=label,
            )
            label = "_"  # one legend entry
            ax.annotate(
                found.outcome.value,
                (i, 0.1),
                xycoords=("data", "axes fraction"),
                ha="center",
                fontsize=7,
                color=WORSE,
            )


def shown_panels(nights: Sequence[Night], cell: str) -> list[tuple[str, str, str, float]]:
    """The panels this cell has a figure for on some night."""
    return [p for p in panels() if series(nights, cell, p[0])]
