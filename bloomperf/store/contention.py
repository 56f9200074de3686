"""What else used the machine during one measured cycle (``bloomperf.measure.contention`` reads
it), as stored with each cell's timed cycles and each ``ab`` sample.

Pure data: the rule that sets a contended pair aside is ``bloomperf.analysis.contention``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import get_float, get_int


@dataclass(frozen=True)
class CycleLoad:
    """One cycle's contention, read from ``/proc`` and NVML just outside its timed region.

    * ``wall_s``: the wall time between the two readings (the cycle and the reads around it);
    * ``wait_s``: how long the measured worker's threads were runnable but waiting for a CPU
      (``/proc/PID/task/TID/schedstat``, nanosecond counters): time the cycle lost to others;
    * ``other_cpu_s``: CPU time every process outside this bloomperf (controller and worker
      trees) used on the whole machine, ``/proc/stat``'s busy time less ours; in clock ticks
      (10 ms), so only a figure to read on cycles much longer than a tick; None without /proc;
    * ``width``: the CPUs the worker keeps busy (ranks × threads), the scale of ``wait_s``;
    * ``gpu_others``: compute processes on the group's GPUs that are not ours (NVML), None on
      CPU or without NVML;
    * ``cpus``: set where the measured processes also wait for each other (a served sweep: the
      server's threads and its client share CPUs), the CPUs they may use: there ``wait_s``
      counts waiting for our own threads too, and the others' share of these CPUs is what the
      others took (``taken_share``).
    """

    wall_s: float
    wait_s: float | None = None
    other_cpu_s: float | None = None
    width: int = 1
    gpu_others: int | None = None
    cpus: int | None = None

    @property
    def wait_share(self) -> float | None:
        """The share of the cycle the worker spent waiting for a CPU, per CPU it keeps busy,
        below 1 (a cycle cannot wait longer than it lasted)."""
        if self.wait_s is None or self.wall_s <= 0.0:
            return None
        return min(max(self.wait_s / (self.wall_s * max(1, self.width)), 0.0), 0.99)

    @property
    def taken_share(self) -> float | None:
        """The share of the cycle other processes took from the measured worker, below 1:
        its wait share, or with ``cpus`` set, the others' share of those CPUs."""
        if self.cpus is None:
            return self.wait_share
        cores = self.other_cores
        return None if cores is None else min(cores / max(1, self.cpus), 0.99)

    @property
    def other_cores(self) -> float | None:
        """Other processes' CPU use over the cycle, in cores (1.0: one core kept busy)."""
        if self.other_cpu_s is None or self.wall_s <= 0.0:
            return None
        return max(self.other_cpu_s, 0.0) / self.wall_s


def load_to_dict(load: CycleLoad | None) -> dict[str, Any] | None:
    if load is None:
        return None
    return {
        "wall_s": round(load.wall_s, 6),
        "wait_s": None if load.wait_s is None else round(load.wait_s, 6),
        "other_cpu_s": None if load.other_cpu_s is None else round(load.other_cpu_s, 4),
        "width": load.width,
        "gpu_others": load.gpu_others,
        **({"cpus": load.cpus} if load.cpus is not None else {}),
    }


def load_from_dict(data: Any, where: str) -> CycleLoad | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: a cycle's load must be an object")
    return CycleLoad(
        wall_s=get_float(data, "wall_s", where),
        wait_s=get_float(data, "wait_s", where, optional=True),
        other_cpu_s=get_float(data, "other_cpu_s", where, optional=True),
        width=get_int(data, "width", where, optional=True, minimum=1) or 1,
        gpu_others=get_int(data, "gpu_others", where, optional=True),
        cpus=get_int(data, "cpus", where, optional=True, minimum=1),
    )
