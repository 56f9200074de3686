"""The /dev/shm segments DeepSpeed's CPU all-reduce leaves behind, and their cleanup.

Every rank leaves a ``/dev/shm/deepspeed_allreduce_buffer_*`` segment behind, even after a clean
exit; ``cleanup_shm`` removes those no live process maps. Used by the single-node launcher
(``bloomperf.harness.dslaunch``), ``bloomperf shard`` and the multi-node cleanup on every node.
"""

from __future__ import annotations

import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_PATTERN = "deepspeed_allreduce_buffer_*"


def shm_segments() -> set[str]:
    return {str(path) for path in SHM_DIR.glob(SHM_PATTERN)}


def cleanup_shm(before: set[str] | None = None) -> list[str]:
    """Remove the all-reduce segments our ranks left; return what was removed.

    ``before``: segments that existed before the group started, kept. Segments a live process
    still maps belong to a running group (another test, another user's job) and are kept too.
    """
    in_use = mapped_paths()
    removed = []
    for path in sorted(shm_segments() - (before or set())):
        if path in in_use:
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def mapped_paths() -> set[str]:
    """Files under /dev/shm that any process we can see has mapped or open."""
    paths: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    paths.add(line[line.index("/dev/shm/") :].removesuffix(" (deleted)"))
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    paths.add(target)
        except OSError:  # the process exited meanwhile, or is not ours to read
            continue
    return paths
