"""The GPUs' memory sampler: device used memory from NVML, polled from the controller."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

from bloomperf.catalog.devices import (
    VisibleDevice,
    cuda_visible_devices,
    measured_handle,
    resolve_visible,
)
from bloomperf.catalog.topology import load_nvml
from bloomperf.core.errors import BloomperfError
from bloomperf.measure.sampler import (
    PID_REFRESH_S,
    POLL_INTERVAL_S,
    MemorySampler,
    process_tree_pids,
    unavailable_reading,
)
from bloomperf.store.results import MemoryReading

# Samples in which NVML lists new processes but none of ours before the per-process query stops
# (PID namespaces); each looks at the tree again first, so a rank that just started is no miss.
UNMATCHED_SAMPLES = 5


class NvmlSampler(MemorySampler):
    """Device used memory of every visible GPU, polled by a thread every 10 ms.

    ``peak_bytes`` is the peak over time of the sum over devices (what the job held at once);
    ``per_device_bytes`` the peak of each device; ``process_bytes`` the peak of the memory NVML
    attributes to the worker tree's processes (None when NVML lists none of them, e.g. inside a
    container whose process ids differ from the host's).
    """

    def __init__(
        self,
        root_pid: int,
        nvml: Any = None,
        interval_s: float = POLL_INTERVAL_S,
        visible: str | None = None,
        devices: Sequence[VisibleDevice] | None = None,
    ):
        """``devices`` (NVML indices) when given, else the GPUs ``visible`` (CUDA_VISIBLE_DEVICES,
        default the controller's) names."""
        self.root_pid = root_pid
        self.interval_s = interval_s
        self._nvml = nvml
        self._devices = None if devices is None else list(devices)
        self._visible = visible if visible is not None else cuda_visible_devices()
        self._handles: list[Any] = []
        self._started = False
        self._initialised = False
        self._failure = ""  # why NVML gives nothing (more), "" while it works
        self._process_note = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pids: set[int] = set()
        self._pids_at = 0.0
        self._foreign: set[int] | None = None  # PIDs NVML listed before our workers ran
        self._unmatched = 0  # samples that listed new processes, none of them ours
        self._matched = False  # NVML has attributed memory to our tree at least once
        self._reset_peaks()

    def start(self) -> None:
        self._started = True
        try:
            if self._nvml is None:
                self._nvml = load_nvml()
        except ImportError:
            self._failure = "NVML: nvidia-ml-py is not installed"
            return
        try:
            self._nvml.nvmlInit()
            self._initialised = True
            devices = self._devices
            if devices is None:
                devices = resolve_visible(self._nvml, self._visible)
            self._handles = [measured_handle(self._nvml, d.index, d.mig_uuid) for d in devices]
        except self._nvml.NVMLError as exc:
            self._failure = f"NVML: {exc}"
            return
        except BloomperfError as exc:  # integer ids that cannot be mapped on mixed GPUs
            self._failure = f"NVML: {exc}"
            return
        if not self._handles:
            what = (
                "the group has no GPU"
                if self._devices is not None
                else (f"no visible GPU (CUDA_VISIBLE_DEVICES={self._visible!r})")
            )
            self._failure = f"NVML: {what}"
            return
        self._reset_peaks()
        self._thread = threading.Thread(target=self._poll_loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def mark(self) -> MemoryReading:
        if not self._started:
            raise RuntimeError("NvmlSampler.mark() called before start()")
        if self._handles and not self._failure and not self._stop.is_set():
            self._sample_guarded()  # a phase shorter than one interval still gets a sample
        with self._lock:
            reading = self._reading()
            self._reset_peaks()
        if self._handles and not self._failure and not self._stop.is_set():
            # The next phase's first sample, taken now: the level it starts from (start_bytes).
            self._sample_guarded()
        return reading

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._initialised:
            self._initialised = False
            with contextlib.suppress(self._nvml.NVMLError):  # nothing left to release
                self._nvml.nvmlShutdown()

    def _reset_peaks(self) -> None:
        self._samples = 0
        self._peak_total = 0
        self._peak_devices = [0] * len(self._handles)
        self._peak_process: int | None = None
        self._start_total: int | None = None

    def _reading(self) -> MemoryReading:
        notes = [n for n in (self._failure, self._process_note) if n]
        if self._samples == 0:
            return unavailable_reading("; ".join(notes) or "NVML: no sample taken")
        return MemoryReading(
            source="nvml",
            peak_bytes=self._peak_total,
            per_device_bytes=tuple(self._peak_devices),
            process_bytes=self._peak_process,
            reason="; ".join(notes),
            start_bytes=self._start_total,
        )

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.interval_s) and not self._failure:
            self._sample_guarded()

    def _sample_guarded(self) -> None:
        try:
            self._sample()
        except self._nvml.NVMLError as exc:
            # Keep the peaks taken so far; timings do not depend on this thread.
            self._failure = f"NVML failed mid-run: {exc}"

    def _sample(self) -> None:
        used = [int(self._nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self._handles]
        process = self._worker_bytes()
        with self._lock:
            self._samples += 1
            if self._start_total is None:
                self._start_total = sum(used)
            self._peak_total = max(self._peak_total, sum(used))
            self._peak_devices = [max(p, u) for p, u in zip(self._peak_devices, used, strict=True)]
            if process is not None:
                self._peak_process = max(self._peak_process or 0, process)

    def _worker_bytes(self) -> int | None:
        """Memory NVML attributes to the worker tree, summed over devices; None if none listed."""
        if self._process_note:
            return None
        now = time.monotonic()
        if now - self._pids_at > PID_REFRESH_S:
            self._pids = set(process_tree_pids(self.root_pid))
            self._pids_at = now
        try:
            listed = self._listed_processes()
        except self._nvml.NVMLError as exc:
            # Some GPUs (MIG, vGPU) do not list processes: device memory is still measured.
            self._process_note = f"NVML lists no processes: {exc}"
            return None
        total = self._sum_ours(listed)
        if total is None and self._new_foreign(listed):
            # A rank may have started since the last listing of the tree: look again first.
            self._pids = set(process_tree_pids(self.root_pid))
            self._pids_at = now
            total = self._sum_ours(listed)
        self._count_unmatched(listed, matched=total is not None)
        return total

    def _listed_processes(self) -> list[tuple[int, int | None]]:
        """(pid, used bytes) of every compute process NVML lists on the group's GPUs."""
        listed = []
        for handle in self._handles:
            for proc in self._nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = proc.usedGpuMemory
                listed.append((int(proc.pid), None if used is None else int(used)))
        if self._foreign is None:
            # What runs before our workers touch a GPU is someone else's.
            self._foreign = {pid for pid, _ in listed}
        return listed

    def _sum_ours(self, listed: list[tuple[int, int | None]]) -> int | None:
        ours = [used for pid, used in listed if pid in self._pids and used is not None]
        return sum(ours) if ours else None

    def _new_foreign(self, listed: list[tuple[int, int | None]]) -> list[int]:
        """PIDs NVML lists that are neither ours nor there before our workers started."""
        return sorted({pid for pid, _ in listed} - self._pids - (self._foreign or set()))

    def _count_unmatched(self, listed: list[tuple[int, int | None]], matched: bool) -> None:
        """Stop querying once NVML keeps listing new processes none of which is ours.

        Inside a PID namespace (a container) NVML reports host PIDs, which never equal the
        PIDs we see: the query can never succeed there, and on 8 GPUs every 10 ms it is costly.
        """
        if matched:
            self._matched = True
            return
        new = self._new_foreign(listed)
        if self._matched or not new:
            return
        self._unmatched += 1
        if self._unmatched >= UNMATCHED_SAMPLES:
            shown = ", ".join(str(pid) for pid in new[:4])
            self._process_note = (
                f"NVML per-process memory off: {self._unmatched} samples listed new processes "
                f"(PIDs {shown}) but none of the worker tree's; NVML reports host PIDs inside a "
                "PID namespace (container)"
            )


def gpus_holding(nvml: Any, pid: int, indexes: Sequence[int]) -> list[int]:
    """The GPUs (NVML indices) on which NVML lists process ``pid``: where it holds a CUDA
    context. Empty where NVML cannot tell."""
    try:
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        held = []
        for index in indexes:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            listed = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if any(int(p.pid) == pid for p in listed):
                held.append(index)
        return held
    except nvml.NVMLError:
        return []
    finally:
        nvml.nvmlShutdown()
