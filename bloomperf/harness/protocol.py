"""The controller↔worker protocol: JSON lines over a localhost TCP socket.

Why a socket and not stdin/stdout: ranks are started by launchers (DeepSpeed's, torchrun) that
own the children's standard streams, and libraries print freely to stdout. Why JSON and not
pickle: nothing a worker sends can execute code in the controller.

Controller → worker (rank 0):  {"op": "begin", "batch_size": B}   build inputs, reset peaks
                                {"op": "cycle"}                    one timed ``generate``
                                {"op": "end"}                      report the cell's torch peaks
                                {"op": "close"}                    exit cleanly
Worker → controller:            {"event": "hello", "pid": P, "world_size": W, "token": T}
                                {"event": "loaded", "load_time_s": S, "details": {...}}
                                {"event": "ready", "backend_loads": N}
                                {"event": "sample", "seconds": S, "step_ms": [MS, ...]}
                                {"event": "ended", "torch_allocated_bytes": N, ...}
                                {"event": "failed", "outcome": "oom"|"error", "message": M,
                                 "traceback": T}
"""

from __future__ import annotations

import json
import secrets
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from bloomperf.config.backend import BackendOptions

# Ops broadcast from rank 0 to the other ranks as small integers (a tensor, not an object).
OP_CLOSE = 0
OP_BEGIN = 1
OP_CYCLE = 2
OP_END = 3
OP_CODES = {"close": OP_CLOSE, "begin": OP_BEGIN, "cycle": OP_CYCLE, "end": OP_END}

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# A multi-node group's control port listens on a network address, not only on loopback: rank 0
# proves it belongs to the group with this token (from the group's .deepspeed_env) in "hello".
TOKEN_ENV = "BLOOMPERF_CONTROL_TOKEN"


def new_token() -> str:
    """A group's secret: its rank 0 proves with it that the control connection is its own."""
    return secrets.token_urlsafe(24)


class ConnectionClosed(Exception):
    """The peer went away (a worker killed, crashed or exited)."""


class MalformedMessage(Exception):
    """The peer sent a line that is not a JSON object: a broken or foreign peer, not a crash."""


class MessageStream:
    """Newline-delimited JSON messages over a connected socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ConnectionClosed(str(exc)) from None

    def receive(self, timeout: float | None) -> dict[str, Any]:
        """The next message; ``TimeoutError`` after ``timeout`` seconds of silence."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._buffer:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError from None
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from None
            if not chunk:
                raise ConnectionClosed("connection closed")
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                raise ConnectionClosed("message too large")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            raise MalformedMessage(f"not JSON ({exc}): {line[:80]!r}") from None
        if not isinstance(message, dict):
            raise MalformedMessage(f"not a JSON object: {line[:80]!r}")
        return message

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to know, from the controller (as JSON: ``to_json``/``from_json``)."""

    backend: str
    dtype: str
    checkpoint: str
    device: str
    new_tokens: int
    control: str  # host:port of the controller's listener
    options: BackendOptions = field(default_factory=BackendOptions)
    memory_limit_bytes: int | None = None  # the worker caps its address space (CPU)
    slowdown_percent: float | None = None  # a synthetic slowdown, for testing the gate

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerSpec:
        """The spec back; a field this version does not know is an error, not ignored."""
        data = json.loads(text)
        try:
            return cls(**{**data, "options": BackendOptions(**data.get("options") or {})})
        except TypeError as exc:
            raise MalformedMessage(f"worker spec: {exc}") from None
