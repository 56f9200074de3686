"""Loading the machine on purpose: a bounded busy-loop process group, and a planted hook that
lets it run only while one arm's worker generates (the burst that hits one arm of a pair).

The spinners run on the last CPU this process may use, where ``bloomperf ab`` pins both arms'
workers (``harness.interleave.shared_cpus``), in a process group of their own; each ends by
itself after ``limit_s`` even if the test that started it is killed, and the context manager
kills the group on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# What a planted hook reads: the process group to wake (SIGCONT) for each generate call and to
# stop (SIGSTOP) after it.
NOISE_ENV = "BLOOMPERF_TEST_NOISE_PGID"

# One leader that forks the other loops, so that all share its new session and process group.
SPIN = """
import os, time
os.sched_setaffinity(0, {{{cpu}}})
for _ in range({count} - 1):
    if os.fork() == 0:
        break
end = time.monotonic() + {limit}
while time.monotonic() < end:
    pass
"""

# Installed by a sitecustomize or a package's .pth: generate wakes the group and stops it again.
HOOK = f'''
import os as _os


def _plant_noise():
    pgid = int(_os.environ.get("{NOISE_ENV}") or 0)
    if not pgid:
        return
    import signal

    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin.generate

    def generate(self, *args, **kwargs):
        _os.killpg(pgid, signal.SIGCONT)
        try:
            return original(self, *args, **kwargs)
        finally:
            _os.killpg(pgid, signal.SIGSTOP)

    GenerationMixin.generate = generate


_plant_noise()
'''


@contextlib.contextmanager
def spinners(
    count: int = 2, limit_s: float = 300.0, stopped: bool = False, anywhere: bool = False
) -> Iterator[int]:
    """``count`` busy loops on the last allowed CPU (``anywhere``: on every allowed one); yields
    their process group id. With ``stopped`` they start stopped, for a planted hook to wake."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = ", ".join(str(cpu) for cpu in (allowed if anywhere else allowed[-1:]))
    code = SPIN.format(cpu=cpus, limit=limit_s, count=count)
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        if stopped:
            time.sleep(0.5)  # the leader has forked the others: the stop reaches them all
            os.killpg(leader.pid, signal.SIGSTOP)
        yield leader.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=30)


def plant_noise_hook(folder: Path) -> Path:
    """A sitecustomize in ``folder`` that wakes the ``NOISE_ENV`` group during each generate."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOK)
    return folder
