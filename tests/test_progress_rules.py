"""Progress lines off a terminal, by value: the heartbeat's interval from the environment, each
line's stamp and words, the rate and time left of a build as a clock of the test's own gives
them, and the last line of a worker's log that a heartbeat quotes."""

from __future__ import annotations

import io
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core import progress
from bloomperf.core.progress import (
    ByteProgress,
    emit,
    format_bytes,
    format_duration,
    heartbeat,
    heartbeat_s,
    last_line,
    on_terminal,
    time_left,
)


@pytest.fixture
def lines() -> Iterator[list[str]]:
    said: list[str] = []
    progress.set_sink(said.append)
    yield said
    progress.set_sink(None)


class Clock:
    """time.monotonic as the test sets it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The progress module's clock only: the process's own (pytest's, a mutation runner's)
    keeps running."""
    fake = Clock()
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=fake))
    return fake


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, 10.0),
        ("2.5", 2.5),
        ("0", 0.1),
        ("-3", 0.1),
        ("0.05", 0.1),
        ("soon", 10.0),
        ("", 10.0),
    ],
)
def test_the_heartbeat_interval_is_read_from_the_environment_at_its_floor(
    value: str | None, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("BLOOMPERF_HEARTBEAT_S", raising=False)
    else:
        monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", value)
    assert heartbeat_s() == seconds


STAMP = r"\d\d:\d\d:\d\dZ bloomperf: "


def test_a_line_is_stamped_and_goes_to_the_sink(lines: list[str]) -> None:
    emit("building x")
    (line,) = lines
    assert re.fullmatch(STAMP + "building x", line)


def test_the_stamp_is_utc_whatever_the_local_zone(
    lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+5:30: no hour nor minute in common
    time.tzset()
    try:
        before = time.gmtime()
        emit("x")
        after = time.gmtime()
    finally:
        monkeypatch.undo()
        time.tzset()
    stamps = {time.strftime("%H:%M", t) for t in (before, after)}
    assert lines[0][:5] in stamps and lines[0][8] == "Z"


def test_without_a_sink_a_line_goes_to_stderr_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Err(io.StringIO):
        flushed = 0

        def flush(self) -> None:
            self.flushed += 1

        def isatty(self) -> bool:
            return True

    err = Err()
    monkeypatch.setattr(sys, "stderr", err)
    progress.set_sink(None)
    emit("loading")
    assert re.fullmatch(STAMP + "loading\n", err.getvalue()) and err.flushed == 1
    assert on_terminal()
    progress.set_sink(lambda _: None)
    try:
        assert not on_terminal()  # under pytest's reporter: lines, never a bar
    finally:
        progress.set_sink(None)


def seconds_of(text: str) -> int:
    """A duration as format_duration writes it, back in seconds."""
    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+) (h|min|s)\b", text))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


@given(st.floats(-100, 200_000, allow_nan=False))
def test_a_duration_reads_in_its_largest_units_to_the_second_or_minute(seconds: float) -> None:
    text = format_duration(seconds)
    whole = max(0, round(seconds))
    if whole < 60:
        assert re.fullmatch(r"\d{1,2} s", text) and seconds_of(text) == whole
    elif whole < 3600:
        assert re.fullmatch(r"\d{1,2} min \d\d s", text) and seconds_of(text) == whole
    else:
        assert re.fullmatch(r"\d+ h \d\d min", text)
        assert seconds_of(text) == whole - whole % 60


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (59.4, "59 s"),
        (59.6, "1 min 00 s"),
        (60, "1 min 00 s"),
        (61, "1 min 01 s"),
        (3599.4, "59 min 59 s"),
        (3600, "1 h 00 min"),
        (3661, "1 h 01 min"),
        (-5, "0 s"),
    ],
)
def test_a_duration_changes_units_at_the_minute_and_the_hour(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@pytest.mark.parametrize(
    ("done", "total", "elapsed", "left"),
    [
        (0, 10, 5.0, None),  # nothing done yet: no rate
        (5e-324, 1.0, 1.0, None),  # a rate too small to give a finite time
        (10, 10, 5.0, None),
        (1, 4, 2.0, "6 s"),
    ],
)
def test_time_left_at_its_edges(done: float, total: float, elapsed: float, left: str | None):
    assert time_left(done, total, elapsed) == left


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0.001, 1e5))
def test_time_left_is_the_rest_at_the_rate_so_far(done: float, total: float, elapsed: float):
    left = time_left(done, total, elapsed)
    rate = done / elapsed
    if done <= 0 or total <= done or rate == 0 or (total - done) / rate == float("inf"):
        assert left is None
    else:
        assert left is not None
        rest = (total - done) / rate
        assert abs(seconds_of(left) - rest) <= max(0.51 if rest < 3600 else 60.5, rest * 1e-9)


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0.0 MB"),
        (1_500_000, "1.5 MB"),
        (999_999_999, "1000.0 MB"),
        (1_000_000_000, "1.00 GB"),
        (352_000_000_000, "352.00 GB"),
        (1_125_000_001, "1.13 GB"),  # just past a rounding edge: the divisor is exact
        (1_250_001, "1.3 MB"),
    ],
)
def test_bytes_are_megabytes_below_a_gigabyte(n: int, shown: str) -> None:
    assert format_bytes(n) == shown


def test_a_build_says_its_size_then_its_rate_once_per_interval(
    lines: list[str], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", "5")
    bar = ByteProgress("building x", 4_000_000)
    assert [line.split("bloomperf: ")[1] for line in lines] == ["building x: 4.0 MB to write"]
    clock.now += 2
    bar.advance(1_000_000)  # within the interval: nothing said
    assert len(lines) == 1
    clock.now += 3
    bar.advance(1_000_000)
    assert lines[-1].split("bloomperf: ")[1] == (
        "building x: 2.0 MB of 4.0 MB (50 %), 0.4 MB/s, about 5 s left"
    )
    clock.now += 4.9
    bar.advance(1_000_000)
    assert len(lines) == 2  # 4.9 s since the last line
    clock.now += 0.1
    bar.advance(1_000_000)
    assert lines[-1].split("bloomperf: ")[1] == "building x: 4.0 MB of 4.0 MB (100 %), 0.4 MB/s"
    bar.close()
    assert bar.done == 4_000_000


def test_an_empty_build_says_zero_percent(lines: list[str], clock: Clock) -> None:
    bar = ByteProgress("building y", 0)
    assert bar.status(clock.now + 1) == "building y: 0.0 MB of 0.0 MB (0 %), 0.0 MB/s"


def test_a_build_of_one_byte_and_a_rate_within_the_first_second(
    lines: list[str], clock: Clock
) -> None:
    bar = ByteProgress("one", 1)
    bar.done = 1
    assert bar.status(clock.now + 1) == "one: 0.0 MB of 0.0 MB (100 %), 0.0 MB/s"
    big = ByteProgress("big", 4_000_000)
    big.done = 1_000_000
    assert big.status(clock.now + 0.5) == ("big: 1.0 MB of 4.0 MB (25 %), 2.0 MB/s, about 2 s left")


def test_on_a_terminal_a_build_is_a_bar_and_says_no_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    monkeypatch.setattr(progress, "emit", said.append)
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = ByteProgress("building z", 10_000)
    try:
        bar.advance(4_000)
        bar.advance(6_000)
        shown = bar.bar
        assert shown is not None and shown.n == 10_000 and shown.total == 10_000
        # Bytes scaled to kB, MB, GB; on stderr; gone from the terminal once done.
        assert (shown.desc, shown.unit, shown.unit_scale, shown.leave) == (
            "building z",
            "B",
            True,
            False,
        )
        assert getattr(shown.fp, "_wrapped", shown.fp) is sys.stderr
    finally:
        bar.close()  # whatever the asserts say: no bar left open for the tests after
    assert said == [] and "building z" in sys.stderr.getvalue()


def test_a_heartbeat_says_it_started_then_quotes_the_log_until_the_block_ends(
    lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", "0.1")
    beats = threading.Semaphore(0)
    details = iter(["", "x" * 200, "  step 3  "])

    def detail() -> str:
        beats.release()
        return next(details, "later")

    with heartbeat("loading a b", detail):
        for _ in range(3):
            assert beats.acquire(timeout=60)
        while len(lines) < 4:  # the third beat's line follows its detail
            threading.Event().wait(0.01)
    said = [line.split("bloomperf: ", 1)[1] for line in lines]
    assert said[0] == "loading a b ..."
    assert re.fullmatch(r"loading a b: \d+ s", said[1])  # no log line yet: no note
    assert re.fullmatch(r"loading a b: \d+ s; last log line: x{160}", said[2])
    assert re.fullmatch(r"loading a b: \d+ s; last log line: step 3", said[3])
    assert "bloomperf-heartbeat" not in {t.name for t in threading.enumerate()}


def test_the_last_line_of_a_log_is_its_latest_state(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("first\nLoading:  10%|#\rLoading:  90%|#########\r\n\n  \n")
    assert last_line(log) == "Loading:  90%|#########"
    log.write_bytes(b"a\n" + b"b" * 5000 + b"\nend \xff\n")
    assert last_line(log) == "end \ufffd"
    log.write_bytes(b"old line\n" + b"x" * 5000)  # only the end of a long log is read
    assert last_line(log) == "x" * 4096
    log.write_text("")
    assert last_line(log) == ""
    log.write_text("abc")  # a log of one short line: read from its first byte
    assert last_line(log) == "abc"
    assert last_line(tmp_path / "missing.log") == ""
