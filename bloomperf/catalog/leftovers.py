"""Temporary folders of runs that were killed: named for their owner, removed by the next run.

A SIGKILLed controller runs no cleanup, so its worker, offload and launcher folders stayed in
``$TMPDIR`` for good. Each is now named for the process that made it and when that process
started (``bloomperf-worker-PID-START-XXXXXXXX``, ``bloomperf.core.pidstart``; a reused PID is
another process): a folder
whose owner is gone was left by a killed run, and the next run removes it (``doctor`` lists
them). A folder whose owner still runs (another run at work) is never touched, nor one that
holds nothing but a failed group's log, kept for the user where its cell's message named it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import psutil

from bloomperf.core.pidstart import process_start

FOLDER = re.compile(r"bloomperf-(?:worker|offload|group)-(\d+)-(\d+)-[a-z0-9_]{8}")


def owned_temp_folder(kind: str) -> Path:
    """A new private folder in ``$TMPDIR``, named for this process (see the module's text)."""
    me = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"bloomperf-{kind}-{me}-{process_start(me)}-"))


def owner_alive(pid: int, started: int) -> bool:
    if started > LEGACY_MS:  # named by a version that wrote the start in ms since the epoch
        return _alive_since_ms(pid, started)
    try:
        return process_start(pid) == started and psutil.Process(pid).status() != "zombie"
    except psutil.Error:
        return False


# Ticks since boot stay below this for 300 years at 100 Hz; ms since the epoch passed it in 2001.
LEGACY_MS = 10**12


def _alive_since_ms(pid: int, started_ms: int) -> bool:
    try:
        process = psutil.Process(pid)
        created = round(process.create_time() * 1000)
        return created == started_ms and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def holds_only_a_kept_log(folder: Path) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return True  # not ours to judge
    return bool(names) and all(n.startswith("worker-") and n.endswith(".log") for n in names)


def dead_run_folders(root: Path | None = None) -> list[Path]:
    """The folders in ``root`` (``$TMPDIR``) that killed runs left behind."""
    root = root if root is not None else Path(tempfile.gettempdir())
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = []
    for path in entries:
        match = FOLDER.fullmatch(path.name)
        dead = match is not None and not owner_alive(int(match[1]), int(match[2]))
        if dead and not path.is_symlink() and not holds_only_a_kept_log(path):
            found.append(path)
    return sorted(found)


def remove_dead_run_folders(root: Path | None = None) -> None:
    for folder in dead_run_folders(root):
        shutil.rmtree(folder, ignore_errors=True)
