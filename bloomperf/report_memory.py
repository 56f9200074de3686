"""The memory plot's figures: peak memory per GPU, measured and expected by the baseline.

A GPU runs out of memory on its own, so the plot compares one GPU against one GPU's capacity,
never a sum over GPUs. NVML readings carry each device's peak (``per_device_bytes``): the fullest
GPU is the one that OOMs first, the emptiest shows how unevenly the model is spread. Results and
baselines that keep only the total (``peak_bytes``, summed over devices) are shown spread evenly
over the topology's GPUs, and the plot says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bloomperf.baseline import Baseline
from bloomperf.errors import BloomperfError
from bloomperf.hardware import parse_topology_id
from bloomperf.results import CellResult


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
