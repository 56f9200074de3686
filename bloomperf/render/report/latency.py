"""The report's latency and energy plots: TTFT and TPOT against batch size, the TPOT tail per
backend and dtype, and energy per token.

ms/token alone hides whether a change slowed the prefill or the decode; these plots split them.
The figures are the cell's own (``bloomperf.store.results.latency_to_dict`` and its energy
reading), so the plots show exactly what the results JSON stores. Each plotting function returns
the series it drew, ``{label: [(batch size, value), ...]}``, which is what a test checks against
the cells.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.backends import row_label
from bloomperf.core.formatting import table_layout
from bloomperf.render.report.figure import (
    COLOURS,
    batch_axis,
    log_value_axis,
    new_figure,
    plot_baseline,
    row_cells,
    save_figure,
)
from bloomperf.store.baseline import EXPECT_OK, Baseline
from bloomperf.store.results import CellResult, RunResult, latency_to_dict

Series = dict[str, list[tuple[int, float]]]

# (key, heading, file) in page order, after the report's own plots.
LATENCY_PLOTS = (
    ("ttft", "Time to first token", "ttft.png"),
    ("tpot", "Time per output token", "tpot.png"),
    ("tail", "TPOT percentiles", "tpot_percentiles.png"),
    ("energy", "Energy per token", "energy_per_token.png"),
)
LATENCY_HEADINGS = tuple((key, heading) for key, heading, _ in LATENCY_PLOTS)
LATENCY_FILES = tuple(name for _, _, name in LATENCY_PLOTS)
# The figure a cell must have for the plot to show it.
NEEDS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "tail": "tpot_ms", "energy": "j_per_token"}
PERCENTILES = (("tpot_ms", "p50", "-"), ("tpot_p90_ms", "p90", "--"), ("tpot_p99_ms", "p99", ":"))


@dataclass(frozen=True)
class LatencyPlots:
    """The PNGs written (by key), what each plotted, and why a plot was left out (by key)."""

    paths: dict[str, Path]
    series: dict[str, Series]
    notes: dict[str, str]


# ---- the figures --------------------------------------------------------------------------------


def figure_of(cell: CellResult, name: str) -> float | None:
    """A cell's stored latency figure (``ttft_ms``, ``tpot_p99_ms``...) or ``j_per_token``."""
    if name == "j_per_token":
        return cell.energy.j_per_token if cell.energy is not None else None
    return latency_to_dict(cell)[name]


def rows_of(run: RunResult) -> list[tuple[str, list[CellResult]]]:
    """(label, cells by batch size) per backend and dtype, in the report's row order."""
    return [(row_label(*row), row_cells(run.cells, row)) for row in table_layout(run.cells)[0]]


def measured(cells: Sequence[CellResult], name: str) -> list[tuple[int, float]]:
    points = [(c.batch_size, figure_of(c, name)) for c in cells]
    return [(b, v) for b, v in points if v is not None]


def expected(baseline: Baseline | None, row: tuple[str, str], name: str) -> list[tuple[int, float]]:
    """The baseline's median per cell, where it was accepted from a run with step times."""
    if baseline is None:
        return []
    cells = sorted(baseline.cells, key=lambda b: b.batch_size)
    return [
        (b.batch_size, statistics.median(b.figure_samples[name]))
        for b in cells
        if (b.backend, b.dtype) == row and b.outcome == EXPECT_OK and b.figure_samples.get(name)
    ]


def flag_lines(run: RunResult) -> list[str]:
    """One line per cell measured while the GPU throttled or its clocks moved."""
    return [
        f"{c.id}: telemetry flags: {', '.join(c.telemetry.flags)}"
        for c in run.cells
        if c.telemetry is not None and c.telemetry.flags
    ]


def missing_note(run: RunResult, key: str) -> str:
    """Why a plot is left out rather than drawn empty."""
    if key != "energy":
        return "Not drawn: no cell has per-step times (none ran, or the file predates them)."
    # The first reason a cell's energy reading gives, else that none was taken.
    reasons = [c.energy.reason for c in run.cells if c.energy is not None and c.energy.reason]
    why = reasons[0] if reasons else "no energy reading in the results"
    return f"No energy plot: no cell has an energy figure ({why})."


# ---- plots --------------------------------------------------------------------------------------


def log_axes(ax: Any, series: Series, ylabel: str) -> None:
    """Log axes: x ticks exactly the batch sizes in ``series``, y ticks as its span needs."""
    batch_axis(ax, sorted({b for points in series.values() for b, _ in points}))
    log_value_axis(ax, [v for points in series.values() for _, v in points], ylabel)


def by_batch_figure(
    run: RunResult, baseline: Baseline | None, name: str, ylabel: str, title: str
) -> tuple[Any, Series]:
    """``name`` against batch size, one colour per backend and dtype, the baseline dashed: the
    figure and what it drew."""
    fig = new_figure(9.0, 5.0)
    ax = fig.add_subplot()
    series: Series = {}
    for i, (label, cells) in enumerate(rows_of(run)):
        colour = COLOURS[i % len(COLOURS)]
        points = measured(cells, name)
        if points:
            series[label] = points
            ax.plot(*zip(*points, strict=True), "-o", color=colour, label=label)
        base = expected(baseline, (cells[0].backend, cells[0].dtype), name)
        if base:
            series[f"{label} (baseline)"] = base
            plot_baseline(ax, base, colour, f"{label} (baseline)")
    log_axes(ax, series, ylabel)
    ax.set_title(f"{run.model.name} on {run.topology}: {title}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig, series


def tail_figure(run: RunResult) -> tuple[Any, Series]:
    """One panel per backend and dtype, three to a line: TPOT p50, p90 and p99 against batch
    size. The figure and what it drew."""
    rows = [(label, cells) for label, cells in rows_of(run) if measured(cells, "tpot_ms")]
    from matplotlib.lines import Line2D

    columns = min(3, max(1, len(rows)))
    lines = -(-max(1, len(rows)) // columns)
    fig = new_figure(3.6 * columns + 1.0, 3.4 * lines)
    axes = fig.subplots(lines, columns, squeeze=False, sharey=True)
    series: Series = {}
    for i, (label, cells) in enumerate(rows):
        ax = axes[i // columns][i % columns]
        colour = COLOURS[i % len(COLOURS)]
        for name, tag, style in PERCENTILES:
            points = measured(cells, name)
            series[f"{label} {tag}"] = points
            ax.plot(*zip(*points, strict=True), style, marker="o", color=colour, label=tag)
        ax.set_title(label, fontsize=9)
    for ax in axes.flat:  # after every panel: the panels share their y axis and its ticks
        log_axes(ax, series, "")
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("ms per decode step")
    fig.suptitle(f"{run.model.name} on {run.topology}: time per output token, percentiles")
    # One legend for every panel: the line style is the percentile, the colour the panel's row.
    legend = [
        Line2D([], [], color="grey", ls=style, marker="o", label=tag)
        for _, tag, style in PERCENTILES
    ]
    fig.legend(handles=legend, loc="outside right upper", fontsize=8)
    return fig, series


# Each plot's figure and what it drew, from the run and the baseline.
FIGURES: dict[str, Callable[[RunResult, Baseline | None], tuple[Any, Series]]] = {
    "ttft": lambda run, baseline: by_batch_figure(
        run, baseline, "ttft_ms", "ms, prefill step", "time to first token by batch size"
    ),
    "tpot": lambda run, baseline: by_batch_figure(
        run, baseline, "tpot_ms", "ms per decode step (median)", "time per output token"
    ),
    "tail": lambda run, _: tail_figure(run),
    "energy": lambda run, _: by_batch_figure(
        run, None, "j_per_token", "joules per token", "energy per token by batch size"
    ),
}


def write_latency_plots(run: RunResult, baseline: Baseline | None, out: Path) -> LatencyPlots:
    """Every plot whose figure some cell has into ``out``; a note for the others (energy on a
    CPU without RAPL, latency from a results file older than per-step timing)."""
    paths: dict[str, Path] = {}
    series: dict[str, Series] = {}
    notes: dict[str, str] = {}
    for key, _, name in LATENCY_PLOTS:
        if not any(figure_of(c, NEEDS[key]) is not None for c in run.cells):
            notes[key] = missing_note(run, key)
            continue
        fig, series[key] = FIGURES[key](run, baseline)
        paths[key] = save_figure(fig, out / name)
    return LatencyPlots(paths, series, notes)
