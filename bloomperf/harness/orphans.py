"""No worker outlives its controller: a SIGKILLed ``bloomperf run`` takes its groups with it.

A controller that exits normally, or on a signal it handles, kills its groups itself
(``bloomperf.harness.launch``). One that is SIGKILLed (``timeout -k``, Docker, a CI runner's
cancel, the OOM killer) runs no code at all, so the group sees to it:

- the process bloomperf starts gets a Linux parent-death signal (``prctl(PR_SET_PDEATHSIG)``, set
  between fork and exec): the kernel SIGKILLs it when the controller dies (strictly, when the
  thread that started it ends: groups are started from the main thread);
- every worker (each rank, whoever started it: DeepSpeed's launcher sits between the controller
  and the ranks) watches the controller named in its environment, and when it is gone kills its
  whole process group (launcher, ranks, the JIT compilers they started) and itself;
- rank 0 ends when its control connection closes.

The device lock (``bloomperf.harness.lock``) is the kernel's and drops with the controller, so
the next run also checks for *survivors*: processes of a dead controller's group on its devices.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

import psutil

from bloomperf.core.pidstart import process_start

CONTROLLER_ENV = "BLOOMPERF_CONTROLLER"  # "pid:start:pgid" of the controller (core.pidstart)
HELD_ENV = "BLOOMPERF_HELD_DEVICES"  # the devices the controller locked (a lock key)
PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def _find_prctl() -> Any:
    """libc's ``prctl``, looked up once at import: ``die_with_parent`` runs between fork and exec
    too, where loading a library could deadlock on a lock another thread held at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux; elsewhere nothing).
    Used as ``preexec_fn`` and by each rank at start: a rank's parent is the launcher."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def controller_stamp() -> str:
    """This process as the controller of the groups it starts (``CONTROLLER_ENV``)."""
    return f"{os.getpid()}:{process_start(os.getpid())}:{os.getpgrp()}"


def parse_stamp(stamp: str) -> tuple[int, str, int] | None:
    parts = stamp.split(":")
    if len(parts) != 3 or not (parts[0].isdigit() and parts[2].isdigit()):
        return None
    return int(parts[0]), parts[1], int(parts[2])


def controller_alive(stamp: str) -> bool:
    """Whether the controller of ``stamp`` still runs (a reused PID is another process)."""
    parsed = parse_stamp(stamp)
    if parsed is None:
        return True  # not ours to judge
    pid, started, _ = parsed
    try:
        return str(process_start(pid)) == started and psutil.Process(pid).status() != "zombie"
    except psutil.Error:
        return False


def kill_own_group(stamp: str) -> None:
    """The controller is gone: SIGKILL this process's group (and this process), unless the group
    is the controller's own (a worker started by hand from a shell)."""
    parsed = parse_stamp(stamp)
    group = os.getpgrp()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()  # compilers that left the group, too
    if parsed is not None and group != parsed[2]:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    os._exit(1)


def watch_controller() -> None:
    """In a worker: die with its parent (a rank's is the launcher, on any node), and with the
    controller named in the environment (a daemon thread; a local group only)."""
    die_with_parent()
    stamp = os.environ.get(CONTROLLER_ENV, "")
    if not stamp:
        return
    if not controller_alive(stamp):
        kill_own_group(stamp)

    def watch() -> None:
        while controller_alive(stamp):
            time.sleep(WATCH_INTERVAL_S)
        kill_own_group(stamp)

    threading.Thread(target=watch, name="bloomperf-controller-watch", daemon=True).start()


def survivors(devices: set[str]) -> set[int]:
    """Processes of a dead controller's groups that still run on any of ``devices``."""
    found = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = process.environ()
            stamp, held = env.get(CONTROLLER_ENV), env.get(HELD_ENV, "")
            ours = stamp and devices & set(held.split(","))
            if ours and not controller_alive(stamp) and process.status() != psutil.STATUS_ZOMBIE:
                found.add(process.pid)
    return found


def wait_for_survivors(devices: set[str], wait_s: float) -> set[int]:
    """Give a dead controller's group ``wait_s`` to finish dying; those still running."""
    deadline = time.monotonic() + wait_s
    while True:
        left = survivors(devices)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
