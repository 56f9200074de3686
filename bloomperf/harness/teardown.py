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


def still_ours(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process.pid`` still names this group. Until the leader is reaped its PID, and
    so the group's id, cannot be given out again; once reaped, the kernel may hand the number to
    a new process (32768 PIDs go round in minutes on a busy runner) that leads a group of its
    own: then no process of ours is left in a group of that id, and it is someone else's."""
    return process.returncode is None or not psutil.pid_exists(process.pid)


def terminate_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group's process group and wait up to ``grace_s`` for its leader."""
    if not still_ours(process):
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's session group and any descendant that left it (idempotent: a
    group already gone, whose id another process may hold now, is left alone)."""
    if not still_ours(process):
        return
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
