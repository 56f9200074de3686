"""Each rank's own memory peak, measured by the rank and gathered by rank 0.

The controller's sampler sees only its own node: NVML on its GPUs, or the VmHWM of its process
tree. A rank that DeepSpeed's multinode runners start (pdsh over ssh, mpirun, srun) hangs under
sshd or slurmd on its node, never under the controller, so no controller-side sampler sees it,
not even on the controller's own host. So every rank measures itself at the end of each phase
and rank 0 gathers the figures with one collective, outside any timed region.

On CPU a rank's figure is its VmHWM (reset at the start of each cell, as the controller's sampler
resets its tree); on GPU it is torch's reserved peak on the rank's devices, which leaves out the
CUDA context and NCCL's buffers (NVML would see them, but only on its own node).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.measure.rss_sampler import read_peak_rss, reset_peak_rss
from bloomperf.store.results import MemoryReading

RANK_SOURCE = "ranks"


@dataclass(frozen=True)
class RankPeak:
    rank: int
    node: str  # the node as the launcher named it (rankenv.node_name)
    peak_bytes: int | None
    measure: str  # "vmhwm" (CPU) or "torch-reserved" (GPU)


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
        return RankPeak(rank, node, reserved, "torch-reserved")
    try:
        rss: int | None = read_peak_rss(os.getpid())
    except OSError:
        rss = None
    return RankPeak(rank, node, rss, "vmhwm")


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
