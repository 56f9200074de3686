"""`bloomperf report RESULT… --out DIR`: a page to look at rather than a table to read.

Writes into DIR: ``index.html`` (self-contained: the plots are embedded, so it can be mailed or
uploaded as one artifact file), ``report.md`` (the same content for a pull request or a job
summary, next to the PNG files it links) and the PNGs themselves:

* ``ms_per_token.png``: ms/token against batch size, one colour per backend and dtype, log axes
  whose ticks are the batch sizes; the baseline dashed beside the measurement; OOM cells crossed
  at the top edge (measured) or ringed (expected by the baseline).
* ``memory.png``: peak memory per GPU against batch size (the fullest GPU, with the band down to
  the emptiest: pipeline parallelism leaves GPUs unevenly filled), one GPU's capacity as a line,
  the baseline dashed; OOMs in a band above, measured crossed, the baseline's ringed.
* ``load_time.png``: load time per backend and dtype as bars, the baseline's beside them.
* ``trend.png`` (with ``--history``): ms/token of every cell over the nights, the nights where a
  persistent change started marked (``bloomperf.history`` finds them).

The verdicts come from ``bloomperf.compare`` and the baseline from ``bloomperf.baseline``: the
report draws, it does not judge.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.baseline import (
    EXPECT_OOM,
    Baseline,
    find_baseline,
    matching_load_time,
    resolve_baseline,
)
from bloomperf.compare import REGRESSED, Comparison, judge
from bloomperf.comparison_text import table_rows
from bloomperf.errors import BloomperfError
from bloomperf.formatting import GIB, clean, markdown_table, row_label, table_layout
from bloomperf.history import (
    DEFAULT_TOLERANCE,
    METRIC_MS,
    Change,
    Night,
    add_detection_options,
    describe_change,
    detect_changes,
    detection_settings,
    load_history,
    render_changes,
    series,
)
from bloomperf.jsonfile import refuse_overwriting_inputs, write_bytes_atomic, write_text_atomic
from bloomperf.report_environment import environment_rows, plots_note, shown_baseline
from bloomperf.report_heatmap import ratio_heatmap
from bloomperf.report_latency import (
    LATENCY_FILES,
    LATENCY_HEADINGS,
    flag_lines,
    write_latency_plots,
)
from bloomperf.report_memory import baseline_per_gpu, memory_scale, per_gpu_peak
from bloomperf.resultfiles import read_many
from bloomperf.results import CellResult, Outcome, RunResult

# Every file a report writes into its --out folder.
REPORT_FILES = (
    "index.html",
    "report.md",
    "ratio_heatmap.png",
    "ms_per_token.png",
    "memory.png",
    "load_time.png",
    "trend.png",
    *LATENCY_FILES,
)
# The plots in page order: the ratio heatmap first, where a regression shows at a glance.
PLOT_HEADINGS = (
    ("heatmap", "Measured ÷ baseline"),
    ("ms", "ms per token"),
    ("memory", "Peak memory"),
    ("load", "Load time"),
)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OOM_COLOUR = "#b00020"


@dataclass(frozen=True)
class Report:
    """What ``write_report`` produced: the files and the history changes it marked."""

    html: Path
    markdown: Path
    plots: tuple[Path, ...]
    changes: tuple[Change, ...] = ()


# ---- gathering ----------------------------------------------------------------------------------


def row_cells(cells: Sequence[CellResult], row: tuple[str, str]) -> list[CellResult]:
    return sorted((c for c in cells if (c.backend, c.dtype) == row), key=lambda c: c.batch_size)


# ---- plots --------------------------------------------------------------------------------------


def new_figure(width: float = 9.0, height: float = 5.2, layout: Any = "constrained") -> Any:
    # The object API, not pyplot: no global figure state, no display backend needed.
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout=layout)


def batch_axis(ax: Any, sizes: Sequence[int]) -> None:
    """Log x axis whose ticks are exactly the batch sizes that ran."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_xlabel("batch size")
    if sizes:
        ax.set_xlim(min(sizes) / 1.4, max(sizes) * 1.4)


def ms_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("ms per token (lower is better)")
    ax.grid(True, which="major", alpha=0.3)


def style_legend(ax: Any, extra: Sequence[Any]) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for handle in extra:
        handles.append(handle)
        labels.append(handle.get_label())
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)


def plot_ms_per_token(
    run: RunResult,
    baseline: Baseline | None,
    path: Path,
    regressed: frozenset[str] = frozenset(),
) -> Path:
    """``regressed``: ids of the cells whose ms/token regressed, ringed in red."""
    from matplotlib.lines import Line2D

    fig = new_figure()
    ax = fig.add_subplot()
    sizes = sorted({c.batch_size for c in run.cells})
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction: OOM marks sit on the top edge
    for i, row in enumerate(table_layout(run.cells)[0]):
        colour = COLOURS[i % len(COLOURS)]
        cells = row_cells(run.cells, row)
        ok = [(c.batch_size, c.ms_per_token) for c in cells if c.ms_per_token is not None]
        if ok:
            ax.plot(*zip(*ok, strict=True), "-o", color=colour, label=row_label(*row))
        worse = [
            (c.batch_size, c.ms_per_token)
            for c in cells
            if c.id in regressed and c.ms_per_token is not None
        ]
        if worse:
            ax.plot(*zip(*worse, strict=True), "o", ms=16, mfc="none", mec=OOM_COLOUR, mew=2)
        # Each row's OOM marks on their own height: two rows OOM at the same batch size both show.
        oom_y = 0.97 - 0.045 * i
        ooms = [c.batch_size for c in cells if c.outcome == Outcome.OOM]
        if ooms:
            ax.plot(
                ooms,
                [oom_y] * len(ooms),
                "X",
                color=colour,
                ms=11,
                mec=OOM_COLOUR,
                mew=1.2,
                transform=top,
                clip_on=False,
            )
        if baseline is not None:
            expected = [
                (b.batch_size, b.ms_per_token)
                for b in sorted(baseline.cells, key=lambda b: b.batch_size)
                if (b.backend, b.dtype) == row and b.ms_per_token is not None
            ]
            if expected:
                ax.plot(
                    *zip(*expected, strict=True),
                    "--",
                    marker="o",
                    mfc="none",
                    color=colour,
                    alpha=0.7,
                )
            expected_oom = [
                b.batch_size
                for b in baseline.cells
                if (b.backend, b.dtype) == row and b.outcome == EXPECT_OOM and b.batch_size in sizes
            ]
            if expected_oom:
                ax.plot(
                    expected_oom,
                    [oom_y] * len(expected_oom),
                    "o",
                    mfc="none",
                    color=colour,
                    ms=11,
                    mew=1.5,
                    transform=top,
                    clip_on=False,
                )
            sizes = sorted(set(sizes) | {b for b, _ in expected} | set(expected_oom))
    batch_axis(ax, sizes)
    ms_axis(ax)
    ax.set_title(f"{run.model.name} on {run.topology}: ms per token by batch size")
    extra = [
        Line2D([], [], color="grey", ls="-", marker="o", label="measured"),
        Line2D([], [], color="grey", ls="--", marker="o", mfc="none", label="baseline"),
        Line2D(
            [], [], color="grey", ls="", marker="X", ms=10, mec=OOM_COLOUR, label="OOM (measured)"
        ),
        Line2D([], [], color="grey", ls="", marker="o", mfc="none", ms=10, label="OOM (baseline)"),
    ]
    extra = extra if baseline is not None else extra[:1] + extra[2:3]
    if regressed:
        ring = Line2D([], [], ls="", marker="o", ms=12, mfc="none", mec=OOM_COLOUR, mew=2)
        extra.append(ring)
        ring.set_label("regressed")
    style_legend(ax, extra)
    save_figure(fig, path)
    return path


def plot_memory(run: RunResult, baseline: Baseline | None, path: Path) -> Path:
    """Peak memory per GPU against one GPU's capacity and the baseline; OOMs in a band above."""
    from matplotlib.lines import Line2D

    fig = new_figure()
    ax = fig.add_subplot()
    sizes = sorted({c.batch_size for c in run.cells})
    scale = memory_scale(run.topology, run.cells)
    rows = table_layout(run.cells)[0]
    top = float(scale.capacity_bytes or 0)
    marks = ax.get_xaxis_transform()  # x in data, y in axes fraction: the OOM band at the top
    per_device = drew_baseline = False
    for i, row in enumerate(rows):
        colour = COLOURS[i % len(COLOURS)]
        cells = row_cells(run.cells, row)
        kept = [(c.batch_size, m) for c in cells if (m := per_gpu_peak(c, scale)) is not None]
        if kept:
            xs = [b for b, _ in kept]
            ax.plot(xs, [m[0] / GIB for _, m in kept], "-o", color=colour, label=row_label(*row))
            if any(m[2] for _, m in kept):
                per_device = True
                lows = [m[1] / GIB for _, m in kept]
                ax.fill_between(xs, lows, [m[0] / GIB for _, m in kept], color=colour, alpha=0.1)
            top = max(top, *(m[0] for _, m in kept))
        expected = baseline_per_gpu(baseline, row, scale)
        if expected:
            drew_baseline = True
            ax.plot(
                *zip(*[(b, v / GIB) for b, v in expected], strict=True),
                "--",
                marker="o",
                mfc="none",
                color=colour,
                alpha=0.7,
            )
            top = max(top, *(v for _, v in expected))
            sizes = sorted(set(sizes) | {b for b, _ in expected})
        # Each row's OOM marks at their own height in the band, measured ones filled and edged
        # red, the baseline's hollow rings: neither can be read as a memory figure.
        y = 0.965 - 0.05 * i
        ooms = [c.batch_size for c in cells if c.outcome == Outcome.OOM]
        if ooms:
            ax.plot(
                ooms,
                [y] * len(ooms),
                "X",
                color=colour,
                ms=11,
                mec=OOM_COLOUR,
                mew=1.2,
                transform=marks,
                clip_on=False,
            )
        expected_oom = [
            b.batch_size
            for b in (baseline.cells if baseline is not None else ())
            if (b.backend, b.dtype) == row and b.outcome == EXPECT_OOM and b.batch_size in sizes
        ]
        if expected_oom:
            ax.plot(
                expected_oom,
                [y] * len(expected_oom),
                "o",
                mfc="none",
                color=colour,
                ms=14,
                mew=1.5,
                transform=marks,
                clip_on=False,
            )
    band = 0.03 + 0.05 * len(rows)
    data_top = top / GIB * 1.05
    ax.set_ylim(0, data_top / (1 - band))
    ax.axhspan(data_top, data_top / (1 - band), color="grey", alpha=0.08, lw=0)
    ax.annotate(
        "out of memory",
        (0.005, 1 - band / 2),
        xycoords="axes fraction",
        va="center",
        fontsize=8,
        color=OOM_COLOUR,
    )
    # No memory figure on the band's axis: its marks are outcomes, not amounts.
    ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= data_top])
    extra = []
    if drew_baseline:
        extra.append(
            Line2D([], [], color="grey", ls="--", marker="o", mfc="none", label="baseline")
        )
    extra += [
        Line2D(
            [], [], color="grey", ls="", marker="X", ms=10, mec=OOM_COLOUR, label="OOM (measured)"
        ),
        Line2D([], [], color="grey", ls="", marker="o", mfc="none", ms=11, label="OOM (baseline)"),
    ]
    if scale.capacity_bytes is not None:
        capacity = scale.capacity_bytes / GIB
        ax.axhline(capacity, color="black", lw=1.2, ls=":")
        ax.annotate(
            f"capacity of one {scale.gpu_name}: {capacity:.0f} GiB",
            (0.01, capacity),
            xycoords=("axes fraction", "data"),
            va="bottom",
            fontsize=8,
        )
        if per_device:
            extra.append(
                Line2D([], [], color="grey", lw=6, alpha=0.3, label="emptiest–fullest GPU")
            )
            ax.set_ylabel("peak memory of the fullest GPU (GiB)")
        else:
            ax.set_ylabel(f"peak memory per GPU (GiB; the total ÷ {scale.gpus})")
    else:
        ax.set_ylabel("peak memory of the process (GiB; no GPU)")
    batch_axis(ax, sizes)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"{run.model.name} on {run.topology}: peak memory per GPU by batch size")
    style_legend(ax, extra)
    save_figure(fig, path)
    return path


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


def plot_load_times(run: RunResult, baseline: Baseline | None, path: Path) -> Path:
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
            ax.annotate(
                f"{m:.0f} s" if m >= 10 else f"{m:.2g} s",
                (m, y + 0.2),
                va="center",
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=8,
            )
        else:
            ax.annotate(
                "not measured",
                (0, y + 0.2),
                va="center",
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=8,
                color="grey",
            )
        if e is not None:
            ax.annotate(
                f"{e:.0f} s",
                (e, y - 0.2),
                va="center",
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=8,
                color="grey",
            )
    ax.set_yticks(list(ys), [label for label, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("model load time (s, lower is better)")
    ax.margins(x=0.15)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{run.model.name} on {run.topology}: load time")
    ax.legend(loc="upper right", fontsize=8)
    save_figure(fig, path)
    return path


def percent_range(nights: Sequence[Night], cells: Sequence[CellResult]) -> tuple[float, float]:
    """A y range shared by every trend panel: at least ±10 %, wider where the data go."""
    low, high = -10.0, 10.0
    for cell in cells:
        values = [v for _, v in series(nights, cell.id, METRIC_MS)]
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
    """ms/token per cell over the nights; a red line where a persistent change started."""
    cells = sorted(
        {c.id: c for n in nights for c in n.run.cells}.values(),
        key=lambda c: (c.backend, c.dtype, c.batch_size),
    )
    cells = [c for c in cells if series(nights, c.id, METRIC_MS)]
    columns = 4 if len(cells) > 4 else max(1, len(cells))
    lines = max(1, math.ceil(len(cells) / columns))
    # A fixed grid: constrained layout costs seconds per panel with a month of cells.
    fig = new_figure(3.2 * columns, 2.3 * lines + 0.7, layout=None)
    fig.set_dpi(90)
    top = 1 - 0.6 / (2.3 * lines + 0.7)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.04, top=top, hspace=0.45, wspace=0.25)
    axes = fig.subplots(lines, columns, squeeze=False)
    for ax in axes.flat[len(cells) :]:
        ax.set_visible(False)
    step = max(1, len(nights) // 6)
    ticks = list(range(0, len(nights), step))
    low, high = percent_range(nights, cells)
    for ax, cell in zip(axes.flat, cells, strict=False):
        points = series(nights, cell.id, METRIC_MS)
        # Relative to the cell's median, on one scale for all cells: ±3 % of noise must look
        # small next to a 15 % step, which autoscaled axes would both blow up to full height.
        centre = statistics.median(v for _, v in points)
        percent = [(v / centre - 1) * 100 for _, v in points]
        ax.axhspan(-tolerance * 100, tolerance * 100, color="grey", alpha=0.12, lw=0)
        ax.plot([i for i, _ in points], percent, "-o", ms=3, color=COLOURS[0])
        for change in changes:
            if change.cell == cell.id and change.metric in (METRIC_MS, "outcome"):
                mark_change(ax, change)
        ax.set_title(f"{cell.id} (median {centre:.3g} ms)", fontsize=8)
        ax.set_xticks(ticks, [nights[i].label[5:10] for i in ticks], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlim(-0.5, len(nights) - 0.5)
        ax.set_ylim(low, high)
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("% vs median", fontsize=8)
    fig.suptitle(
        f"ms per token over {len(nights)} nights ({nights[0].label} … {nights[-1].label}); "
        f"grey band: ±{tolerance * 100:g} %; dashed red: a persistent change started",
        fontsize=10,
    )
    save_figure(fig, path)
    return path


# ---- tables -------------------------------------------------------------------------------------


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cls(text: str) -> str:
        if "REGRESSED" in text or "UNEXPECTED" in text or text in ("ERROR", "TIMEOUT"):
            return ' class="bad"'
        if "improved" in text:
            return ' class="good"'
        return ""

    head = "".join(f"<th>{html.escape(clean(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{cls(c)}>{html.escape(clean(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def change_rows(changes: Sequence[Change]) -> list[list[str]]:
    return [
        [c.night_label, c.cell, c.metric, describe_change(c), "worse" if c.worse else "better"]
        for c in changes
    ]


CHANGE_HEADER = ("Night", "Cell", "Metric", "Change", "Kind")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.bad { background: #fde2e2; font-weight: bold; }
td.good { background: #e3f5e3; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.verdict { font-size: 1.2em; font-weight: bold; }
.failed { color: #b00020; } .passed { color: #1b7f2a; }
"""


def save_figure(fig: Any, path: Path) -> None:
    """Render to memory, then write atomically: never into a file or link planted at ``path``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    write_bytes_atomic(path, buffer.getvalue())


def embedded(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'


def write_pages(
    out: Path,
    run: RunResult,
    comparison: Comparison,
    plots: dict[str, Path],
    nights: Sequence[Night],
    changes: Sequence[Change],
    notes: dict[str, str] | None = None,
) -> tuple[Path, Path]:
    notes = notes or {}
    title = f"bloomperf: {run.model.name} on {run.topology}"
    when = run.started_at or "unknown time"
    header, body = table_rows(comparison)
    environment = environment_rows(run.environment)
    verdict = "FAILED" if comparison.failed else "passed"
    baseline = shown_baseline(comparison.baseline)
    summary = comparison.summary.removesuffix("; FAILED")  # the verdict says it first

    md = [
        f"# {title}",
        "",
        f"Run started {when}; {'complete' if run.complete else 'INCOMPLETE'}.",
        "",
        f"**{verdict}**: {summary} (baseline: {baseline})",
        "",
        plots_note(run.environment),
        "",
    ]
    md += ["## Verdicts", "", *markdown_table(header, body), ""]
    failures = [clean(f) for f in comparison.failures()] + flag_lines(run)
    md += [f"- {f}" for f in failures] + ([""] if failures else [])
    for key, heading in (*PLOT_HEADINGS, *LATENCY_HEADINGS):
        shown = f"![{heading}]({plots[key].name})" if key in plots else notes[key]
        md += [f"## {heading}", "", shown, ""]
    if "trend" in plots:
        md += ["## Trend over the nights", "", f"![trend]({plots['trend'].name})", ""]
        md += [*render_changes(changes, nights, "markdown").splitlines(), ""]
    md += ["## Environment", "", *markdown_table(["What", "Value"], environment), ""]

    doc = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Run started {html.escape(when)}; {'complete' if run.complete else 'INCOMPLETE'}.</p>",
        f"<p class='verdict {'failed' if comparison.failed else 'passed'}'>{verdict}: "
        f"{html.escape(summary)}<br><small>baseline: "
        f"{html.escape(baseline)}</small></p>",
        "<h2>Verdicts</h2>",
        html_table(header, body),
    ]
    if failures:
        doc.append("<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in failures) + "</ul>")
    for key, heading in (*PLOT_HEADINGS, *LATENCY_HEADINGS):
        shown = embedded(plots[key]) if key in plots else f"<p>{html.escape(notes[key])}</p>"
        doc += [f"<h2>{heading}</h2>", shown]
    if "trend" in plots:
        doc += ["<h2>Trend over the nights</h2>", embedded(plots["trend"])]
        if changes:
            doc.append(html_table(CHANGE_HEADER, change_rows(changes)))
        else:
            doc.append(f"<p>No persistent change in any cell over {len(nights)} nights.</p>")
    doc += ["<h2>Environment</h2>", html_table(["What", "Value"], environment), "</body></html>"]

    html_path = out / "index.html"
    md_path = out / "report.md"
    write_text_atomic(html_path, "\n".join(doc) + "\n")
    write_text_atomic(md_path, "\n".join(md) + "\n")
    return html_path, md_path


# ---- the command --------------------------------------------------------------------------------


def write_report(
    run: RunResult,
    baseline: Baseline | None,
    out: Path,
    history: Path | None = None,
    **settings: Any,
) -> Report:
    """Render the report of ``run`` (against ``baseline``) into the folder ``out``."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BloomperfError(f"--out {out}: cannot create: {exc.strerror or exc}") from None
    if not run.cells:
        raise BloomperfError("report: the results hold no cells")
    comparison = judge(run, baseline, no_baseline="no baseline for this topology and model")
    heatmap = out / "ratio_heatmap.png"
    save_figure(ratio_heatmap(comparison), heatmap)
    plots = {
        "heatmap": heatmap,
        "ms": plot_ms_per_token(
            run,
            baseline,
            out / "ms_per_token.png",
            frozenset(
                c.id
                for c in comparison.cells
                for m in c.metrics
                if m.metric == "ms_per_token" and m.status == REGRESSED
            ),
        ),
        "memory": plot_memory(run, baseline, out / "memory.png"),
        "load": plot_load_times(run, baseline, out / "load_time.png"),
    }
    latency = write_latency_plots(run, baseline, out)
    plots.update(latency.paths)
    nights: list[Night] = []
    changes: list[Change] = []
    if history is not None:
        nights = load_history(history)
        if not nights:
            raise BloomperfError(f"--history {history}: holds no nights yet")
        changes = detect_changes(nights, **settings)
        tolerance = settings.get("tolerance", DEFAULT_TOLERANCE)
        plots["trend"] = plot_trend(nights, changes, out / "trend.png", tolerance)
    html_path, md_path = write_pages(out, run, comparison, plots, nights, changes, latency.notes)
    return Report(html_path, md_path, tuple(plots.values()), tuple(changes))


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="HTML + markdown report with plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "results",
        nargs="+",
        metavar="RESULT",
        help="bloomperf results or pytest-benchmark JSON (merged into one run)",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write the report into")
    parser.add_argument(
        "--baseline",
        metavar="FILE|TOPOLOGY",
        help="a baseline file or topology id (default: the run's own topology)",
    )
    parser.add_argument("--baselines", type=Path, help="baselines folder (default: ./baselines)")
    parser.add_argument(
        "--history",
        type=Path,
        metavar="DIR",
        help="history folder (one results file per night) for the trend plot",
    )
    add_detection_options(parser)
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    settings = detection_settings(args)
    run = read_many(list(args.results))
    if args.baseline is not None:
        baseline: Baseline | None = resolve_baseline(args.baseline, run.model.name, args.baselines)
    else:
        baseline = find_baseline(run.topology, run.model.name, args.baselines)
    inputs = [Path(r) for r in args.results] + ([Path(baseline.path)] if baseline else [])
    outputs = [args.out / name for name in REPORT_FILES]
    refuse_overwriting_inputs(outputs, inputs, "--out")
    report = write_report(run, baseline, args.out, args.history, **settings)
    print(f"bloomperf: report written to {report.html} and {report.markdown}")
    return 0
