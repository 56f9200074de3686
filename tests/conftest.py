"""Fixtures shared by the test files: the blog's baseline and the run made from it.

Both are read from the committed files (``tests.builders`` names them) through bloomperf's own
readers, once per session; they are frozen dataclasses: a test makes its variant with
``dataclasses.replace`` or the builders, never by changing the shared one.
The repository-wide setup (plugins, the leftover-process check) is the root ``conftest.py``.
"""

from __future__ import annotations

import pytest

from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import RunResult
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, BLOG_RESULTS


@pytest.fixture(scope="session")
def blog_baseline() -> Baseline:
    """The blog's 8 x A100-80GB table, as transcribed in ``baselines/``."""
    return load_baseline(BLOG_BASELINE)


@pytest.fixture(scope="session")
def blog_run() -> RunResult:
    """That table as a measured run (``make_fixtures``): medians within ±0.2 % of each figure."""
    return read_results(BLOG_RESULTS)
