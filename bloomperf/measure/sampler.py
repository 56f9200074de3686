"""What every memory sampler of a worker's process tree offers, and what they share."""

from __future__ import annotations

from abc import ABC, abstractmethod

import psutil

from bloomperf.store.results import MemoryReading

POLL_INTERVAL_S = 0.01
# Listing the process tree costs far more than one NVML or RSS read; ranks start once.
PID_REFRESH_S = 0.5


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


def process_tree_pids(root_pid: int) -> list[int]:
    """``root_pid`` and all its descendants (launchers start ranks as children); [] if gone."""
    try:
        root = psutil.Process(root_pid)
        return [root_pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def unavailable_reading(reason: str) -> MemoryReading:
    return MemoryReading(source="unavailable", peak_bytes=None, reason=reason)
