"""The controller's side of ``forkserver.py``: a fork server (an interpreter with its imports
done) and the runs it forks. The canaries' pytest runs are forks of one (``canaries/run.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bloomperf.harness.orphans import die_with_parent

FORKSERVER = Path(__file__).with_name("forkserver.py")
# How long a fork server told to stop may take before it is killed (it only has to exit).
CLOSE_WAIT_S = 10.0


@dataclass(frozen=True)
class Job:
    """One run: the interpreter, the script and the run's arguments, and the modules a fork
    server imports for it beforehand."""

    python: str
    args: tuple[str, ...]
    script: Path
    imports: tuple[str, ...]
    # Where and how it runs: its folder, environment variables set over the server's, and
    # folders first on its sys.path (what PYTHONPATH would give).
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    path: tuple[str, ...] = ()


class ForkServer:
    """One interpreter with its imports done (forkserver.py), forked per run. It dies with
    this process (its parent-death signal) or when this process closes its stdin."""

    def __init__(self, command: Job, log: Path) -> None:
        self.log = log  # its own output: its imports' warnings, a crash
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [command.python, str(FORKSERVER), *command.imports],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=out,
                preexec_fn=die_with_parent,
            )
        self.pending = b""

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Its stdin closed: it leaves its loop and exits (killed if it has not in a while)."""
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def read_line(self, timeout_s: float | None) -> str | None:
        """Its next line; None when none came within ``timeout_s``; ``RuntimeError`` when it
        exited (its log's tail)."""
        assert self.process.stdout is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not select.select([self.process.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the fork server exited; log tail:\n{tail}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def wait_ready(self, timeout_s: float) -> None:
        line = self.read_line(timeout_s)
        if line != "ready":
            self.process.kill()
            self.process.wait()
            raise subprocess.TimeoutExpired(str(FORKSERVER), timeout_s)

    def start(self, command: Job, log: Path) -> Forked:
        assert self.process.stdin is not None
        job = {
            "script": str(command.script),
            "args": list(command.args),
            "log": str(log),
            "cwd": command.cwd,
            "env": dict(command.env),
            "path": list(command.path),
        }
        self.process.stdin.write(json.dumps(job).encode() + b"\n")
        self.process.stdin.flush()
        return Forked(self, int(self.read_line(None) or 0))


@dataclass
class Forked:
    """One run forked by a ``ForkServer``: its exit code comes from the server, which waits
    for it (it is the server's child, not this process's)."""

    server: ForkServer
    pid: int
    code: int | None = field(default=None, init=False)

    def poll(self) -> int | None:
        return self.code if self.code is not None else self.exit_code(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self.code if self.code is not None else self.exit_code(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"run {self.pid}", timeout or 0.0)
        return code

    def exit_code(self, timeout: float | None) -> int | None:
        """Its exit code as the server says it, within ``timeout``; None if not yet."""
        try:
            line = self.server.read_line(timeout)
        except RuntimeError:  # the server died, and its fork with it
            line = str(-signal.SIGKILL)
        if line is not None:
            self.code = int(line)
        return self.code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
