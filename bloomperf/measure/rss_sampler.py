"""The CPU's memory sampler: the peak resident set of a worker's process tree, from the kernel."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from pathlib import Path

import psutil

from bloomperf.measure.sampler import (
    PID_REFRESH_S,
    POLL_INTERVAL_S,
    MemorySampler,
    process_tree_pids,
    unavailable_reading,
)
from bloomperf.store.results import MemoryReading

_VMHWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


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
            return unavailable_reading(f"RSS: process {self.root_pid} and its descendants are gone")
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
