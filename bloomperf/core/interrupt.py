"""SIGTERM stops bloomperf the way Ctrl-C does.

A CI cancel, ``timeout`` or ``kill`` sends SIGTERM, whose default action ends the process on the
spot: no ``finally`` runs, the worker groups (each in its own session, so the signal never
reaches them) keep the GPUs, the device lock is left for the next run to clear. Raised as an
exception instead, it unwinds like Ctrl-C's KeyboardInterrupt: groups killed, the results file
left valid (``complete: false``), then exit 143 (128 + SIGTERM), as a shell reports it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was; a KeyboardInterrupt so the same cleanup runs."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    # A second SIGTERM (CI repeats it before its SIGKILL) must not break off the cleanup.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated`` (main thread only: Python delivers
    signals there, and only it may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interruption(stop: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the program, in words, and the exit code that says so."""
    if isinstance(stop, Terminated):
        return "terminated (SIGTERM)", EXIT_TERMINATED
    return "interrupted", EXIT_INTERRUPTED
