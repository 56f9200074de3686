"""One doctor check's outcome, and the statuses it may have."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("ok", "warn", "fail")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    reason: str  # one line

    def __post_init__(self) -> None:
        if self.status not in STATUSES or not self.reason or "\n" in self.reason:
            raise ValueError(f"doctor check {self.name}: bad status or reason: {self!r}")


def gpu_or_warn(device: str) -> str:
    """What a missing GPU facility is: a failure when the GPU was asked for, else a warning."""
    return "fail" if device == "cuda" else "warn"
