"""An advisory lock per device, so two bloomperf runs never measure on the same GPUs at once.

Two runs sharing a GPU (or the CPU) would each time the other's work and fill each other's
memory: both results would be wrong without any error. Each device gets a lock file held with
``fcntl.flock``; the kernel drops the lock when the holder exits, even on SIGKILL, so a crashed
run never leaves a stale lock behind. The holder's PID is written into the file so that the
second run can say who is in the way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.lockdir import lock_folder, make_lock_folder
from bloomperf.core.paths import path_key
from bloomperf.harness.orphans import HELD_ENV, wait_for_survivors

NO_LOCK_ADVICE = "pass --bloomperf-no-lock (pytest) or --no-lock (bloomperf run) to run anyway"


def devices_of(key: str) -> list[str]:
    """The devices named by ``key``: ``"cpu"`` or GPU ids/UUIDs joined by commas."""
    devices = sorted({part.strip() for part in key.split(",") if part.strip()})
    if not devices:
        raise BloomperfError("device lock: no device to lock")
    return devices


def lock_path(folder: Path, device: str) -> Path:
    """One file per device, so runs on overlapping GPU sets (0-3 and 2-5) also exclude each
    other. The name keeps only safe characters: a device id never becomes a path."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", device)
    return folder / f"bloomperf-{safe}.lock"


@contextlib.contextmanager
def hold_device_lock(key: str, enabled: bool = True, folder: Path | None = None) -> Iterator[None]:
    """Hold the lock of every device in ``key`` for the duration of the ``with`` block.

    Refuses at once (``BloomperfError``, exit 2) when another process holds any of them; waiting
    would only make the wait part of nobody's timing. ``enabled=False`` locks nothing.
    """
    if not enabled:
        yield
        return
    folder = folder if folder is not None else lock_folder()
    make_lock_folder(folder, NO_LOCK_ADVICE)
    with contextlib.ExitStack() as stack:
        for device in devices_of(key):  # sorted: two runs always lock in the same order
            what = "the CPU" if device == "cpu" else f"GPU {device}"
            stack.enter_context(_hold_one(lock_path(folder, device), f"holds {what}"))
        refuse_survivors(key)
        stack.enter_context(_held_in_environment(key))
        yield


SURVIVOR_WAIT_S = 10.0


def refuse_survivors(key: str) -> None:
    """The kernel drops a SIGKILLed run's lock at once, while its group may take a moment to
    die (``bloomperf.harness.orphans``): wait for it, and refuse to measure beside one that
    does not."""
    left = wait_for_survivors(set(devices_of(key)), SURVIVOR_WAIT_S)
    if left:
        pids = ", ".join(str(p) for p in sorted(left))
        raise BloomperfError(
            f"processes of a killed bloomperf run still use {key} after {SURVIVOR_WAIT_S:g} s "
            f"(PIDs {pids}); end them, or {NO_LOCK_ADVICE}"
        )


@contextlib.contextmanager
def _held_in_environment(key: str) -> Iterator[None]:
    """Every group started while the lock is held inherits the devices it runs on, so that a
    later run can tell its survivors from anybody else's processes."""
    previous = os.environ.get(HELD_ENV)
    os.environ[HELD_ENV] = ",".join(devices_of(key))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = previous


@contextlib.contextmanager
def hold_output_lock(output: Path, folder: Path | None = None) -> Iterator[None]:
    """Hold the lock of a results file for the whole run, ``--no-lock`` or not: two runs that
    write one file would each rewrite it with their own cells after every cell, and the last
    writer silently drops the other's. The second run is refused at once instead."""
    folder = folder if folder is not None else lock_folder()
    make_lock_folder(folder, NO_LOCK_ADVICE)
    real = os.path.realpath(output)
    digest = hashlib.sha256(path_key(real)).hexdigest()[:16]
    path = folder / f"bloomperf-output-{digest}.lock"
    with _hold_one(path, f"writes {real}", advice="give this run another --output"):
        yield


@contextlib.contextmanager
def _hold_one(path: Path, holds: str, advice: str = NO_LOCK_ADVICE) -> Iterator[None]:
    try:
        fd = _open_lock_file(path)
    except OSError as exc:
        raise BloomperfError(
            f"{path}: cannot open the lock file ({exc.strerror or exc}); {NO_LOCK_ADVICE}"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise BloomperfError(f"{path}: cannot lock: {exc.strerror or exc}") from None
            holder = _read_holder(fd)
            raise BloomperfError(
                f"another bloomperf run (PID {holder}) {holds} (lock {path}); {advice}"
            ) from None
        _write_holder(fd, str(os.getpid()))
        try:
            yield
        finally:
            _write_holder(fd, "")
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    """Open (or create, readable and writable by all) a lock file.

    O_NOFOLLOW: in a world-writable folder the file could be a planted symlink. Opening an
    existing file without O_CREAT: Linux refuses O_CREAT on another user's file in a sticky
    folder (fs.protected_regular), and the file is another user's when they ran first.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:  # another run created it a moment ago
        return os.open(path, flags)
    os.fchmod(fd, 0o666)  # past the umask, so the next user can write their PID
    return fd


def _write_holder(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode() + (b"\n" if text else b""), 0)


def _read_holder(fd: int) -> str:
    """The PID in the lock file, or "unknown" (the holder may not have written it yet)."""
    text = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip()
    return text if text.isdigit() else "unknown"
