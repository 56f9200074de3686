"""The "What changed" section's rules, one by one: which facts an earlier run does not record,
which part of an environment is compared, which baseline entries are compared, and the
section's lines in markdown and HTML, read back line by line."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import Any

import pytest

from bloomperf.catalog.provenance import NOTHING_CHANGED
from bloomperf.render.report.changes import (
    NOTHING_TO_COMPARE,
    WhatChanged,
    html_lines,
    markdown_lines,
    recorded_part,
    unrecorded,
    what_changed_since,
)
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, RESULTS

STEPS = RESULTS / "cpu.tiny.steps.results.json"

# Each fact that explains most steps, as the section names it, and where an environment has it.
FACTS: dict[str, tuple[str, ...]] = {
    "the bloomperf commit": ("provenance", "git", "commit"),
    "driver": ("driver",),
    "CUDA": ("cuda_torch",),
    "NCCL": ("nccl",),
    "torch": ("packages", "torch"),
}


def environment_with(names: tuple[str, ...]) -> dict[str, Any]:
    environment: dict[str, Any] = {}
    for name in names:
        *parents, leaf = FACTS[name]
        place = environment
        for key in parents:
            place = place.setdefault(key, {})
        place[leaf] = f"{leaf}-value"
    return environment


@pytest.mark.parametrize(
    "recorded", [c for n in range(len(FACTS) + 1) for c in combinations(FACTS, n)]
)
def test_each_fact_the_run_has_and_the_earlier_run_lacks_is_named_in_order(
    recorded: tuple[str, ...],
) -> None:
    run = environment_with(tuple(FACTS))
    assert unrecorded(environment_with(recorded), run) == tuple(
        name for name in FACTS if name not in recorded
    )
    # A fact the run itself lacks is never blamed on the earlier run.
    assert unrecorded(environment_with(recorded), environment_with(recorded)) == ()


def test_only_what_both_record_is_compared_and_packages_only_where_both_list_them() -> None:
    environment = {"driver": "1", "nccl": "2", "packages": {"torch": "2.4", "numpy": "2.0"}}
    other = {"driver": "9", "packages": {"torch": "2.5"}}
    assert recorded_part(environment, other) == {"driver": "1", "packages": {"torch": "2.4"}}
    assert recorded_part(environment, {}) == {"packages": {}}
    assert recorded_part({}, other) == {"packages": {}}


ITEMS = [
    WhatChanged("the previous night, 2026-12-01", ("driver: 1 → 2", "torch 2.4 → 2.5")),
    WhatChanged("the baseline x, as measured in run-1", (), ("driver", "CUDA")),
]


def test_the_markdown_section_lists_each_comparison_with_its_lines_and_its_gaps() -> None:
    assert markdown_lines(ITEMS) == [
        "## What changed",
        "",
        "Since the previous night, 2026-12-01:",
        "",
        "- driver: 1 → 2",
        "- torch 2.4 → 2.5",
        "",
        "Since the baseline x, as measured in run-1:",
        "",
        f"- {NOTHING_CHANGED}",
        "",
        "Not recorded there, so not compared: driver, CUDA.",
        "",
    ]
    assert markdown_lines([]) == ["## What changed", "", NOTHING_TO_COMPARE, ""]


def test_the_html_section_lists_each_comparison_with_its_lines_and_its_gaps() -> None:
    assert html_lines(ITEMS) == [
        "<h2>What changed</h2>",
        "<p>Since the previous night, 2026-12-01:</p>",
        "<ul><li>driver: 1 → 2</li><li>torch 2.4 → 2.5</li></ul>",
        "<p>Since the baseline x, as measured in run-1:</p>",
        f"<ul><li>{NOTHING_CHANGED}</li></ul>",
        "<p><small>Not recorded there, so not compared: driver, CUDA.</small></p>",
    ]
    assert html_lines([]) == ["<h2>What changed</h2>", f"<p>{NOTHING_TO_COMPARE}</p>"]


def two_entry_baseline() -> Baseline:
    """The blog's baseline with its ds-zero cells measured in a second entry."""
    blog = load_baseline(BLOG_BASELINE)
    (first,) = blog.provenance
    second = replace(first, id="rerun-ds-zero")
    cells = tuple(
        replace(c, provenance=second.id) if c.backend == "ds-zero" else c for c in blog.cells
    )
    return replace(blog, provenance=(first, second), cells=cells)


@pytest.mark.parametrize(
    ("backends", "entries"),
    [
        ({"accelerate"}, ["hf-blog-2022-09-8xA100-80GB"]),
        ({"ds-zero"}, ["rerun-ds-zero"]),
        ({"accelerate", "ds-zero"}, ["hf-blog-2022-09-8xA100-80GB", "rerun-ds-zero"]),
        ({"no-such-backend"}, ["hf-blog-2022-09-8xA100-80GB", "rerun-ds-zero"]),
    ],
)
def test_a_baseline_entry_is_compared_when_the_run_s_cells_were_measured_in_it(
    backends: set[str], entries: list[str]
) -> None:
    """Only the entries behind the cells the run is judged on; every entry when none matches."""
    baseline = two_entry_baseline()
    cells = tuple(
        CellResult(c.backend, c.dtype, c.batch_size, Outcome.OK, (10.0,))
        for c in baseline.cells
        if c.backend in backends
    ) or (CellResult("no-such-backend", "fp32", 1, Outcome.OK, (10.0,)),)
    run = replace(read_results(STEPS), cells=cells)
    found = what_changed_since(run, [], baseline)
    assert [item.against.rsplit(" ", 1)[-1] for item in found] == entries
