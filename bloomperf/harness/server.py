"""A serving engine (vLLM's OpenAI-compatible server), seen from the controller: start it in a
process group of its own, wait until it answers, read its /metrics, stop it and all it started.

The server runs under ``bloomperf.harness.serve_keeper`` (it watches the controller, so a
SIGKILLed run leaves no server or engine core behind); the group is the keeper's session, killed
as a whole with the harness's teardown (``bloomperf.harness.teardown``), like a worker group.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.harness.launch import LOG_TAIL_CHARS, WorkerFailure
from bloomperf.harness.orphans import CONTROLLER_ENV, controller_stamp
from bloomperf.harness.teardown import kill_tree, terminate_group

HOST = "127.0.0.1"
READY_POLL_S = 0.5
STOP_GRACE_S = 5.0
# vLLM's CPU backend reserves this many GiB of KV cache unless told otherwise (its default, 4,
# is more than a tiny model on a shared 2-core machine needs).
KV_CACHE_GIB = "1"
# What every server gets before the user's --engine-args (argparse: the last value wins).
DEFAULT_ENGINE_ARGS: tuple[str, ...] = (
    "--dtype",
    "float32",
    "--max-model-len",
    "512",
    "--enforce-eager",
)
# argparse's refusal, as vLLM's server prints it before exiting with status 2.
ARGPARSE_ERROR = re.compile(r"^[^\n]*error: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class ServerSpec:
    python: Path  # the serving venv's interpreter (.venv-serving/bin/python)
    model: Path  # a checkpoint folder
    log_path: Path
    port: int | None = None  # None: a free one
    engine_args: tuple[str, ...] = ()
    ready_timeout_s: float = 900.0  # vLLM on a loaded 2-core machine: 45 s to over 5 min
    threads: int | None = None  # OMP threads of the engine; None: vLLM's choice
    env: tuple[tuple[str, str], ...] = ()  # settings of its own (an `ab` arm's KEY=VALUE)


def port_in_use(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def choose_port(wanted: int | None) -> int:
    """``wanted`` when it is free (a port in use is named, exit 2), else one the kernel picks."""
    if wanted is not None:
        if port_in_use(wanted):
            raise BloomperfError(f"--port: {wanted} is in use on {HOST}; name another or omit it")
        return wanted
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def http_get(url: str, timeout: float = 10.0) -> str | None:
    """The body of GET ``url``, or None when nothing answers it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return str(reply.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def server_command(spec: ServerSpec, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bloomperf.harness.serve_keeper",
        "--",
        str(spec.python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model),
        "--host",
        HOST,
        "--port",
        str(port),
        *DEFAULT_ENGINE_ARGS,
        *spec.engine_args,
    ]


class Server:
    """One server (``Managed`` in ``bloomperf.harness.sweep`` starts it, and again after it
    died); a context manager that always stops it."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.port = choose_port(spec.port)
        self.url = f"http://{HOST}:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        env = {**os.environ, **dict(self.spec.env), CONTROLLER_ENV: controller_stamp()}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        if self.spec.threads is not None:
            env["OMP_NUM_THREADS"] = str(self.spec.threads)
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.spec.log_path, "wb") as log:
            self.process = subprocess.Popen(
                server_command(self.spec, self.port),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole
            )

    def wait_ready(self) -> float:
        """Seconds until /v1/models answered. A server that exits first is ``error`` (a
        refused engine argument: BloomperfError, exit 2), one that never answers ``timeout``;
        both carry the log's tail."""
        started = time.monotonic()
        while not self.answers(started):
            time.sleep(READY_POLL_S)
        return time.monotonic() - started

    def answers(self, started: float) -> bool:
        """One look: whether /v1/models answers now. Raises as ``wait_ready`` does when the
        server exited, or when ``spec.ready_timeout_s`` since ``started`` passed (stopping it):
        so that a caller waiting on several servers hears of the first to fail at once."""
        if not self.alive():
            self._raise_exited()
        if self.get("/v1/models", timeout=2.0) is not None:
            return True
        if time.monotonic() - started >= self.spec.ready_timeout_s:
            self.stop()
            waited = f"server not ready in {self.spec.ready_timeout_s:g} s"
            raise WorkerFailure("timeout", f"{waited}; log tail:\n{self.log_tail()}")
        return False

    def _raise_exited(self) -> None:
        code = self.process.wait() if self.process is not None else None
        tail = self.log_tail()
        refused = ARGPARSE_ERROR.findall(tail)
        if code == 2 and refused:
            raise BloomperfError(f"--engine-args: vLLM refused them: {refused[-1].strip()}")
        raise WorkerFailure("error", f"server exited (code {code}); log tail:\n{tail}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def get(self, path: str, timeout: float = 10.0) -> str | None:
        return http_get(self.url + path, timeout)

    def log_tail(self) -> str:
        try:
            return self.spec.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def pids(self) -> set[int]:
        """The server's processes now (keeper, server, engine core), for the teardown tests."""
        import psutil

        if self.process is None:
            return set()
        with contextlib.suppress(psutil.Error):
            keeper = psutil.Process(self.process.pid)
            return {keeper.pid, *(c.pid for c in keeper.children(recursive=True))}
        return set()

    def stop(self) -> None:
        """SIGTERM the group, a short grace, then SIGKILL it and any leaver (idempotent)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            terminate_group(self.process, STOP_GRACE_S)
        kill_tree(self.process)
