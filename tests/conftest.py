"""Fixtures shared by the test files: the blog's baseline and the run made from it.

Both are read from the committed files (``tests.builders`` names them) through bloomperf's own
readers, once per session; they are frozen dataclasses: a test makes its variant with
``dataclasses.replace`` or the builders, never by changing the shared one.
The repository-wide setup (plugins, the leftover-process check) is the root ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import RunResult
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, BLOG_RESULTS

# Under CI (and the mutation run, which sets CI) every property test draws the same examples:
# a mutant is killed or not by the tests, not by the day's seed, and a busy runner never fails
# a property on hypothesis's deadline.
# (The reference profile's venv has no hypothesis: its files state no properties.)
if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import Phase, settings

    settings.register_profile("derandomized", derandomize=True, deadline=None, database=None)
    # The canaries' (tests/canaries/run.py): the same examples, and no shrinking of a failure,
    # since a canary asks only whether its mutant fails the property, not for the least example.
    settings.register_profile(
        "canary", settings.get_profile("derandomized"), phases=[Phase.explicit, Phase.generate]
    )
    if os.environ.get("CI"):
        settings.load_profile("derandomized")


# Files whose verdicts rest on measured time (paired A/B, served or not, bisect, A/A noise,
# planted slowdowns, loaded machines): .ci/run runs them alone (-m serial) after the parallel
# pass (-n 3 -m "not serial and not matrix"), so that another worker's tests never weigh on one
# arm of their comparisons. (Files with real DeepSpeed launches run in the workers: .ci/run
# builds DeepSpeed's CPU op before the tests, so that no launch builds it under a test's
# timeouts.) A test elsewhere that judges measured time carries the mark itself
# (tests/test_serving_ab.py's comparisons).
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
# The benchmark matrix's cells run pytest-benchmark's loop, which turns itself off in a
# pytest-xdist worker: .ci/run runs them in a process of their own (-m matrix). They judge no
# time on a CPU (the tiny baseline sets no ms/token tolerance: outcome and memory only), so that
# process runs beside the canaries rather than in the serial pass.
MATRIX_FILE = "test_bloom_matrix.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
        elif item.path.name == MATRIX_FILE:
            item.add_marker(pytest.mark.matrix)


# bloomperf fits its text to the terminal's width: a CI runner's pseudo-terminal is 80 columns,
# a captured shell none (100). Tests read wrapped lines at one width; a test of another width
# sets COLUMNS itself.
@pytest.fixture(autouse=True)
def terminal_is_100_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")


# What pytest-xdist tells a worker. pytest-benchmark turns itself off in any process that sees
# PYTEST_XDIST_WORKER, so a pytest session a test starts (plugin sessions, in process or not)
# would measure another way than it does alone.
XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def sessions_started_by_a_test_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in XDIST_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def blog_baseline() -> Baseline:
    """The blog's 8 x A100-80GB table, as transcribed in ``baselines/``."""
    return load_baseline(BLOG_BASELINE)


@pytest.fixture(scope="session")
def blog_run() -> RunResult:
    """That table as a measured run (``make_fixtures``): medians within ±0.2 % of each figure."""
    return read_results(BLOG_RESULTS)
