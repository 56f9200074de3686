"""The report of one run (`bloomperf report`): a page to look at rather than a table to read.

Writes into DIR: ``index.html`` (self-contained: the plots are embedded, so it can be mailed or
uploaded as one artifact file), ``report.md`` (the same content for a pull request or a job
summary, next to the PNG files it links) and the PNGs themselves, replacing the folder whole
(``bloomperf.core.swapdir``; one holding other files is refused):

* ``ratio_heatmap.png``: measured ÷ baseline per cell and judged metric, coloured by verdict.
* ``ms_per_token.png``, ``memory.png``, ``load_time.png``, where the run has a cell of the blog's
  workload (a serving-only run has none of their figures):
* ``ms_per_token.png``: ms/token against batch size, one colour per backend and dtype, log axes
  whose ticks are the batch sizes; the baseline dashed beside the measurement; OOM cells crossed
  at the top edge (measured) or ringed (expected by the baseline).
* ``memory.png``: peak memory per GPU against batch size (the fullest GPU, with the band down to
  the emptiest: pipeline parallelism leaves GPUs unevenly filled), one GPU's capacity as a line,
  the baseline dashed; OOMs in a band above, measured crossed, the baseline's ringed.
* ``load_time.png``: load time per backend and dtype as bars, the baseline's beside them.
* ``ttft.png``, ``tpot.png``, ``tpot_percentiles.png``, ``energy_per_token.png``: latency and
  energy, where the cells have them.
* ``serving_curve.png``, where the run holds a ``bloomperf serve`` sweep: its latency–throughput
  curve (p99 TTFT and ITL against completed requests/s) against the baseline's.
* ``trend.png`` (with ``--history``): ms/token of every cell, and a serving sweep's effective
  throughput and p99s, over the nights, the nights where a persistent change started marked
  (``bloomperf.analysis.changes`` finds them).

The page opens with the verdicts and what changed in the software since the previous night (or
the baseline; ``bloomperf.render.report.changes``). The verdicts come from
``bloomperf.analysis.compare`` and the baseline from ``bloomperf.store.baseline``: the report
draws, it does not judge.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bloomperf.analysis.changes import DEFAULT_TOLERANCE, Change, detect_changes
from bloomperf.analysis.compare import judge
from bloomperf.analysis.stats import REGRESSED
from bloomperf.analysis.verdicts import Comparison
from bloomperf.core.errors import BloomperfError
from bloomperf.core.swapdir import fresh_folder
from bloomperf.render.report.changes import WhatChanged, what_changed_since
from bloomperf.render.report.curve import SERVING_FILE, plot_serving_curves
from bloomperf.render.report.figure import save_figure
from bloomperf.render.report.heatmap import ratio_heatmap
from bloomperf.render.report.latency import LATENCY_FILES, LatencyPlots, write_latency_plots
from bloomperf.render.report.memory import memory_figure
from bloomperf.render.report.page import write_pages
from bloomperf.render.report.timing import load_time_figure, ms_per_token_figure
from bloomperf.render.report.trend import plot_trend
from bloomperf.store.baseline import Baseline
from bloomperf.store.history.nights import Night, load_history
from bloomperf.store.results import RunResult
from bloomperf.store.serving import read_sweep

# Every file a report writes into its --out-dir folder.
REPORT_FILES = (
    "index.html",
    "report.md",
    "ratio_heatmap.png",
    "ms_per_token.png",
    "memory.png",
    "load_time.png",
    "trend.png",
    *LATENCY_FILES,
    SERVING_FILE,
)


@dataclass(frozen=True)
class Report:
    """What ``write_report`` produced: the files, the history changes it marked, and what
    changed in the software since the run it compared with."""

    html: Path
    markdown: Path
    plots: tuple[Path, ...]
    changes: tuple[Change, ...] = ()
    what_changed: tuple[WhatChanged, ...] = ()  # since the previous night, or the baseline


def write_report(
    run: RunResult,
    baseline: Baseline | None,
    out: Path,
    history: Path | None = None,
    **settings: Any,
) -> Report:
    """Render the report of ``run`` (against ``baseline``) into the folder ``out``."""
    if not run.cells:
        raise BloomperfError("report: the results hold no cells")
    with fresh_folder(out, "--out-dir", is_report) as staging:
        report = render_report(run, baseline, staging, history, **settings)

    def moved(path: Path) -> Path:
        return out / path.relative_to(staging)

    return replace(
        report,
        html=moved(report.html),
        markdown=moved(report.markdown),
        plots=tuple(moved(p) for p in report.plots),
    )


def is_report(entry: Path) -> bool:
    """Whether ``entry`` of an output folder is what a report writes (an older one's file, or
    its staging); a folder named like a plot is not."""
    regular = entry.is_file() and not entry.is_symlink()
    return (regular and entry.name in REPORT_FILES) or entry.name.startswith(".report-")


def render_report(
    run: RunResult,
    baseline: Baseline | None,
    out: Path,
    history: Path | None = None,
    **settings: Any,
) -> Report:
    """Every file of the report, written into ``out``."""
    comparison = judge(run, baseline, no_baseline="no baseline for this topology and model")
    plots = {"heatmap": save_figure(ratio_heatmap(comparison), out / "ratio_heatmap.png")}
    # A serving-only run has none of the blog's workload's figures: no plot of them, nor a
    # note per plot saying so.
    latency = LatencyPlots({}, {}, {})
    if any(read_sweep(c.details) is None for c in run.cells):
        plots |= offline_plots(run, baseline, comparison, out)
        latency = write_latency_plots(run, baseline, out)
    plots.update(latency.paths)
    if plot_serving_curves(run, baseline, out / SERVING_FILE):
        plots["serving"] = out / SERVING_FILE
    nights: list[Night] = []
    changes: list[Change] = []
    if history is not None:
        nights = load_history(history)
        if not nights:
            raise BloomperfError(f"--history {history}: holds no nights yet")
        changes = detect_changes(nights, **settings)
        tolerance = settings.get("tolerance", DEFAULT_TOLERANCE)
        plots["trend"] = plot_trend(nights, changes, out / "trend.png", tolerance)
    changed = what_changed_since(run, nights, baseline)
    html_path, md_path = write_pages(
        out, run, comparison, plots, nights, changes, latency.notes, changed
    )
    return Report(html_path, md_path, tuple(plots.values()), tuple(changes), tuple(changed))


def offline_plots(
    run: RunResult, baseline: Baseline | None, comparison: Comparison, out: Path
) -> dict[str, Path]:
    """ms/token, memory and load time against batch size: the blog's workload's plots, drawn
    where the run has a cell of it (a serving sweep has none of these figures)."""
    regressed = frozenset(
        c.id
        for c in comparison.cells
        for m in c.metrics
        if m.metric == "ms_per_token" and m.status == REGRESSED
    )
    return {
        "ms": save_figure(ms_per_token_figure(run, baseline, regressed), out / "ms_per_token.png"),
        "memory": save_figure(memory_figure(run, baseline), out / "memory.png"),
        "load": save_figure(load_time_figure(run, baseline), out / "load_time.png"),
    }
