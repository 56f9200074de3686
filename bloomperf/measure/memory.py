"""Peak memory of a worker's process tree, sampled from the controller process.

The controller holds no CUDA context, so it measures from outside: NVML on GPU (device used
memory, which also sees DeepSpeed's workspace allocated outside torch), the kernel's peak
resident set on CPU. ``mark()`` closes a phase (the model load, then each cell's generation) and
starts the next one, so one cell's peak never leaks into the next cell's reading.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from bloomperf.devices import VisibleDevice, cuda_visible_devices, measured_handle, resolve_visible
from bloomperf.errors import BloomperfError
from bloomperf.results import MemoryReading
from bloomperf.topology import load_nvml

POLL_INTERVAL_S = 0.01
# Listing the process tree costs far more than one NVML or RSS read; ranks start once.
PID_REFRESH_S = 0.5
# Samples in which NVML lists new processes but none of ours before the per-process query stops
# (PID namespaces); each looks at the tree again first, so a rank that just started is no miss.
UNMATCHED_SAMPLES = 5

_VMHWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


class MemorySampler(ABC):
    @abstractmethod
    def start(self) -> None:
        """Begin the first phase."""

    @abstractmethod
    def mark(self) -> MemoryReading:
        """The peak since ``start()`` or the previous ``mark()``; then begin a new phase."""

    @abstractmethod
    def stop(self) -> None:
        """Stop sampling; safe to call twice."""


def create_sampler(
    device: str, root_pid: int, devices: Sequence[VisibleDevice] | None = None
) -> MemorySampler:
    """The sampler for ``device`` ("cuda" or "cpu") watching ``root_pid`` and its descendants.

    ``devices``: exactly the GPUs the group uses (default: every GPU visible to the controller),
    so that idle GPUs are not summed into its peak. Never raises for a missing or broken NVML:
    the sampler's readings say why they are empty.
    """
    if device == "cuda" or device.startswith("cuda:"):
        return NvmlSampler(root_pid, devices=devices)
    if device == "cpu":
        return RssSampler(root_pid)
    raise BloomperfError(f"device: unknown device {device!r} (valid: cuda, cpu)")


def process_tree_pids(root_pid: int) -> list[int]:
    """``root_pid`` and all its descendants (launchers start ranks as children); [] if gone."""
    try:
        root = psutil.Process(root_pid)
        return [root_pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _unavailable(reason: str) -> MemoryReading:
    return MemoryReading(source="unavailable", peak_bytes=None, reason=reason)


# ---- CPU: peak resident set ---------------------------------------------------------------


def read_peak_rss(pid: int) -> int:
    """The kernel's own peak resident set of ``pid`` (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = _VMHWM.search(status)
    if found is None:  # a zombie has no memory lines
        raise ProcessLookupError(pid)
    return int(found.group(1)) * 1024


def reset_peak_rss(pid: int) -> None:
    """Set ``pid``'s VmHWM back to its current RSS (Linux >= 4.0; needs ptrace rights on it)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class RssSampler(MemorySampler):
    """Peak RSS of the worker's process tree.

    Preferred method ``hwm``: read each process's VmHWM at ``mark()`` and reset it, which costs
    nothing between marks (no thread competing with the timed generation on a small CPU box).
    Where the peak cannot be reset (not Linux, no rights) it falls back to ``poll``: a thread that
    sums the tree's RSS every 10 ms, which can miss peaks shorter than that.

    Summing per-process peaks gives an upper bound of the tree's simultaneous peak: ranks that
    peak at different moments are counted as if they peaked together. A process that exits
    between two marks takes its peak with it.
    """

    def __init__(self, root_pid: int, method: str = "auto", interval_s: float = POLL_INTERVAL_S):
        if method not in ("auto", "hwm", "poll"):
            raise ValueError(f"unknown RSS sampling method {method!r}")
        self.root_pid = root_pid
        self.method = method
        self.interval_s = interval_s
        self.reason = ""
        self._started = False
        self._lock = threading.Lock()
        self._peak: int | None = None
        self._pids: list[int] = []
        self._pids_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._started = True
        why = ""
        if self.method != "poll":
            why = self._reset_tree_peaks()
            if not why:
                self.method = "hwm"
                return
            if self.method == "hwm":
                raise OSError(f"cannot reset the peak RSS: {why}")
        self.reason = f"RSS polled every {self.interval_s * 1000:g} ms" + (
            f" (cannot reset the peak RSS: {why})" if why else ""
        )
        self.method = "poll"
        self._thread = threading.Thread(target=self._poll_loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def _reset_tree_peaks(self) -> str:
        """Reset every process's peak; '' when that works, else why not."""
        if not Path("/proc/self/clear_refs").exists():
            return "no /proc/<pid>/clear_refs on this system"
        for pid in process_tree_pids(self.root_pid):
            try:
                reset_peak_rss(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited since the listing
            except OSError as exc:
                return f"/proc/{pid}/clear_refs: {exc.strerror or exc}"
        return ""

    def mark(self) -> MemoryReading:
        if not self._started:
            raise RuntimeError("RssSampler.mark() called before start()")
        peak = self._mark_hwm() if self.method == "hwm" else self._mark_poll()
        if peak is None:
            return _unavailable(f"RSS: process {self.root_pid} and its descendants are gone")
        return MemoryReading(source="rss", peak_bytes=peak, reason=self.reason)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _mark_hwm(self) -> int | None:
        total: int | None = None
        for pid in process_tree_pids(self.root_pid):
            try:
                # Read then reset right away: the window in which a peak could slip is tiny.
                peak = read_peak_rss(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited since the listing
            # A process we may not reset (another user's) would report its old peak next time
            # too: an overstatement, never an understatement.
            with contextlib.suppress(OSError):
                reset_peak_rss(pid)
            total = (total or 0) + peak
        return total

    def _mark_poll(self) -> int | None:
        self._sample_rss(refresh=True)
        with self._lock:
            peak, self._peak = self._peak, None
        return peak

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_rss(refresh=False)

    def _sample_rss(self, refresh: bool) -> None:
        now = time.monotonic()
        if refresh or now - self._pids_at > PID_REFRESH_S:
            self._pids = process_tree_pids(self.root_pid)
            self._pids_at = now
        total: int | None = None
        for pid in self._pids:
            try:
                total = (total or 0) + psutil.Process(pid).memory_info().rss
            except psutil.NoSuchProcess:
                continue
        if total is None:
            return
        with self._lock:
            self._peak = total if self._peak is None else max(self._peak, total)


# ---- GPU: NVML ------------------------------------------------------------------------------


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
            return _unavailable("; ".join(notes) or "NVML: no sample taken")
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
