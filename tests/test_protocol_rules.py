"""The controller↔worker message stream and the worker's spec, in process: a socket pair, bytes
split however the kernel delivers them, and every way a line or a peer can go wrong."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.config.backend import BackendOptions
from bloomperf.harness import protocol
from bloomperf.harness.protocol import (
    ConnectionClosed,
    MalformedMessage,
    MessageStream,
    WorkerSpec,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
messages = st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=4), max_size=6)


@pytest.fixture
def pair() -> Iterator[tuple[MessageStream, socket.socket]]:
    """A stream that receives, and the raw socket at its other end."""
    ours, theirs = socket.socketpair()
    stream = MessageStream(ours)
    yield stream, theirs
    stream.close()
    theirs.close()


def test_a_message_sent_a_byte_at_a_time_arrives_whole(pair) -> None:
    stream, theirs = pair
    for byte in b'{"event": "sample", "seconds": 0.5}\n{"event": "ready"}\n':
        theirs.sendall(bytes([byte]))
    assert stream.receive(1.0) == {"event": "sample", "seconds": 0.5}
    assert stream.receive(1.0) == {"event": "ready"}
    with pytest.raises(TimeoutError):
        stream.receive(0.01)  # nothing more was sent


@given(messages)
def test_what_one_stream_sends_the_other_receives(sent: list[dict]) -> None:
    a, b = socket.socketpair()
    sender, receiver = MessageStream(a), MessageStream(b)
    try:
        for message in sent:
            sender.send(message)
        assert [receiver.receive(1.0) for _ in sent] == sent
    finally:
        sender.close()
        receiver.close()


def test_a_timeout_mid_message_keeps_what_was_read(pair) -> None:
    stream, theirs = pair
    theirs.sendall(b'{"event": "re')
    with pytest.raises(TimeoutError):
        stream.receive(0.05)
    theirs.sendall(b'ady", "n": 1}\n')
    assert stream.receive(1.0) == {"event": "ready", "n": 1}


def test_a_long_line_that_is_not_json_is_quoted_to_80_bytes(pair) -> None:
    stream, theirs = pair
    line = b"x" * 200
    theirs.sendall(line + b"\n")
    with pytest.raises(MalformedMessage) as refused:
        stream.receive(1.0)
    assert str(refused.value).startswith("not JSON (")
    assert str(refused.value).endswith(f"): {line[:80]!r}")


def test_silence_is_a_timeout_and_the_stream_still_reads_after_it(pair) -> None:
    stream, theirs = pair
    with pytest.raises(TimeoutError):
        stream.receive(0.05)
    theirs.sendall(b'{"event": "ready"}\n')
    assert stream.receive(1.0) == {"event": "ready"}


@pytest.mark.parametrize("partial", [b"", b'{"event": "sam'])
def test_a_peer_that_closes_is_connection_closed(pair, partial: bytes) -> None:
    stream, theirs = pair
    theirs.sendall(partial)
    theirs.close()
    with pytest.raises(ConnectionClosed, match=r"^connection closed$"):
        stream.receive(1.0)


def test_a_message_before_the_close_is_still_read(pair) -> None:
    stream, theirs = pair
    theirs.sendall(b'{"event": "failed", "outcome": "oom"}\n')
    theirs.close()
    assert stream.receive(1.0) == {"event": "failed", "outcome": "oom"}
    with pytest.raises(ConnectionClosed):
        stream.receive(1.0)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"not json", "not JSON ("),
        (b"\xff\xfe", "not JSON ("),
        (b"[1, 2]", "not a JSON object: b'[1, 2]'"),
        (b"42", "not a JSON object: b'42'"),
        (b'"text"', "not a JSON object: b'\"text\"'"),
        (b"null", "not a JSON object: b'null'"),
    ],
)
def test_a_line_that_is_not_a_json_object_is_malformed_and_named(
    pair, line: bytes, said: str
) -> None:
    stream, theirs = pair
    theirs.sendall(line + b'\n{"event": "next"}\n')
    with pytest.raises(MalformedMessage) as refused:
        stream.receive(1.0)
    assert str(refused.value).startswith(said)
    assert str(refused.value).endswith(repr(line))
    assert stream.receive(1.0) == {"event": "next"}  # the line after it is its own


def test_a_malformed_line_is_quoted_to_80_bytes(pair) -> None:
    stream, theirs = pair
    line = b"[" + b"1," * 100 + b"1]"
    theirs.sendall(line + b"\n")
    with pytest.raises(MalformedMessage) as refused:
        stream.receive(1.0)
    assert str(refused.value) == f"not a JSON object: {line[:80]!r}"


@pytest.mark.parametrize(("size", "too_large"), [(99, False), (100, False), (101, True)])
def test_a_line_longer_than_the_limit_ends_the_connection(
    pair, monkeypatch: pytest.MonkeyPatch, size: int, too_large: bool
) -> None:
    monkeypatch.setattr(protocol, "MAX_MESSAGE_BYTES", 100)
    stream, theirs = pair
    theirs.sendall(b"x" * size)  # no newline yet: the stream holds what it has
    if too_large:
        with pytest.raises(ConnectionClosed, match=r"^message too large$"):
            stream.receive(1.0)
    else:
        with pytest.raises(TimeoutError):
            stream.receive(0.05)


def test_sending_to_a_peer_that_is_gone_is_connection_closed(pair) -> None:
    stream, theirs = pair
    theirs.close()
    with pytest.raises(ConnectionClosed) as closed:
        for _ in range(100):  # the first sends may still fit the kernel's buffer
            stream.send({"op": "cycle", "pad": "x" * 65536})
    assert "Broken pipe" in str(closed.value)  # the system's own reason, passed on


def test_a_sent_message_is_one_json_line(pair) -> None:
    stream, theirs = pair
    stream.send({"op": "begin", "batch_size": 4})
    theirs.settimeout(1.0)
    assert theirs.recv(4096) == b'{"op": "begin", "batch_size": 4}\n'


def test_closing_twice_is_harmless(pair) -> None:
    stream, _ = pair
    stream.close()
    stream.close()


specs = st.builds(
    WorkerSpec,
    backend=st.sampled_from(["accelerate", "ds-zero", "an-outside-one"]),
    dtype=st.sampled_from(["fp32", "bf16", "int8"]),
    checkpoint=st.text(max_size=30),
    device=st.sampled_from(["cpu", "cuda"]),
    new_tokens=st.integers(1, 10_000),
    control=st.text(max_size=21),
    options=st.builds(BackendOptions, tp=st.integers(1, 8)),
    memory_limit_bytes=st.none() | st.integers(0, 2**40),
    slowdown_percent=st.none() | st.floats(0, 500),
)


@given(specs)
def test_a_spec_reads_back_as_it_was_written(spec: WorkerSpec) -> None:
    assert WorkerSpec.from_json(spec.to_json()) == spec
    assert WorkerSpec.from_json(spec.to_json().encode()) == spec


def test_a_spec_without_options_gets_the_defaults() -> None:
    data = json.loads(WorkerSpec("accelerate", "fp32", "/m", "cpu", 4, "h:1").to_json())
    for options in (None, {}):
        read = WorkerSpec.from_json(json.dumps({**data, "options": options}))
        assert read.options == BackendOptions()
    del data["options"]
    assert WorkerSpec.from_json(json.dumps(data)).options == BackendOptions()


@pytest.mark.parametrize("where", ["spec", "options"])
def test_a_field_this_version_does_not_know_is_refused(where: str) -> None:
    data = json.loads(WorkerSpec("accelerate", "fp32", "/m", "cpu", 4, "h:1").to_json())
    if where == "spec":
        data["from_the_future"] = 1
    else:
        data["options"]["from_the_future"] = 1
    with pytest.raises(MalformedMessage) as refused:
        WorkerSpec.from_json(json.dumps(data))
    assert str(refused.value).startswith("worker spec: ")
    assert "from_the_future" in str(refused.value)
