"""Runs of a Python client forked from a fork server that did its imports once
(``client_forkserver.py``, run by the client's interpreter): the controller's side, the fork
servers it keeps (one per interpreter and imports) and the runs. Used by the canaries' pytest
runs, and by ``loadgen.run_client(..., fork=True)`` (vLLM's client runs as a process of its own:
docs/serving.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bloomperf.harness.orphans import die_with_parent

FORKSERVER = Path(__file__).with_name("client_forkserver.py")
# How long a fork server told to stop may take before it is killed (it only has to exit).
CLOSE_WAIT_S = 10.0


@dataclass(frozen=True)
class ClientCommand:
    """One client run: the interpreter, the client's script and the run's arguments, and the
    modules a fork server imports for it beforehand."""

    python: str
    args: tuple[str, ...]
    script: Path
    imports: tuple[str, ...]
    # Where and how it runs, when not as this process: its folder, environment variables set
    # over this one's, and folders first on its sys.path (what PYTHONPATH would give).
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    path: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """As a process of its own (in ``cwd``, with ``environment()``)."""
        return [self.python, str(self.script), *self.args]

    def environment(self) -> dict[str, str]:
        """As a process of its own: this one's environment, ``env`` over it, ``path`` first on
        its PYTHONPATH."""
        merged = {**os.environ, **dict(self.env)}
        if self.path:
            rest = merged.get("PYTHONPATH")
            merged["PYTHONPATH"] = os.pathsep.join([*self.path, *([rest] if rest else [])])
        return merged


class ClientProcess(Protocol):
    """A running client: a process of its own (``subprocess.Popen``) or a fork (``Forked``)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class ForkServer:
    """One interpreter's client with its imports done (client_forkserver.py), forked per run.
    It dies with this process (its parent-death signal) or when this process closes its stdin."""

    def __init__(self, command: ClientCommand, log: Path) -> None:
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
                raise RuntimeError(f"the client's fork server exited; log tail:\n{tail}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def wait_ready(self, timeout_s: float) -> None:
        line = self.read_line(timeout_s)
        if line != "ready":
            self.process.kill()
            self.process.wait()
            raise subprocess.TimeoutExpired(str(FORKSERVER), timeout_s)

    def start(self, command: ClientCommand, log: Path) -> Forked:
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
            raise subprocess.TimeoutExpired(f"client {self.pid}", timeout or 0.0)
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


# One fork server per interpreter and imports, started at its first run and kept for the
# controller's life (sweeps, pairs and arms all run one client at a time).
_FORK_SERVERS: dict[tuple[str, tuple[str, ...]], ForkServer] = {}


def close_fork_servers() -> None:
    """Stop every fork server (its stdin closed, it exits): at the controller's exit, and
    wherever a controller lives on after its sweeps (a test)."""
    while _FORK_SERVERS:
        _, server = _FORK_SERVERS.popitem()
        server.close()


atexit.register(close_fork_servers)


def fork_server(command: ClientCommand, log: Path, timeout_s: float) -> ForkServer:
    """The fork server for ``command``'s interpreter and imports, started (its imports waited
    for, within ``timeout_s``) when there is none or the last one died."""
    key = (command.python, command.imports)
    server = _FORK_SERVERS.get(key)
    if server is None or not server.alive():
        server = ForkServer(command, log)
        server.wait_ready(timeout_s)
        _FORK_SERVERS[key] = server
    return server
