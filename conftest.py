"""Repository-wide test setup.

Built models are cached in ``.bloomperf-cache/`` inside the checkout (unless BLOOMPERF_CACHE is
set), so the tiny model is built once per clone, not once per test. At the end of the session
the suite asserts that no worker process survived it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("BLOOMPERF_CACHE", str(ROOT / ".bloomperf-cache"))
# Never reach for a model hub from tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def bloomperf_processes() -> list[psutil.Process]:
    """Worker processes still alive below this test process."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "bloomperf.worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def no_stray_workers() -> Iterator[None]:
    yield
    stray = [p for p in bloomperf_processes() if p.is_running()]
    assert not stray, f"worker processes outlived the suite: {[p.pid for p in stray]}"
