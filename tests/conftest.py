"""Fixtures shared by the test files: the blog's baseline and the run made from it.

Both are read from the committed files (``tests.builders`` names them) through bloomperf's own
readers, once per session; they are frozen dataclasses: a test makes its variant with
``dataclasses.replace`` or the builders, never by changing the shared one.
The repository-wide setup (plugins, the leftover-process check) is the root ``conftest.py``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import RunResult
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, BLOG_RESULTS

# Under CI (and the mutation run, which sets CI) every property test draws the same examples:
# a mutant is killed or not by the tests, not by the day's seed, and a busy runner never fails
# a property on hypothesis's deadline.
settings.register_profile("derandomized", derandomize=True, deadline=None, database=None)
if os.environ.get("CI"):
    settings.load_profile("derandomized")


# Files whose verdicts rest on measured time (paired A/B, bisect, A/A noise, planted slowdowns,
# loaded machines): .ci/run runs them alone (-m serial) after the parallel pass (-n 2 -m "not
# serial"), so that another worker's tests never weigh on one arm of their comparisons.
SERIAL_FILES = frozenset(
    {
        "test_ab.py",
        "test_bisect.py",
        "test_calibrate.py",
        "test_contention.py",
        "test_latency.py",
        "test_slowdown.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def blog_baseline() -> Baseline:
    """The blog's 8 x A100-80GB table, as transcribed in ``baselines/``."""
    return load_baseline(BLOG_BASELINE)


@pytest.fixture(scope="session")
def blog_run() -> RunResult:
    """That table as a measured run (``make_fixtures``): medians within ±0.2 % of each figure."""
    return read_results(BLOG_RESULTS)
