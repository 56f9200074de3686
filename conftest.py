"""Repository-wide test setup.

Built models are cached in ``.bloomperf-cache/`` inside the checkout (unless BLOOMPERF_CACHE is
set), so the tiny model is built once per clone, not once per test. At the end of the session
the suite asserts that no process it started survived it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.leftovers import marked_processes

# tests.skips: under CI a skip is a failure unless its one reviewed list allows it.
pytest_plugins = ["pytester", "tests.skips"]

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("BLOOMPERF_CACHE", str(ROOT / ".bloomperf-cache"))
# Never reach for a model hub from tests.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Every process the suite starts inherits this mark, so a leftover is found even after it left
# its parent (re-parented to init, as a worker of a killed controller is).
SESSION_ENV = "BLOOMPERF_TEST_SESSION"
SESSION_MARK = f"{os.getpid()}-{time.time_ns()}"
os.environ[SESSION_ENV] = SESSION_MARK


@pytest.fixture(scope="session", autouse=True)
def no_stray_workers() -> Iterator[None]:
    yield
    stray = marked_processes(SESSION_MARK, env=SESSION_ENV)
    assert not stray, f"processes outlived the suite: {sorted(stray)}"
