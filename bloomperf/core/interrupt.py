"""SIGTERM, SIGHUP and SIGQUIT stop bloomperf the way Ctrl-C does.

A CI cancel, ``timeout``, Docker or ``kill`` sends SIGTERM; a closed terminal or SSH session (the
common case on a GPU node) SIGHUP; Ctrl-\\ SIGQUIT. The default action of each ends the process on
the spot: no ``finally`` runs, the worker groups (each in its own session, so the signal never
reaches them) keep the GPUs, the temporary folders stay. Raised as an exception instead, each
unwinds like Ctrl-C's KeyboardInterrupt: groups killed at once (SIGTERM, a short grace, SIGKILL:
whoever sent the signal may SIGKILL us seconds later), the results file left valid
(``complete: false``), then exit 128 + the signal's number, as a shell reports it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
# The signals handled as an interruption, beside SIGINT (Python's own KeyboardInterrupt).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Terminated(KeyboardInterrupt):
    """A stop signal, raised where the program was; a KeyboardInterrupt so that the same
    cleanup runs."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    # A second signal (CI repeats SIGTERM before its SIGKILL; a hang-up is often followed by
    # SIGTERM) must not break off the cleanup the first one started.
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise Terminated(signum)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM, SIGHUP and SIGQUIT raise ``Terminated`` (main thread only:
    Python delivers signals there, and only it may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {stop: signal.signal(stop, _raise_terminated) for stop in STOP_SIGNALS}
    try:
        yield
    finally:
        for stop, handler in previous.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(stop, handler)


def interruption(stop: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the program, in words, and the exit code that says so."""
    if isinstance(stop, Terminated):
        name = signal.Signals(stop.signum).name
        return f"terminated ({name})", 128 + stop.signum
    return "interrupted", EXIT_INTERRUPTED
