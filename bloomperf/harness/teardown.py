"""Tearing a worker group down: its processes, then its temporary folder.

Every process of a group shares one process group (it is started in a session of its own), so
one ``killpg`` reaches the launcher, the ranks and whatever they started (DeepSpeed's JIT
compilers); descendants that left the group are found by parentage before the kill.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil


def remove_folder(folder: Path, keep: Path | None = None) -> None:
    """Remove ``folder``, all of it, or all but ``keep`` when ``keep`` is in it."""
    if keep is None or keep.parent != folder:
        shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for path in entries:
        if path == keep:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def terminate_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group's process group and wait up to ``grace_s`` for its leader."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's session group and any descendant that left it."""
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    psutil.wait_procs(descendants, timeout=10)
