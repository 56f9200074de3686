"""stdout and stderr that never end a command: any locale's encoding, and readers that leave.

Two things about the streams used to turn a finished measurement into an exit 3 or a lost
verdict:
- an ASCII stdout (``LC_ALL=C`` without UTF-8 mode, ``PYTHONIOENCODING=ascii``) cannot encode
  the '·', '…' or '×' of the tables: every character it cannot encode is written as its ASCII
  fallback (``ASCII_FALLBACKS``, else '?'), in this one place for every line bloomperf prints;
- a reader that leaves (``| head -1``, ``2>&1 | head -1``) makes the next write raise
  BrokenPipeError: the first one turns that stream into a sink, its descriptor pointed at
  /dev/null (so the interpreter's last flush cannot fail either), and the run goes on to save
  every cell and return its own exit status.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from typing import Any

from bloomperf.core.errors import BloomperfError

ERRORS = "bloomperf-ascii"
ASCII_FALLBACKS = {
    "·": "-",
    "…": "...",
    "×": "x",
    "—": "--",
    "–": "-",
    "→": "->",
    "←": "<-",
    "±": "+/-",
    "≥": ">=",
    "≤": "<=",
    "≈": "~",
    "µ": "u",
    "Δ": "d",
    "✓": "ok",
    "✗": "x",
    "°": "deg",
    "‰": "o/oo",
    "“": '"',
    "”": '"',
    "‘": "'",
    "’": "'",
    "\u00a0": " ",
}


def ascii_fallback(text: str) -> str:
    return "".join(ASCII_FALLBACKS.get(c, c if c.isascii() else "?") for c in text)


def _fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return ascii_fallback(exc.object[exc.start : exc.end]), exc.end


codecs.register_error(ERRORS, _fallback)


class PipeSafe:
    """A text stream that stops writing, silently, once its reader has gone. Any other write
    error on stdout (a full disk: ``> /dev/full``) is one line naming stdout; on stderr, where
    that line would go, it only silences the stream."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream = stream
        self._name = name
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._reader_gone(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except OSError as exc:
                self._reader_gone(exc)

    def isatty(self) -> bool:
        return not self._gone and bool(self._stream.isatty())

    def _reader_gone(self, exc: OSError) -> None:
        if exc.errno not in (errno.EPIPE, errno.EINVAL) and self._name == "stdout":
            raise BloomperfError(f"stdout: cannot write: {exc.strerror or exc}") from None
        self._gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard(stream: Any, name: str) -> Any:
    """``stream`` encoding with ASCII fallbacks and writing through ``PipeSafe``."""
    if stream is None or isinstance(stream, PipeSafe):
        return stream
    with contextlib.suppress(AttributeError, ValueError, LookupError):
        stream.reconfigure(errors=ERRORS)
    return PipeSafe(stream, name)


@contextlib.contextmanager
def guarded_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr guarded for a command's life (restored after it)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = guard(sys.stdout, "stdout"), guard(sys.stderr, "stderr")
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, BloomperfError):
                stream.flush()
        sys.stdout, sys.stderr = saved


def flush_stdout() -> None:
    """Flush what a command printed, so a write error is reported while it can still be
    (a BloomperfError naming stdout) rather than lost at the interpreter's exit."""
    sys.stdout.flush()
