"""The memory plot: peak memory per GPU, measured and expected by the baseline.

A GPU runs out of memory on its own, so the plot compares one GPU against one GPU's capacity,
never a sum over GPUs. NVML readings carry each device's peak (``per_device_bytes``): the fullest
GPU is the one that OOMs first, the emptiest shows how unevenly the model is spread. Results and
baselines that keep only the total (``peak_bytes``, summed over devices) are shown spread evenly
over the topology's GPUs, and the plot says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.backends import row_label
from bloomperf.catalog.hardware import parse_topology_id
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB, table_layout
from bloomperf.render.report.figure import (
    COLOURS,
    batch_axis,
    draw_row,
    expected_ooms,
    finish_legend,
    new_figure,
    oom_band,
    row_cells,
)
from bloomperf.store.baseline import Baseline
from bloomperf.store.results import CellResult, Outcome, RunResult


@dataclass(frozen=True)
class MemoryScale:
    """What the y axis of the memory plot is."""

    gpus: int  # GPUs a total is spread over; 0 on CPU (process memory, not divided)
    capacity_bytes: int | None  # one GPU's memory
    gpu_name: str = ""


def memory_scale(topology: str, cells: Sequence[CellResult]) -> MemoryScale:
    """Per GPU where the topology has GPUs and the readings are NVML's; the process otherwise."""
    on_gpu = any(
        r is not None and r.source == "nvml"
        for c in cells
        for r in (c.load_memory, c.generate_memory)
    )
    try:
        nodes, per_node, gpu = parse_topology_id(topology)
    except BloomperfError:
        return MemoryScale(0, None)
    if not on_gpu:
        return MemoryScale(0, None)
    return MemoryScale(nodes * per_node, gpu.memory_bytes, gpu.name)


def per_gpu_peak(cell: CellResult, scale: MemoryScale) -> tuple[float, float, bool] | None:
    """(fullest, emptiest GPU's peak in bytes, whether per-device readings gave them)."""
    devices: list[int] = []
    for reading in (cell.load_memory, cell.generate_memory):
        if reading is not None and reading.per_device_bytes:
            new = list(reading.per_device_bytes)
            devices = [max(a, b) for a, b in zip(devices, new, strict=False)] if devices else new
    if devices and scale.gpus:
        return float(max(devices)), float(min(devices)), True
    peak = cell.peak_memory_bytes
    if peak is None:
        return None
    share = peak / scale.gpus if scale.gpus else float(peak)
    return share, share, False


def baseline_per_gpu(
    baseline: Baseline | None, row: tuple[str, str], scale: MemoryScale
) -> list[tuple[int, float]]:
    """(batch size, bytes per GPU) the baseline expects for one backend and dtype."""
    if baseline is None:
        return []
    return [
        (b.batch_size, b.peak_memory_bytes / scale.gpus if scale.gpus else b.peak_memory_bytes)
        for b in sorted(baseline.cells, key=lambda b: b.batch_size)
        if (b.backend, b.dtype) == row and b.peak_memory_bytes is not None
    ]


# ---- the plot -----------------------------------------------------------------------------------


def memory_figure(run: RunResult, baseline: Baseline | None) -> Any:
    """Peak memory per GPU against one GPU's capacity and the baseline; OOMs in a band above."""
    from matplotlib.lines import Line2D

    fig = new_figure()
    ax = fig.add_subplot()
    sizes = sorted({c.batch_size for c in run.cells})
    scale = memory_scale(run.topology, run.cells)
    rows = table_layout(run.cells)[0]
    top = float(scale.capacity_bytes or 0)
    per_device = False
    drawn: set[str] = set()
    for i, row in enumerate(rows):
        cells = row_cells(run.cells, row)
        kept = [(c.batch_size, m) for c in cells if (m := per_gpu_peak(c, scale)) is not None]
        expected = baseline_per_gpu(baseline, row, scale)
        ooms = [c.batch_size for c in cells if c.outcome == Outcome.OOM]
        drawn |= draw_row(
            ax,
            i,
            row_label(*row),
            [(b, m[0] / GIB) for b, m in kept],
            [(b, v / GIB) for b, v in expected],
            ooms,
            expected_ooms(baseline, row, sizes),
        )
        if any(m[2] for _, m in kept):
            per_device = True
            xs = [b for b, _ in kept]
            lows, highs = [m[1] / GIB for _, m in kept], [m[0] / GIB for _, m in kept]
            ax.fill_between(xs, lows, highs, color=COLOURS[i % len(COLOURS)], alpha=0.1)
        top = max([top, *(m[0] for _, m in kept), *(v for _, v in expected)])
        sizes = sorted(set(sizes) | {b for b, _ in expected})
    # From zero: a 5 % rise must not fill the plot (and a run without a figure gets 1 GiB).
    high = top / GIB * 1.05 or 1.0
    if drawn & {"oom", "oom-baseline"}:
        oom_band(ax, 0.0, high, len(rows), log=False)
    else:
        ax.set_ylim(0, high)
    extra = []
    if scale.capacity_bytes is not None:
        capacity_line(ax, scale)
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
    whose = "per GPU" if scale.gpus else "of the process"
    ax.set_title(f"{run.model.name} on {run.topology}: peak memory {whose} by batch size")
    finish_legend(ax, drawn, extra)
    return fig


def capacity_line(ax: Any, scale: MemoryScale) -> None:
    capacity = (scale.capacity_bytes or 0) / GIB
    ax.axhline(capacity, color="black", lw=1.2, ls=":")
    ax.annotate(
        f"capacity of one {scale.gpu_name}: {capacity:.0f} GiB",
        (0.01, capacity),
        xycoords=("axes fraction", "data"),
        va="bottom",
        fontsize=8,
    )
