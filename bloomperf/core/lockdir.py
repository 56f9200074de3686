"""The machine-wide folder that holds bloomperf's locks (devices, results files, stores).

A lock guards something every user and every ``$TMPDIR`` of the machine share (a GPU, a results
file, a baselines folder), so its path depends on neither: two runs with different TMPDIRs that
each took their own lock would both measure on the same GPU at once. The default is
``bloomperf-locks`` in the first of ``SHARED_BASES`` usable here; ``$BLOOMPERF_LOCK_DIR``
overrides it; without any of them (a bare container), ``~/.cache/bloomperf/locks``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bloomperf.core.errors import BloomperfError

LOCK_DIR_ENV = "BLOOMPERF_LOCK_DIR"


# Machine-wide folders, first usable wins: a lock guards a device, which every user and every
# $TMPDIR of the machine shares, so its path depends on neither. /run/lock is the FHS place for
# lock files (tmpfs, cleared at boot); /dev/shm and /var/tmp are there on every Linux.
SHARED_BASES = (Path("/run/lock"), Path("/dev/shm"), Path("/var/tmp"))
SHARED_NAME = "bloomperf-locks"


def lock_folder() -> Path:
    """``$BLOOMPERF_LOCK_DIR``, else ``bloomperf-locks`` in the first of ``SHARED_BASES`` that is
    a real folder this user may write, else (none: a container without them) this user's
    ``~/.cache/bloomperf/locks``. Never under ``$TMPDIR``: two runs with different TMPDIRs
    would each take their own lock and measure on the same GPU at once.

    The shared folder is created sticky and writable by all (like /tmp), so that every user's
    runs exclude each other; it is checked (``lock_folder_problem``) before use.
    """
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        return Path(configured)
    for base in SHARED_BASES:
        if base.is_dir() and not base.is_symlink() and os.access(base, os.W_OK | os.X_OK):
            return base / SHARED_NAME
    return Path.home() / ".cache" / "bloomperf" / "locks"


def make_lock_folder(folder: Path, advice: str) -> None:
    """Create the lock folder if needed, and refuse one that may not hold locks."""
    try:
        if not os.path.lexists(folder):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if folder.parent in SHARED_BASES:
                os.chmod(folder, 0o1777)  # past the umask: every user's runs lock here
        info = os.lstat(folder)
    except OSError as exc:
        raise BloomperfError(
            f"{folder}: cannot create the lock folder ({exc.strerror or exc}); "
            f"set {LOCK_DIR_ENV} to a writable folder or {advice}"
        ) from None
    problem = lock_folder_problem(info)
    if problem:
        raise BloomperfError(
            f"{folder}: refusing it as the lock folder: {problem}; set {LOCK_DIR_ENV} to a "
            f"folder of yours or {advice}"
        )


def lock_folder_problem(info: os.stat_result) -> str | None:
    """Why a folder (its ``lstat``) may not hold locks: never through a link, never a folder
    another user controls, never writable by others unless sticky (like /tmp)."""
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    shared = bool(info.st_mode & stat.S_ISVTX and info.st_mode & 0o002)
    if info.st_uid not in (os.getuid(), 0) and not shared:
        # A sticky folder open to all is one users share on purpose (the default one, created by
        # whoever ran first); a private folder of another user could hold any lock it likes.
        return f"it belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return "others may write to it and it has no sticky bit"
    return None
