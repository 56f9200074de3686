"""Multi-file outputs (a report, a history site) replaced whole, or not at all.

Moving a report's files in one by one left, on a SIGTERM or a full disk half-way, a new
``index.html`` beside the old PNGs. Every file is now written into a fresh folder beside the
output (``.NAME.XXXXXXXX.tmp``, locked while written: a killed writer's is removed by the next
write), and that folder is then exchanged with the old one in one ``renameat2(RENAME_EXCHANGE)``:
a reader, or a stop at any moment, finds the old output or the new one. The old folder is
replaced as a whole, so one that holds anything the command did not write is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import remove_dead_temps, temp_prefix
from bloomperf.core.paths import real_path

AT_FDCWD = -100
RENAME_EXCHANGE = 2


@contextlib.contextmanager
def fresh_folder(out: Path, option: str, ours: Callable[[Path], bool]) -> Iterator[Path]:
    """An empty folder to write the output into, swapped in for ``out`` when the block ends
    without an error; ``ours(entry)``: whether an entry of an existing ``out`` is one this
    command writes (anything else would be lost with the old folder: refused, named)."""
    target = real_path(out)  # a link to the output folder stays a link, to the new folder
    try:
        if target.exists() and not target.is_dir():
            raise BloomperfError(f"{option} {out}: not a folder")
        foreign = sorted(p.name for p in target.iterdir() if not ours(p)) if target.exists() else []
        if foreign:
            raise BloomperfError(
                f"{option} {out}: holds {foreign[0]!r}, which this command did not write; "
                "name a new folder or one it wrote before (it is replaced whole)"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        prefix = temp_prefix(target.parent, target.name)
        staging = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    except OSError as exc:
        raise BloomperfError(f"{option} {out}: cannot write: {exc.strerror or exc}") from None
    held = os.open(staging, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a folder nobody holds is a killed writer's
        yield staging
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's folder is private; an output is shared
        swap_in(staging, target)
    except OSError as exc:
        raise BloomperfError(f"{option} {out}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(held)
        shutil.rmtree(staging, ignore_errors=True)  # the new files, or the old ones swapped out
    remove_dead_temps(target.parent, target.name)


def swap_in(staging: Path, target: Path) -> None:
    """``staging`` becomes ``target``; the old ``target``, if any, is left at ``staging``."""
    try:
        os.rename(staging, target)  # no target, or an empty folder
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:  # a C library without it: two renames, not atomic
        renameat2 = None
    if renameat2 is not None:
        flags = (AT_FDCWD, os.fsencode(staging), AT_FDCWD, os.fsencode(target), RENAME_EXCHANGE)
        if renameat2(*flags) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without it
            raise OSError(code, os.strerror(code), str(target))
    prefix = temp_prefix(target.parent, target.name)
    old = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    os.rename(target, old)
    os.rename(staging, target)
    os.rename(old, staging)
