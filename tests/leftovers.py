"""What a run may leave behind, found the way a leak really shows (not a test module).

Processes are found by an environment marker they inherit, not by parentage: a process that
escaped its group is re-parented to init and is no longer anybody's child. Shared-memory
segments are found by name and by whether any live process still maps them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from bloomperf.harness.dslaunch import mapped_paths, shm_segments

MARK_ENV = "BLOOMPERF_TEST_MARK"


def marked_env(mark: Path | str) -> dict[str, str]:
    """The environment of a run whose processes (they inherit it) can be found afterwards."""
    return {**os.environ, MARK_ENV: str(mark)}


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie awaiting its parent's wait is gone)."""
    running = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.add(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    """Whether ``pid`` has exited (or is a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while pid in alive({pid}):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def marked_processes(mark: Path | str, wait_s: float = 10.0, env: str = MARK_ENV) -> set[int]:
    """Processes still running whose ``env`` is ``mark``, after up to ``wait_s`` for any that
    are already on their way out."""
    deadline = time.monotonic() + wait_s
    while True:
        found = set()
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get(env) == str(mark):
                    found.add(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        found = alive(found)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def leaked_segments(before: set[str], ports: set[str]) -> set[str]:
    """DeepSpeed all-reduce segments of the groups that used ``ports`` (the segment's name
    carries the rendezvous port) that appeared since ``before`` and that no live process maps:
    left behind. Other groups running beside a test hold segments of their own ports."""
    new = {p for p in shm_segments() - before if any(f"_{port}_" in p for port in ports)}
    return new - mapped_paths()


# A sitecustomize that records each Python process's start: a line with its pid and argv.
STARTS_HOOK = """import os, sys
with open(os.path.join(os.path.dirname(__file__), "started"), "a") as log:
    log.write(f"{os.getpid()} {sys.argv!r}\\n")
"""


def record_python_starts(folder: Path) -> str:
    """A folder for PYTHONPATH whose sitecustomize records every Python process that starts
    with it (each one a command's child inherits): the event "a worker or rank started", read
    with ``python_starts`` rather than guessed from how long a command took."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(STARTS_HOOK)
    return str(folder)


def python_starts(folder: Path) -> list[str]:
    """The processes recorded so far in ``folder`` (``record_python_starts``): pid and argv."""
    log = folder / "started"
    return log.read_text().splitlines() if log.exists() else []
