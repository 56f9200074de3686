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
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bloomperf.core.errors import BloomperfError

LOCK_DIR_ENV = "BLOOMPERF_LOCK_DIR"
NO_LOCK_ADVICE = "pass --bloomperf-no-lock (pytest) or --no-lock (bloomperf run) to run anyway"


def lock_folder() -> Path:
    """``$BLOOMPERF_LOCK_DIR``, else a private folder of this user (0700).

    A folder shared by every user can be planted or held by any of them (a link to somewhere
    else, a folder they own), so the default is per user. Users who share GPUs and want their
    runs to exclude each other point BLOOMPERF_LOCK_DIR at one folder: it is checked like /tmp
    (a real folder, not a link, sticky when others may write to it).
    """
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.path.isdir(runtime) else Path(tempfile.gettempdir())
    return base / f"bloomperf-locks-{os.getuid()}"


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
    _make_folder(folder)
    with contextlib.ExitStack() as stack:
        for device in devices_of(key):  # sorted: two runs always lock in the same order
            stack.enter_context(_hold_one(lock_path(folder, device), device))
        yield


def _make_folder(folder: Path) -> None:
    try:
        if not os.path.lexists(folder):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise BloomperfError(
            f"{folder}: cannot create the lock folder ({exc.strerror or exc}); "
            f"set {LOCK_DIR_ENV} to a writable folder or {NO_LOCK_ADVICE}"
        ) from None
    problem = lock_folder_problem(info)
    if problem:
        raise BloomperfError(
            f"{folder}: refusing it as the lock folder: {problem}; set {LOCK_DIR_ENV} to a "
            f"folder of yours or {NO_LOCK_ADVICE}"
        )


def lock_folder_problem(info: os.stat_result) -> str | None:
    """Why a folder (its ``lstat``) may not hold locks: never through a link, never a folder
    another user controls, never writable by others unless sticky (like /tmp)."""
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid not in (os.getuid(), 0):
        return f"it belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return "others may write to it and it has no sticky bit"
    return None


@contextlib.contextmanager
def _hold_one(path: Path, device: str) -> Iterator[None]:
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
            what = "the CPU" if device == "cpu" else f"GPU {device}"
            raise BloomperfError(
                f"another bloomperf run (PID {holder}) holds {what} (lock {path}); {NO_LOCK_ADVICE}"
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
