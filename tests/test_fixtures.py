"""The committed result fixtures read as what ``make_fixtures`` builds from the blog's baseline.

The files are kept, not rebuilt on every run (pytest-benchmark stamps its own in them); this
keeps them and their generator from drifting apart, read through bloomperf's own readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BENCHMARK, BLOG_RESULTS, BLOG_STORED_RUN, REGRESSED_RUN
from tests.data.results.make_fixtures import blog_run, slower_run


@pytest.mark.parametrize(
    "path", [BLOG_RESULTS, BLOG_BENCHMARK, BLOG_STORED_RUN], ids=lambda p: p.name
)
def test_the_blog_fixtures_hold_the_run_make_fixtures_builds(path: Path) -> None:
    assert read_results(path) == blog_run()


def test_the_regressed_fixture_is_that_run_with_one_cell_slower() -> None:
    assert read_results(REGRESSED_RUN) == slower_run(blog_run())
    assert read_results(REGRESSED_RUN) != blog_run()
