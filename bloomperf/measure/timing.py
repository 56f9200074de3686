"""Device-synchronised wall-clock timing.

CUDA kernels run asynchronously: without a synchronisation before reading the clock, a timer
measures how fast work was queued, not how fast it ran. torch is imported only when a CUDA
device is synchronised, so the controller can import this module without torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def synchronize(device: str) -> None:
    """Wait for every queued kernel on every visible GPU; nothing to wait for on CPU.

    All GPUs, not only the current one: Accelerate spreads a model's layers over several.
    """
    if device != "cuda" and not device.startswith("cuda:"):
        return
    import torch

    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)


def no_sync() -> None:
    """The synchronisation of a CPU run: none."""


def device_sync(device: str) -> Callable[[], None]:
    """The synchronisation function for ``device``, for ``time_call`` and ``Stopwatch``."""
    if device == "cuda" or device.startswith("cuda:"):
        return lambda: synchronize(device)
    return no_sync


class Stopwatch:
    """``with Stopwatch(sync) as watch: ...`` then ``watch.seconds``.

    Synchronises before starting (earlier queued work is not ours) and before stopping.
    """

    def __init__(self, sync: Callable[[], None] = no_sync) -> None:
        self.sync = sync
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self.sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if exc_type is None:
            # Not after a failure: synchronising a device that just ran out of memory could
            # raise again and hide the original error.
            self.sync()
        self.seconds = time.perf_counter() - self._start


def time_call(fn: Callable[[], T], sync: Callable[[], None] = no_sync) -> tuple[T, float]:
    """Run ``fn()`` and return its result with the synchronised wall time in seconds."""
    with Stopwatch(sync) as watch:
        result = fn()
    return result, watch.seconds
