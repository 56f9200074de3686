"""The report's timing plots: ms/token against batch size, and load time per backend and dtype.

ms/token: one colour per backend and dtype, log axes whose ticks are the batch sizes, the baseline
dashed beside the measurement, regressed cells ringed in red, OOM cells in a band at the top
(measured crossed, the baseline's ringed), each row at its own height so that two rows running out
of memory at the same batch size both show. Load time: bars, the baseline's hatched beside them.
"""

from __future__ import annotations

from typing import Any

from bloomperf.backends import row_label
from bloomperf.core.formatting import format_seconds, table_layout
from bloomperf.render.report.figure import (
    COLOURS,
    OOM_COLOUR,
    batch_axis,
    draw_row,
    expected_ooms,
    finish_legend,
    log_value_axis,
    new_figure,
    oom_band,
    row_cells,
)
from bloomperf.store.baseline import Baseline, matching_load_time
from bloomperf.store.results import Outcome, RunResult


def ms_per_token_figure(
    run: RunResult, baseline: Baseline | None, regressed: frozenset[str] = frozenset()
) -> Any:
    """``regressed``: ids of the cells whose ms/token regressed, ringed in red."""
    fig = new_figure()
    ax = fig.add_subplot()
    sizes = sorted({c.batch_size for c in run.cells})
    rows = table_layout(run.cells)[0]
    values: list[float] = []
    drawn: set[str] = set()
    for i, row in enumerate(rows):
        cells = [c for c in row_cells(run.cells, row) if c.ms_per_token is not None]
        ok = [(c.batch_size, c.ms_per_token or 0.0) for c in cells]
        worse = [point for point, c in zip(ok, cells, strict=True) if c.id in regressed]
        if worse:
            # On top of every row: a regressed point must not hide under another row's point
            # of about the same figure (the regressed fixture's bs8 rows differ by 0.2 %).
            xs, ys = [b for b, _ in worse], [ms for _, ms in worse]
            ax.plot(xs, ys, "o", color=COLOURS[i % len(COLOURS)], zorder=4)
            ax.plot(xs, ys, "o", ms=16, mfc="none", mec=OOM_COLOUR, mew=2, zorder=4)
            drawn.add("regressed")
        expected = [
            (b.batch_size, b.ms_per_token)
            for b in sorted(baseline.cells if baseline else (), key=lambda b: b.batch_size)
            if (b.backend, b.dtype) == row and b.ms_per_token is not None
        ]
        ooms = [c.batch_size for c in row_cells(run.cells, row) if c.outcome == Outcome.OOM]
        expected_oom = expected_ooms(baseline, row, sizes)
        drawn |= draw_row(ax, i, row_label(*row), ok, expected, ooms, expected_oom)
        values += [ms for _, ms in ok + expected]
        sizes = sorted(set(sizes) | {b for b, _ in expected} | set(expected_oom))
    batch_axis(ax, sizes)
    log_value_axis(ax, values, "ms per token (lower is better)")
    if values and drawn & {"oom", "oom-baseline"}:
        oom_band(ax, min(values) / 1.3, max(values) * 1.3, len(rows), log=True)
    ax.set_title(f"{run.model.name} on {run.topology}: ms per token by batch size")
    finish_legend(ax, drawn)
    return fig


def load_times(
    run: RunResult, baseline: Baseline | None
) -> list[tuple[str, float | None, float | None]]:
    """(row label, measured seconds, baseline seconds) per backend and dtype."""
    out = []
    for row in table_layout(run.cells)[0]:
        cells = row_cells(run.cells, row)
        measured = [c.load_time_s for c in cells if c.load_time_s is not None]
        expected = None
        if baseline is not None:
            found = next(
                (lt for c in cells if (lt := matching_load_time(baseline, c)) is not None), None
            )
            expected = found.seconds if found is not None else None
        # One load serves every batch size of the row; cells repeat the figure.
        out.append((row_label(*row), max(measured) if measured else None, expected))
    return out


def load_time_figure(run: RunResult, baseline: Baseline | None) -> Any:
    fig = new_figure(9.0, 4.0)
    ax = fig.add_subplot()
    rows = load_times(run, baseline)
    ys = range(len(rows))
    measured = [m or 0.0 for _, m, _ in rows]
    ax.barh([y + 0.2 for y in ys], measured, height=0.38, color=COLOURS[0], label="measured")
    if any(e is not None for _, _, e in rows):
        expected = [e or 0.0 for _, _, e in rows]
        ax.barh(
            [y - 0.2 for y in ys],
            expected,
            height=0.38,
            color="none",
            edgecolor="grey",
            hatch="//",
            label="baseline",
        )
    for y, (_, m, e) in zip(ys, rows, strict=True):
        if m is not None:
            label_bar(ax, format_seconds(m), m, y + 0.2, "black")
        else:
            label_bar(ax, "not measured", 0.0, y + 0.2, "grey")
        if e is not None:
            label_bar(ax, format_seconds(e), e, y - 0.2, "grey")
    ax.set_yticks(list(ys), [label for label, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("model load time (s, lower is better)")
    ax.margins(x=0.15)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{run.model.name} on {run.topology}: load time")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def label_bar(ax: Any, text: str, x: float, y: float, colour: str) -> None:
    """A bar's figure just right of its end."""
    ax.annotate(
        text,
        (x, y),
        va="center",
        xytext=(3, 0),
        textcoords="offset points",
        fontsize=8,
        color=colour,
    )
