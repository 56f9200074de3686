"""The control channel: a line that is not a JSON object is a typed error, never a crash."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.launch import GroupSpec, WorkerFailure, WorkerGroup
from bloomperf.protocol import MalformedMessage, MessageStream


@pytest.mark.parametrize("line", [b"{not json\n", b"\xff\xfe\n", b"[1, 2]\n", b'"hello"\n', b"\n"])
def test_a_malformed_line_is_a_typed_error(line: bytes) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(line)
        with pytest.raises(MalformedMessage):
            MessageStream(ours).receive(5)


def test_a_well_formed_line_after_none_is_read() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b'{"event": "ready"}\n')
        assert MessageStream(ours).receive(5) == {"event": "ready"}


def test_a_group_that_sends_a_malformed_line_fails_its_cell_and_is_killed(tmp_path: Path) -> None:
    # A real process in its own session stands for the group: the failure must kill it.
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    group = WorkerGroup(GroupSpec("accelerate", "fp32", tmp_path, "cpu", 4, log_dir=tmp_path))
    ours, theirs = socket.socketpair()
    with theirs:
        group.process, group.stream = process, MessageStream(ours)
        theirs.sendall(b"garbage\n")
        with pytest.raises(WorkerFailure) as failure:
            group._expect("ready", 5)
    assert failure.value.outcome == "error"
    assert "malformed message" in str(failure.value)
    assert process.wait(timeout=10) != 0  # killed, not left running
