"""A process's identity: its PID and when it started, in clock ticks since boot.

A PID is reused; PID and start together name one process. psutil's ``create_time`` adds the
boot time to the start, and the kernel's boot time (``btime`` in ``/proc/stat``, whole seconds)
moves when the wall clock is stepped or slewed (NTP, a VM resumed): a stamp written before the
move no longer matches the same live process after it, and a live controller would read as dead
(its workers then kill themselves). The start in ticks since boot (``/proc/PID/stat`` field 22)
never changes for the life of the process.
"""

from __future__ import annotations

import psutil


def process_start(pid: int) -> int | None:
    """``pid``'s start in clock ticks since boot; None if no such process. Where there is no
    ``/proc`` (not Linux), psutil's creation time in ms (subject to clock steps) stands in."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except FileNotFoundError:
        return None if psutil.LINUX else _create_ms(pid)
    except OSError:
        return None
    # The command name (field 2) may hold spaces and ')': the fields after it follow the last ')'.
    fields = text[text.rfind(b")") + 2 :].split()
    return int(fields[19])  # field 22 overall: state is field 3, index 0 here


def _create_ms(pid: int) -> int | None:
    try:
        return round(psutil.Process(pid).create_time() * 1000)
    except psutil.Error:
        return None
