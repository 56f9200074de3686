"""The report's serving plot: each sweep's latency–throughput curve against its baseline's.

For every cell ``bloomperf serve`` wrote (``details["serving"]``): the completed requests/s of
each rate that ran against that rate's p99 TTFT (left) and p99 inter-token latency (right), log
y, in the offered rates' order (past saturation the curve bends back: more offered, less done);
the baseline's curve dashed with hollow markers (``baseline accept`` keeps it); each effective
throughput a vertical line; the SLA's TTFT limit dotted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bloomperf.backends import row_label
from bloomperf.render.report.figure import COLOURS, new_figure, save_figure
from bloomperf.store.baseline import Baseline, expected_cell
from bloomperf.store.results import RunResult
from bloomperf.store.serving import RateSummary, read_sweep

SERVING_FILE = "serving_curve.png"
Curve = list[tuple[float, float, float]]  # (completed req/s, TTFT p99 ms, ITL p99 ms)


def curve_of(rates: list[RateSummary]) -> Curve:
    # A rate with no p99 TTFT (a file edited by hand) has no point to draw.
    ran = [
        r for r in sorted(rates, key=lambda r: r.rate) if r.outcome == "ok" and "p99" in r.ttft_ms
    ]
    return [(r.request_throughput, r.ttft_ms["p99"], r.itl_ms.get("p99", math.nan)) for r in ran]


def plot_serving_curves(run: RunResult, baseline: Baseline | None, path: Path) -> dict[str, Curve]:
    """Draw every sweep of ``run`` (and its baseline's) into ``path``; the curves drawn, by
    legend label (none drawn: nothing written)."""
    fig, drawn = serving_figure(run, baseline)
    if drawn:
        save_figure(fig, path)
    return drawn


def serving_figure(run: RunResult, baseline: Baseline | None) -> tuple[Any, dict[str, Curve]]:
    """The figure of every sweep of ``run`` and its baseline's, and the curves drawn in it."""
    fig = new_figure(width=11.0, height=4.6)
    axes = fig.subplots(1, 2)
    drawn: dict[str, Curve] = {}
    sweeps = [c for c in run.cells if read_sweep(c.details) is not None]
    for i, cell in enumerate(sweeps):
        colour = COLOURS[i % len(COLOURS)]
        label = row_label(cell.backend, cell.dtype)
        expected = expected_cell(baseline, cell) if baseline is not None else None
        sides = [(label, cell.details, False)]
        if expected is not None:
            sides.append((f"{label}, baseline", expected.details, True))
        for name, details, dashed in sides:
            sweep = read_sweep(details)
            if sweep is None or not curve_of(sweep[1]):
                continue
            sla, rates, effective = sweep
            drawn[name] = curve_of(rates)
            shown = "∞" if effective == math.inf else f"{effective or 0:g}"
            legend = f"{name}: effective {shown} req/s"
            draw_curve(axes, drawn[name], effective, colour, legend, dashed)
            axes[0].axhline(sla.ttft_s * 1000, color="grey", linestyle=":", linewidth=1)
    if not drawn:
        return fig, {}
    for ax, what in zip(axes, ("TTFT p99 (ms)", "inter-token latency p99 (ms)"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel("completed requests/s")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("dotted: the SLA's TTFT limit", fontsize=9)
    axes[1].set_title("vertical: effective throughput (offered rate)", fontsize=9)
    axes[1].legend(fontsize=8, loc="best")
    return fig, drawn


def draw_curve(
    axes: Any, points: Curve, effective: float | None, colour: str, name: str, dashed: bool
) -> None:
    style = "--" if dashed else "-"
    face = "none" if dashed else colour
    xs = [p[0] for p in points]
    for ax, column in zip(axes, (1, 2), strict=True):
        ys = [p[column] for p in points]
        ax.plot(xs, ys, style, marker="o", color=colour, markerfacecolor=face, label=name)
        if effective is not None and 0 < effective < math.inf:
            ax.axvline(effective, color=colour, linestyle=style, alpha=0.5, linewidth=1)
