"""One writer at a time in a shared folder: the lock every read-modify-write of a store takes.

A baselines folder, a history folder and a history root are written by several processes at once
(parallel CI jobs accepting their cells, nightly runners merging into one root). Each of them
reads what is there, decides, and writes: without a lock two writers read the same state and the
second write loses the first (seen: six concurrent ``baseline accept`` left 3 to 5 of 6 cells).

The lock is ``fcntl.flock`` on a file of the machine-wide lock folder (``bloomperf.core.lockdir``)
named after the folder's real path, so that the folder itself holds only its documents, and the
kernel drops the lock when its holder dies, even on SIGKILL: a crashed writer never leaves the
folder locked. A writer waits for its turn (writes take milliseconds), up to ``WAIT_S``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.lockdir import lock_folder, make_lock_folder
from bloomperf.core.paths import path_key, real_path

WAIT_S = 120.0
POLL_S = 0.02
ADVICE = "fix its permissions"


def store_lock_path(folder: Path) -> Path:
    """The lock file of ``folder`` (by its real path: two spellings of it are one lock)."""
    digest = hashlib.sha256(path_key(folder)).hexdigest()[:16]
    return lock_folder() / f"bloomperf-store-{digest}.lock"


@contextlib.contextmanager
def store_lock(folder: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold ``folder``'s writer lock (the folder is created if missing) for the ``with`` block."""
    folder = Path(folder)
    path = store_lock_path(folder)
    make_lock_folder(path.parent, ADVICE)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise BloomperfError(f"{folder}: cannot lock for writing: {exc.strerror or exc}") from None
    try:
        flock_within(fd, folder, wait_s)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def store_locks(folders: list[Path], wait_s: float = WAIT_S) -> Iterator[None]:
    """Several folders' locks, always taken in one order, so two writers never deadlock."""
    with contextlib.ExitStack() as stack:
        for folder in sorted({real_path(f) for f in folders}):
            stack.enter_context(store_lock(folder, wait_s))
        yield


def flock_within(fd: int, where: Path, wait_s: float, poll_s: float = POLL_S) -> None:
    """Take an exclusive ``flock`` on ``fd``, waiting up to ``wait_s`` (one line if not)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise BloomperfError(f"{where}: cannot lock: {exc.strerror or exc}") from None
        if time.monotonic() > deadline:
            raise BloomperfError(f"{where}: another writer held its lock for over {wait_s:g} s")
        time.sleep(poll_s)
