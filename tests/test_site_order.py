"""The history site's index puts what needs reading first: a topology whose newest
night fails before one that passes, and in each table the failing cells, then the cells with a
persistent change for the worse, then the rest, each group in the matrix's order."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.cli import main
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_RESULTS, RESULTS, night, on_night, scaled_run

FULL = read_results(BLOG_RESULTS)
# Two backends keep the site small (a trend page per cell); the order rule is the same.
BLOG = replace(FULL, cells=tuple(c for c in FULL.cells if c.backend in ("accelerate", "ds-zero")))
RAN = [c.id for c in BLOG.cells if c.outcome.value == "ok"]


def publish(tmp: Path, slower: list[str]) -> str:
    """A history of two runners (the blog's cells, ``slower`` 30 % slower on the newest night;
    the tiny CPU run), published; the index's text."""
    rng = random.Random(1)
    cpu = read_results(RESULTS / "cpu.tiny.steps.results.json")
    for day in range(2):
        run = scaled_run(BLOG, 1 + rng.uniform(-0.01, 0.01))
        for cell in slower if day == 1 else []:
            run = scaled_run(run, 1.3, cell)
        save_run(on_night(run, night(day)), tmp / "artifacts" / "gpu" / f"{day}.json")
        save_run(on_night(cpu, night(day)), tmp / "artifacts" / "cpu" / f"{day}.json")
    assert main(["history", "merge", str(tmp / "artifacts"), "--history", str(tmp / "h")]) == 0
    argv = ["history", "publish", "--history", str(tmp / "h"), "--out-dir", str(tmp / "site")]
    assert main(argv) == 0
    return (tmp / "site" / "index.html").read_text()


def table_cells(index: str, topology: str) -> list[str]:
    section = index.split(f"<h2 id='{topology}'>", 1)[1].split("<h2", 1)[0]
    return re.findall(r"<tr><td[^>]*>([a-z0-9-]+-bs\d+)</td>", section)


@settings(max_examples=2, deadline=None)
@given(slower=st.lists(st.sampled_from(RAN), min_size=1, max_size=3, unique=True))
def test_failing_cells_and_topologies_come_first(
    slower: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    index = publish(tmp_path_factory.mktemp("site"), slower)
    # The failing GPU topology before the passing CPU one, in the contents and the sections.
    assert index.index("<h2 id='8xA100-SXM4-80GB'>") < index.index("<h2 id='cpu'>")
    cells = table_cells(index, "8xA100-SXM4-80GB")
    assert set(cells[: len(slower)]) == set(slower)
    rest = [c for c in cells if c not in slower]
    assert rest == [c.id for c in BLOG.cells if c.id not in slower]  # the matrix order kept
