"""Reading what else used the machine during a cycle: ``/proc`` for the CPUs, NVML for the GPUs.

The runner takes a ``Snapshot`` just before it asks the worker for a cycle and another just after
the reply, so the reads cost the timed region nothing. Three readings, each chosen for being
cheap (one small file per process or thread, never a walk over every ``/proc/PID``) and for
being exact where it matters:

* the measured worker's **run-queue wait**: the second field of each of its threads'
  ``/proc/PID/task/TID/schedstat`` (nanoseconds the thread was runnable but another task held
  its CPU). It is the time the cycle lost to the others, exact at any cycle length;
* the **others' CPU time**: ``/proc/stat``'s busy time of the whole machine (everything but idle
  and iowait; steal counts: another guest took the CPU) less our own processes' ``utime +
  stime`` (``/proc/PID/stat``). Both count in clock ticks (10 ms), so on a 10 ms cycle this is a
  figure to read, not one to judge by;
* the **GPU neighbours**: NVML's compute processes on the group's GPUs that are not ours.

"Ours" is this controller and the process trees of the worker groups it runs (both arms in
``ab``), listed again at most every ``TREE_REFRESH_S``: ranks start once, at load.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.core.progress import emit
from bloomperf.measure.sampler import process_tree_pids
from bloomperf.store.contention import CycleLoad

TREE_REFRESH_S = 5.0
PROC = "/proc"


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic()
    wait_ns: int | None  # the measured tree's threads' run-queue wait, summed
    busy_ticks: int | None  # the machine's busy time in /proc/stat
    own_ticks: int | None  # utime + stime of every process of ours
    gpu_others: int | None


class LoadProbe:
    """Snapshots of one worker group's contention.

    ``measured`` gives the root pids whose trees are the measured worker; ``also_ours`` the
    roots of the other trees that are bloomperf's (the other arm's worker), whose CPU time is not
    the others'; this controller process is ours too (itself only: a test's or a plugin
    session's other children are others). ``gpus`` are NVML indices (none on CPU); ``cpus``
    the CPUs of a worker whose processes share them (``CycleLoad.cpus``), else None.
    """

    def __init__(
        self,
        measured: Callable[[], Iterable[int]],
        also_ours: Callable[[], Iterable[int]] = tuple,
        width: int = 1,
        gpus: Sequence[int] = (),
        nvml: Any = None,
        cpus: int | None = None,
    ) -> None:
        self.measured = measured
        self.also_ours = also_ours
        self.width = max(1, width)
        self.cpus = cpus
        self._gpus = list(gpus)
        self._nvml = nvml
        self._handles: list[Any] | None = None if self._gpus else []
        self.gpu_note = "cpu: no GPU to share" if not self._gpus else ""
        self._trees: dict[int, list[int]] = {}
        self._listed_at = -TREE_REFRESH_S

    def snapshot(self, extra: Sequence[int] = ()) -> Snapshot:
        """The readings now; ``extra`` pids are measured too, without listing their trees (a
        process the caller started and knows has no children)."""
        measured, ours = self._pids()
        measured = sorted({*measured, *extra})
        ours = [pid for pid in ours if pid not in measured]
        return Snapshot(
            at=time.monotonic(),
            wait_ns=wait_ns(measured),
            busy_ticks=busy_ticks(),
            own_ticks=cpu_ticks(measured + ours),
            gpu_others=self._gpu_others(set(measured + ours)),
        )

    def between(self, before: Snapshot, after: Snapshot) -> CycleLoad:
        wall = max(after.at - before.at, 0.0)
        wait = None
        if before.wait_ns is not None and after.wait_ns is not None:
            wait = max(after.wait_ns - before.wait_ns, 0) / 1e9
        other = None
        counts = (before.busy_ticks, after.busy_ticks, before.own_ticks, after.own_ticks)
        if None not in counts:
            busy0, busy1, own0, own1 = (int(count or 0) for count in counts)
            other = max((busy1 - busy0) - (own1 - own0), 0) / ticks_per_second()
        gpu = [n for n in (before.gpu_others, after.gpu_others) if n is not None]
        return CycleLoad(wall, wait, other, self.width, max(gpu) if gpu else None, self.cpus)

    def _pids(self) -> tuple[list[int], list[int]]:
        """The measured tree's pids and the rest of ours, the trees listed again now and then
        (listing one costs a read of every process's stat; reading a known pid does not)."""
        mine, others = [*self.measured()], [*self.also_ours()]
        now = time.monotonic()
        if now - self._listed_at >= TREE_REFRESH_S or set(self._trees) != {*mine, *others}:
            self._trees = {root: process_tree_pids(root) for root in {*mine, *others}}
            self._listed_at = now
        measured = sorted({pid for root in mine for pid in self._trees.get(root, [])})
        ours = {pid for root in others for pid in self._trees.get(root, [])} | {os.getpid()}
        return measured, sorted(ours - set(measured))

    def _gpu_others(self, ours: set[int]) -> int | None:
        handles = self._gpu_handles()
        if not handles:
            return None
        try:
            listed = [gpu_pids(self._nvml, handle) for handle in handles]
        except Exception as exc:  # an NVMLError: say why and stop asking
            self._unchecked(f"nvml: {exc}")
            self._handles = []
            return None
        return gpu_neighbours(listed, ours)

    def _gpu_handles(self) -> list[Any]:
        if self._handles is None:
            self._handles = []
            try:
                if self._nvml is None:
                    from bloomperf.catalog.topology import load_nvml

                    self._nvml = load_nvml()
                self._nvml.nvmlInit()
                self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in self._gpus]
            except ImportError:
                self._unchecked("nvml: nvidia-ml-py is not installed")
            except Exception as exc:
                self._unchecked(f"nvml: {exc}")
        return self._handles

    def _unchecked(self, why: str) -> None:
        """Keep why the GPUs' other processes cannot be counted, and say it once: the user
        must not read "no pair set aside" as "no neighbour on the GPU" when none was looked for."""
        if not self.gpu_note:
            gpus = ", ".join(str(index) for index in self._gpus)
            emit(f"GPU {gpus}: other processes on it are not counted as contention ({why})")
        self.gpu_note = why


def gpu_pids(nvml: Any, handle: Any) -> set[int]:
    return {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}


def gpu_neighbours(listed: list[set[int]], ours: set[int]) -> int:
    """Compute processes on the group's GPUs that are not ours. Inside a PID namespace NVML
    lists host pids that never match ours: when none listed on any of the GPUs is ours, one
    process on each GPU that lists any is taken to be ours (a rank holds one GPU; Accelerate's
    single process holds several), the rest are neighbours."""
    if any(pids & ours for pids in listed):
        return sum(len(pids - ours) for pids in listed)
    return sum(max(len(pids) - 1, 0) for pids in listed)


def wait_ns(pids: Iterable[int]) -> int | None:
    """Nanoseconds the threads of ``pids`` spent runnable, waiting for a CPU; None when the
    kernel keeps no schedstat (CONFIG_SCHED_INFO off) or no pid could be read."""
    total, read = 0, False
    for pid in pids:
        try:
            threads = os.listdir(f"{PROC}/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                with open(f"{PROC}/{pid}/task/{tid}/schedstat") as file:
                    total += int(file.read().split()[1])
                read = True
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended between the listing and the read
    return total if read else None


def busy_ticks() -> int | None:
    """The machine's busy clock ticks since boot: the ``cpu`` line's user, nice, system, irq,
    softirq and steal, not idle and iowait (guest time is already inside user and nice, so it is
    not added again); None without a readable ``/proc/stat``."""
    try:
        with open(f"{PROC}/stat") as file:
            fields = file.readline().split()
    except OSError:
        return None
    if len(fields) < 6 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, *rest = (int(v) for v in fields[1:9])
    return user + nice + system + sum(rest)


def cpu_ticks(pids: Iterable[int]) -> int | None:
    """``utime + stime`` of ``pids`` (all their threads), in clock ticks; a pid gone counts 0."""
    total, read = 0, False
    for pid in pids:
        try:
            with open(f"{PROC}/{pid}/stat") as file:
                text = file.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = text[text.rfind(")") + 2 :].split()
        try:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
            read = True
        except (IndexError, ValueError):
            continue
    return total if read else None


def ticks_per_second() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100
