"""Progress on slow work: a tqdm bar on a terminal, timestamped heartbeat lines otherwise.

CI logs keep every byte of a bar's redraws, and pytest captures stderr: off a terminal each piece
of slow work says when it starts, then one line every ``BLOOMPERF_HEARTBEAT_S`` seconds (10 by
default) with how far it is, its rate and the time left, and one line when it ends. Under pytest
the plugin routes the lines through its terminal reporter (``set_sink``) so they show live.

Nothing here runs inside a timed cycle: building and loading happen before measuring, and the
loading heartbeat is a thread of the controller, which times nothing itself.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

DEFAULT_HEARTBEAT_S = 10.0
_sink: Callable[[str], None] | None = None


def heartbeat_s() -> float:
    try:
        return max(0.1, float(os.environ.get("BLOOMPERF_HEARTBEAT_S", DEFAULT_HEARTBEAT_S)))
    except ValueError:
        return DEFAULT_HEARTBEAT_S


def set_sink(sink: Callable[[str], None] | None) -> None:
    """Where progress lines go instead of stderr (pytest's terminal reporter); None: stderr."""
    global _sink
    _sink = sink


def emit(text: str) -> None:
    """One timestamped progress line."""
    stamp = datetime.now(timezone.utc).strftime("%H:%M:%SZ")
    line = f"{stamp} bloomperf: {text}"
    if _sink is not None:
        _sink(line)
    else:
        print(line, file=sys.stderr, flush=True)


def on_terminal() -> bool:
    return _sink is None and sys.stderr.isatty()


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def time_left(done: float, total: float, elapsed: float) -> str | None:
    """The rest at the rate so far; None before anything is done."""
    if done <= 0 or total <= done:
        return None
    rest = elapsed * (total - done) / done
    # A rate so small that the rest does not fit a float (a done near zero) gives no estimate.
    return format_duration(rest) if math.isfinite(rest) else None


def format_bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class ByteProgress:
    """Bytes written out of a known total (building a checkpoint)."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total = what, total
        self.done = 0
        self.started = self.last = time.monotonic()
        self.every = heartbeat_s()
        self.bar: Any = None
        if on_terminal():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, desc=what, unit="B", unit_scale=True, file=sys.stderr, leave=False
            )
        else:
            emit(f"{what}: {format_bytes(total)} to write")

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            emit(self.status(now))

    def status(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        left = time_left(self.done, self.total, elapsed)
        return (
            f"{self.what}: {format_bytes(self.done)} of {format_bytes(self.total)} "
            f"({100 * self.done / max(self.total, 1):.0f} %), "
            f"{format_bytes(self.done / elapsed)}/s" + (f", about {left} left" if left else "")
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def heartbeat(what: str, detail: Callable[[], str]) -> Iterator[None]:
    """Say ``what`` started, then every few seconds how long it has run and ``detail()`` (the
    worker's last log line), until the block ends."""
    started = time.monotonic()
    stop = threading.Event()
    every = heartbeat_s()
    emit(f"{what} ...")

    def beat() -> None:
        while not stop.wait(every):
            extra = detail().strip()
            note = f"; last log line: {extra[:160]}" if extra else ""
            emit(f"{what}: {format_duration(time.monotonic() - started)}{note}")

    thread = threading.Thread(target=beat, name="bloomperf-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def last_line(path: Any) -> str:
    """The last non-empty line of a log file (read from its end), or ""."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            # A progress bar in the log redraws with \r, which splitlines splits at too: its
            # latest state is the last piece.
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line.strip()), "")
