"""Each rank's own memory peak, measured by the rank and gathered by rank 0.

The controller's sampler sees only its own node: NVML on its GPUs, or the VmHWM of its process
tree. A rank that DeepSpeed's multinode runners start (pdsh over ssh, mpirun, srun) hangs under
sshd or slurmd on its node, never under the controller, so no controller-side sampler sees it,
not even on the controller's own host. So every rank measures itself at the end of each phase
and rank 0 gathers the figures with one collective, outside any timed region.

On CPU a rank's figure is its VmHWM (reset at the start of each cell, as the controller's sampler
resets its tree). On GPU, where the rank can read NVML's per-process figure for itself
(``nvml-process``), it is torch's reserved peak plus what NVML counts beyond torch's reserved
memory at the phase's end: the CUDA context, NCCL's buffers and DeepSpeed's own cudaMallocs, which
torch never sees. Where NVML does not list the rank (another PID namespace, no NVML), it is
torch's reserved peak alone (``torch-reserved``). Each figure names its source.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.catalog.devices import nvml_text
from bloomperf.measure.rss_sampler import read_peak_rss, reset_peak_rss
from bloomperf.store.results import MemoryReading

RANK_SOURCE = "ranks"


@dataclass(frozen=True)
class RankPeak:
    rank: int
    node: str  # the node as the launcher named it (rankenv.node_name)
    peak_bytes: int | None
    measure: str  # "vmhwm" (CPU), "nvml-process" or "torch-reserved" (GPU)


def reset_own_peak() -> None:
    """Start a phase: VmHWM back to the current RSS (torch's CUDA peaks are reset by the worker)."""
    try:
        reset_peak_rss(os.getpid())
    except OSError:
        pass  # a kernel without clear_refs: the peak then covers the process's whole life


def own_peak(rank: int, node: str, cuda_devices: Sequence[int]) -> RankPeak:
    """This rank's peak since the phase began."""
    import torch

    if cuda_devices and torch.cuda.is_available() and torch.cuda.is_initialized():
        reserved = sum(int(torch.cuda.max_memory_reserved(i)) for i in cuda_devices)
        uuids = [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in cuda_devices]
        try:
            from bloomperf.catalog.topology import load_nvml

            used = nvml_process_bytes(load_nvml(), os.getpid(), uuids)
        except ImportError:
            used = None
        if used is None:
            return RankPeak(rank, node, reserved, "torch-reserved")
        now = sum(int(torch.cuda.memory_reserved(i)) for i in cuda_devices)
        return RankPeak(rank, node, with_outside_torch(reserved, now, used), "nvml-process")
    try:
        rss: int | None = read_peak_rss(os.getpid())
    except OSError:
        rss = None
    return RankPeak(rank, node, rss, "vmhwm")


def with_outside_torch(reserved_peak: int, reserved_now: int, nvml_now: int) -> int:
    """torch's reserved peak plus what NVML counts for the process beyond torch's reserved
    memory now (context, NCCL, DeepSpeed's workspace): allocations outside torch's caching
    allocator stay for the group's life, so they were there at the peak too."""
    return reserved_peak + max(0, nvml_now - reserved_now)


def nvml_process_bytes(nvml: Any, pid: int, uuids: Sequence[str]) -> int | None:
    """NVML's figure for process ``pid`` summed over the GPUs ``uuids``; None where NVML cannot
    say (no NVML, a GPU it does not list, the PID not listed: another PID namespace)."""
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        by_uuid = {nvml_text(nvml.nvmlDeviceGetUUID(h)): h for h in handles}
        total = 0
        for uuid in uuids:
            if uuid not in by_uuid:
                return None
            listed = nvml.nvmlDeviceGetComputeRunningProcesses(by_uuid[uuid])
            used = [p.usedGpuMemory for p in listed if int(p.pid) == pid]
            if not used or any(u is None for u in used):
                return None
            total += sum(int(u) for u in used)
        return total
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def gather_peaks(own: RankPeak, world_size: int) -> list[dict[str, Any]]:
    """Every rank's peak, on every rank (a collective: all ranks of the group must call it)."""
    if world_size == 1:
        return [vars(own)]
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, vars(own))
    return [dict(item) for item in gathered]


def ranks_reading(reported: Sequence[dict[str, Any]]) -> MemoryReading:
    """A phase's memory from the ranks' own reports: the sum over ranks, one figure per rank
    (in rank order) and the sum per node in ``nodes``; unavailable when a rank could not say."""
    peaks = sorted((RankPeak(**item) for item in reported), key=lambda p: p.rank)
    missing = [str(p.rank) for p in peaks if p.peak_bytes is None]
    if not peaks or missing:
        reason = f"ranks {', '.join(missing)} could not read their peak" if missing else "no ranks"
        return MemoryReading(source="unavailable", peak_bytes=None, reason=reason)
    nodes: dict[str, int] = {}
    for peak in peaks:
        nodes[peak.node] = nodes.get(peak.node, 0) + int(peak.peak_bytes or 0)
    measures = sorted({p.measure for p in peaks})
    return MemoryReading(
        source=RANK_SOURCE,
        peak_bytes=sum(nodes.values()),
        per_device_bytes=tuple(int(p.peak_bytes or 0) for p in peaks),
        per_node_bytes=tuple(nodes.items()),
        reason=f"each rank's own peak ({', '.join(measures)}): no sampler on this node sees "
        "ranks that a multinode runner started",
    )
