"""The control channel: a line that is not a JSON object is a typed error, never a crash."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.harness.launch import GroupSpec, WorkerFailure, WorkerGroup
from bloomperf.harness.protocol import TOKEN_ENV, MalformedMessage, MessageStream


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


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("models")).path


def test_a_local_group_proves_itself_with_its_token(tiny: Path, tmp_path: Path) -> None:
    # Every group gets a token; its rank 0 sends it in its hello, read from its environment.
    spec = GroupSpec("accelerate", "fp32", tiny, "cpu", 4, log_dir=tmp_path, load_timeout_s=300)
    group = WorkerGroup(spec)
    try:
        group.start()
        assert len(group.token) >= 24
    finally:
        group.close()
    # A rank whose environment carries another token is refused before anything is measured.
    forged = WorkerGroup(replace(spec, env={TOKEN_ENV: "not-the-groups-token"}))
    with pytest.raises(WorkerFailure, match="did not carry the group's token"):
        forged.start()
    assert forged.process is not None and forged.process.wait(timeout=10) != 0
