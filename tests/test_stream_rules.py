"""stdout and stderr as every command writes them, in this process: any text in an ASCII locale,
a reader that leaves (a real pipe whose reading end is closed), and a full disk (/dev/full)."""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.core.streams import (
    ASCII_FALLBACKS,
    ERRORS,
    PipeSafe,
    ascii_fallback,
    flush_stdout,
    guard,
    guarded_streams,
)


@given(st.text())
def test_any_text_becomes_ascii_with_the_tables_signs_spelled_out(text: str) -> None:
    out = ascii_fallback(text)
    assert out.isascii()
    expected = "".join(
        ASCII_FALLBACKS[c] if c in ASCII_FALLBACKS else c if ord(c) < 128 else "?" for c in text
    )
    assert out == expected


@given(st.text())
def test_an_ascii_stream_writes_what_ascii_fallback_says(text: str) -> None:
    assert text.encode("ascii", errors=ERRORS) == ascii_fallback(text).encode("ascii")


def test_the_fallback_is_for_encoding_only() -> None:
    with pytest.raises(UnicodeDecodeError):
        b"caf\xe9".decode("ascii", errors=ERRORS)


def test_the_signs_bloomperf_prints_each_have_a_fallback() -> None:
    assert ascii_fallback("1.2× · 3 … ≤ 5 ± 1 µs → Δ ✓ ✗") == "1.2x - 3 ... <= 5 +/- 1 us -> d ok x"


@pytest.fixture
def broken_pipe() -> Iterator[io.TextIOWrapper]:
    """A text stream on a pipe whose reader has gone."""
    read, write = os.pipe()
    os.close(read)
    stream = io.TextIOWrapper(os.fdopen(write, "wb", buffering=0), encoding="utf-8")
    yield stream
    stream.close()


def is_devnull(fd: int) -> bool:
    mine, null = os.fstat(fd), os.stat(os.devnull)
    return stat.S_ISCHR(mine.st_mode) and mine.st_rdev == null.st_rdev


@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_a_reader_that_leaves_silences_the_stream_for_good(
    name: str, broken_pipe: io.TextIOWrapper
) -> None:
    safe = PipeSafe(broken_pipe, name)
    assert safe.write("first line\n") == len("first line\n")
    safe.flush()  # the pipe's error, met on the write through or on this flush
    assert safe.write("more\n") == 5
    # Its descriptor now leads to /dev/null: the interpreter's last flush cannot fail either.
    assert is_devnull(broken_pipe.fileno())
    assert not safe.isatty()
    safe.writelines(["a", "b"])
    safe.flush()


@pytest.fixture
def full_disk() -> Iterator[io.TextIOWrapper]:
    """A text stream on /dev/full that keeps nothing back: each write meets ENOSPC at once."""
    raw = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 - closed below
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    yield stream
    raw.close()


def test_a_full_disk_on_stdout_is_one_error_naming_stdout(full_disk: io.TextIOWrapper) -> None:
    safe = PipeSafe(full_disk, "stdout")
    with pytest.raises(BloomperfError) as raised:
        safe.write("x\n")
    assert str(raised.value) == "stdout: cannot write: No space left on device"


def test_a_full_disk_on_stderr_only_silences_it(full_disk: io.TextIOWrapper) -> None:
    safe = PipeSafe(full_disk, "stderr")
    safe.write("x\n")
    assert safe.write("y\n") == 2 and is_devnull(full_disk.fileno())


class Refusing(io.StringIO):
    """A stream whose flushes fail with one errno, and its writes too unless ``writes_fail``
    is off (a buffer that fills, and fails when it goes to disk)."""

    def __init__(self, errno_: int, writes_fail: bool = True) -> None:
        super().__init__()
        self.errno, self.writes, self.writes_fail = errno_, 0, writes_fail

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes_fail:
            raise OSError(self.errno, os.strerror(self.errno))
        return super().write(text)

    def flush(self) -> None:
        raise OSError(self.errno, os.strerror(self.errno))


@pytest.mark.parametrize("errno_", [32, 22])  # EPIPE, EINVAL (a pipe closed on Windows)
def test_epipe_and_einval_mean_the_reader_left_on_stdout_too(errno_: int) -> None:
    stream = Refusing(errno_)
    safe = PipeSafe(stream, "stdout")
    safe.write("a")
    safe.write("b")
    safe.flush()
    assert stream.writes == 1  # nothing written after the first refusal


def test_a_flush_that_fails_silences_the_stream_as_a_write_does() -> None:
    stream = Refusing(32)
    safe = PipeSafe(stream, "stdout")
    safe.flush()
    safe.write("never tried")
    assert stream.writes == 0


def test_a_guarded_stream_is_the_stream_it_wraps_otherwise() -> None:
    inner = io.StringIO()
    safe = PipeSafe(inner, "stdout")
    safe.writelines(["a", "b\n"])
    safe.flush()
    assert inner.getvalue() == "ab\n"
    assert safe.getvalue() == "ab\n"  # any other attribute is the stream's
    assert safe.isatty() is False


def test_guard_reencodes_an_ascii_stream_and_wraps_once() -> None:
    raw = io.BytesIO()
    ascii_stream = io.TextIOWrapper(raw, encoding="ascii")
    guarded = guard(ascii_stream, "stdout")
    assert isinstance(guarded, PipeSafe) and guard(guarded, "stdout") is guarded
    guarded.write("2.0× slower · p99 ≤ 5 µs\n")
    guarded.flush()
    assert raw.getvalue() == b"2.0x slower - p99 <= 5 us\n"
    assert guard(None, "stdout") is None


def test_guarded_streams_wrap_both_for_the_command_and_restore_them() -> None:
    before = sys.stdout, sys.stderr
    with guarded_streams():
        assert isinstance(sys.stdout, PipeSafe) and isinstance(sys.stderr, PipeSafe)
        assert sys.stdout._stream is before[0] and sys.stderr._stream is before[1]
        print("through the guard")
    assert (sys.stdout, sys.stderr) == before


def test_guarded_streams_restore_them_when_the_last_flush_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = Refusing(28, writes_fail=False)  # ENOSPC when flushed
    monkeypatch.setattr(sys, "stdout", full)
    with guarded_streams():
        print("lost on a full disk")
    assert sys.stdout is full and full.getvalue() == "lost on a full disk\n"


def test_flush_stdout_reports_a_full_disk_while_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", PipeSafe(Refusing(28, writes_fail=False), "stdout"))
    sys.stdout.write("buffered\n")
    with pytest.raises(BloomperfError, match=r"^stdout: cannot write: No space left on device$"):
        flush_stdout()


class Terminal(io.StringIO):
    """A stream that says it is a terminal, and whose reader may leave."""

    left = False

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.left:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_a_terminal_is_one_until_its_reader_leaves() -> None:
    terminal = Terminal()
    safe = PipeSafe(terminal, "stdout")
    assert safe.isatty() is True
    terminal.left = True
    safe.write("x")
    assert safe.isatty() is False


class NoDescriptor:
    """A stream whose reader leaves, and that has no descriptor to point at /dev/null: none at
    all, one it refuses to give (closed), or one that is no descriptor at all."""

    def __init__(self, how: str) -> None:
        self.how = how

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def __getattr__(self, name: str) -> Any:
        if name == "fileno" and self.how != "none":
            return self.fileno_of
        raise AttributeError(name)

    def fileno_of(self) -> int:
        if self.how == "closed":
            raise ValueError("I/O operation on closed file")
        return -1  # dup2 onto it: EBADF


@pytest.mark.parametrize("how", ["none", "closed", "stale"])
def test_a_stream_without_a_descriptor_is_silenced_all_the_same(how: str) -> None:
    safe = PipeSafe(NoDescriptor(how), "stdout")
    assert safe.write("first") == 5
    assert safe.write("second") == 6


def test_guard_keeps_the_name_that_decides_which_errors_are_said(
    full_disk: io.TextIOWrapper,
) -> None:
    with pytest.raises(BloomperfError, match=r"^stdout: cannot write"):
        guard(full_disk, "stdout").write("x\n")
    guard(full_disk, "stderr").write("x\n")  # silenced


@pytest.mark.parametrize("kind", ["no reconfigure", "closed"])
def test_guard_wraps_a_stream_it_cannot_reencode(kind: str) -> None:
    stream: Any = io.StringIO()
    if kind == "closed":
        stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
        stream.close()  # reconfigure raises ValueError
    guarded = guard(stream, "stderr")
    assert isinstance(guarded, PipeSafe) and guarded._stream is stream
