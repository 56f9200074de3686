"""The scaffolding every report plot stands on: the figure, the batch-size and log axes, the marks
the plots share (the baseline dashed, OOM cells crossed or ringed), the legend, and the save.

One look for every plot: a reader learns once that dashed and hollow means "the baseline", a
filled cross edged red "ran out of memory" and a ring "the baseline expected it to".
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloomperf.core.jsonfile import write_bytes_atomic
from bloomperf.store.baseline import EXPECT_OOM, Baseline
from bloomperf.store.results import CellResult

# The height of one row's OOM marks in the band above the figures, as a fraction of the axes.
OOM_ROW = 0.05
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OOM_COLOUR = "#b00020"


def new_figure(width: float = 9.0, height: float = 5.2, layout: Any = "constrained") -> Any:
    # The object API, not pyplot: no global figure state, no display backend needed.
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout=layout)


def row_cells(cells: Sequence[CellResult], row: tuple[str, str]) -> list[CellResult]:
    """One backend and dtype's cells, by batch size."""
    return sorted((c for c in cells if (c.backend, c.dtype) == row), key=lambda c: c.batch_size)


def expected_ooms(
    baseline: Baseline | None, row: tuple[str, str], sizes: Sequence[int]
) -> list[int]:
    """Batch sizes of ``sizes`` at which the baseline expects one backend and dtype to OOM."""
    cells = baseline.cells if baseline is not None else ()
    return [
        b.batch_size
        for b in cells
        if (b.backend, b.dtype) == row and b.outcome == EXPECT_OOM and b.batch_size in sizes
    ]


def batch_axis(ax: Any, sizes: Sequence[int]) -> None:
    """Log x axis whose ticks are exactly the batch sizes that ran."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("batch size")
    if sizes:
        ax.set_xlim(min(sizes) / 1.4, max(sizes) * 1.4)


def log_value_axis(ax: Any, values: Sequence[float], ylabel: str) -> None:
    """Log y axis with ticks at 1-2-5 of each decade, or denser where the figures span less than
    a decade (else only one or two ticks show)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    positive = [v for v in values if v > 0]
    narrow = bool(positive) and max(positive) < 10 * min(positive)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(
        LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0))
    )
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def plot_baseline(
    ax: Any, points: Sequence[tuple[float, float]], colour: str, label: str | None = None
) -> None:
    """The baseline of one row: dashed, hollow markers, in the row's colour."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs, ys, "--", marker="o", mfc="none", color=colour, alpha=0.7, label=label)


def draw_row(
    ax: Any,
    i: int,
    label: str,
    points: Sequence[tuple[float, float]],
    expected: Sequence[tuple[float, float]],
    ooms: Sequence[int],
    expected_oom: Sequence[int],
) -> set[str]:
    """Row ``i`` (one backend and dtype) in its colour: the measured line, the baseline dashed,
    and its OOM cells in the band at the top at the row's own height, so that two rows running
    out of memory at the same batch size both show. Returns what it drew (for the legend)."""
    colour = COLOURS[i % len(COLOURS)]
    drawn = set()
    if points:
        ax.plot(*zip(*points, strict=True), "-o", color=colour, label=label)
        drawn.add("measured")
    if expected:
        plot_baseline(ax, expected, colour)
        drawn.add("baseline")
    y = 0.97 - OOM_ROW * i
    if ooms:
        mark_ooms(ax, ooms, y, colour, expected=False)
        drawn.add("oom")
    if expected_oom:
        mark_ooms(ax, expected_oom, y, colour, expected=True)
        drawn.add("oom-baseline")
    return drawn


def mark_ooms(ax: Any, sizes: Sequence[int], y: float, colour: str, expected: bool) -> None:
    """OOM cells at height ``y`` (a fraction of the axes): measured ones a filled cross edged
    red, the baseline's a ring a size larger, so that a cross inside a ring reads "ran out of
    memory, as the baseline expects"."""
    ring = {"marker": "o", "mfc": "none", "mew": 1.5, "ms": 14}
    cross = {"marker": "X", "mec": OOM_COLOUR, "mew": 1.2, "ms": 11}
    ax.plot(
        list(sizes),
        [y] * len(sizes),
        ls="",
        color=colour,
        transform=ax.get_xaxis_transform(),  # x in data, y in axes fraction
        clip_on=False,
        **(ring if expected else cross),
    )


def oom_band(ax: Any, low: float, high: float, rows: int, log: bool) -> None:
    """Room above the figures (``low`` … ``high``) for ``rows`` rows of OOM marks, shaded and
    labelled "out of memory", with no tick in it: its marks are outcomes, not amounts."""
    band = 0.03 + OOM_ROW * rows
    # The figures keep the lower 1 - band of the axes, on a log scale too.
    top = low * (high / low) ** (1 / (1 - band)) if log else low + (high - low) / (1 - band)
    ax.set_ylim(low, top)
    ax.axhspan(high, top, color="grey", alpha=0.08, lw=0)
    ax.annotate(
        "out of memory",
        (0.005, 1 - band / 2),
        xycoords="axes fraction",
        va="center",
        fontsize=8,
        color=OOM_COLOUR,
    )
    ax.set_yticks([t for t in ax.get_yticks() if low <= t <= high])


def legend_entries(drawn: set[str]) -> list[Any]:
    """The grey legend entries that explain the line styles and marks drawn (``draw_row``'s, and
    "regressed": a cell ringed in red)."""
    from matplotlib.lines import Line2D

    def entry(label: str, style: dict[str, Any]) -> Any:
        return Line2D([], [], label=label, **({"color": "grey", "marker": "o"} | style))

    styles: list[tuple[str, str, dict[str, Any]]] = [
        ("measured", "measured", {"ls": "-"}),
        ("baseline", "baseline", {"ls": "--", "mfc": "none"}),
        ("oom", "OOM (measured)", {"ls": "", "marker": "X", "ms": 10, "mec": OOM_COLOUR}),
        ("oom-baseline", "OOM (baseline)", {"ls": "", "mfc": "none", "ms": 11}),
    ]
    entries = [entry(label, style) for key, label, style in styles if key in drawn]
    if "regressed" in drawn:
        red = {"ls": "", "ms": 12, "mfc": "none", "mec": OOM_COLOUR, "mew": 2}
        entries.append(entry("regressed", red))
    return entries


def style_legend(ax: Any, extra: Sequence[Any]) -> None:
    """The rows' legend and ``extra`` entries, outside the axes on the right."""
    handles, labels = ax.get_legend_handles_labels()
    for handle in extra:
        handles.append(handle)
        labels.append(handle.get_label())
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def finish_legend(ax: Any, drawn: set[str], extra: Sequence[Any] = ()) -> None:
    """The legend: the rows, then what ``drawn`` marks mean, then ``extra``."""
    style_legend(ax, [*legend_entries(drawn), *extra])


def save_figure(fig: Any, path: Path) -> Path:
    """Render to memory, then write atomically: never into a file or link planted at ``path``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_bytes_atomic(path, buffer.getvalue())
    return path
