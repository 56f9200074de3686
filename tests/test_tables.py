"""The one renderer per table format (text, markdown, HTML) and what each must escape.

A result's message or a package version is text from outside: a ``|`` in it must not open a
markdown column, a ``<`` must not open an HTML tag, and an escape sequence must not reach a
terminal or shift a text column.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.boundaries import BoundaryCheck
from bloomperf.analysis.compare import judge
from bloomperf.cli.bisect import Step, render_steps
from bloomperf.cli.predict import render_checks
from bloomperf.core.formatting import (
    GIB,
    Html,
    format_table,
    html_table,
    markdown_table,
    ms_number,
)
from bloomperf.core.metrics import format_value
from bloomperf.harness.interleave import Settings
from bloomperf.render.comparison import render_comparison
from bloomperf.render.table import render_run_table
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.results import MemoryReading, Outcome
from tests.builders import ok_cell, tiny_run

HOSTILE = "OOM | torch<2.4 & \x1b[31mred\x1b[0m\nnext"


def test_a_text_table_keeps_every_cell_on_its_line_and_its_columns_aligned() -> None:
    text = format_table(["cell", "ms"], [["a", "1.50"], [HOSTILE, "12.25"]], numbers_right=True)
    lines = text.splitlines()
    assert lines == [
        "cell                           ms",
        "a                            1.50",
        "OOM | torch<2.4 & red next  12.25",
    ]


def test_a_text_table_can_underline_its_header() -> None:
    text = format_table(["cell", "ms"], [["bs1", "3.5"]], numbers_right=True, rule=True)
    assert text.splitlines() == ["cell   ms", "----  ---", "bs1   3.5"]


def test_a_bar_in_a_markdown_cell_is_escaped_so_the_row_keeps_its_columns() -> None:
    lines = markdown_table(["what", "value"], [["message", HOSTILE]])
    assert lines[2] == "| message | OOM \\| torch<2.4 & red next |"
    unescaped_bars = [len(re.findall(r"(?<!\\)\|", line)) for line in lines]
    assert unescaped_bars == [3, 3, 3]


def test_a_bisect_step_whose_reason_has_a_bar_stays_in_its_column() -> None:
    steps = [Step("4.44.0", "skipped", message="pip: no matching distribution | torch<2")]
    lines = render_steps(steps, Settings()).splitlines()
    assert (
        lines[2] == "| 4.44.0 | skipped | – | – | – | pip: no matching distribution \\| torch<2 |"
    )
    assert [len(re.findall(r"(?<!\\)\|", line)) for line in lines] == [7, 7, 7]


def test_html_cells_are_escaped_and_only_marked_markup_goes_in_as_it_is() -> None:
    table = html_table(
        ["Package <b>", "Version"],
        [["torch", HOSTILE], ["link", Html('<a href="x.html">x</a>')]],
    )
    assert "<th>Package &lt;b&gt;</th>" in table
    assert "<td>OOM | torch&lt;2.4 &amp; red\nnext</td>" in table
    assert '<td><a href="x.html">x</a></td>' in table
    assert "<b>" not in table and "\x1b" not in table


def test_html_cells_are_coloured_by_the_verdict_they_show() -> None:
    table = html_table(["v"], [["REGRESSED 1.20x"], ["ERROR"], ["2 worse"], ["improved"], ["ok"]])
    cells = re.findall(r"<td[^>]*>[^<]*</td>", table)
    assert cells == [
        '<td class="bad">REGRESSED 1.20x</td>',
        '<td class="bad">ERROR</td>',
        '<td class="bad">2 worse</td>',
        '<td class="good">improved</td>',
        "<td>ok</td>",
    ]


def test_the_predicted_boundary_table_is_a_markdown_table_with_one_column_per_field() -> None:
    checks = [BoundaryCheck("accelerate", "bf16", 8, 16, 4, -1)]
    lines = render_checks(checks, "OOM boundary").splitlines()
    assert lines[2:] == [
        "| backend | dtype | reference: largest batch run (first OOM) | predicted |  |",
        "|---|---|---|---|---|",
        "| accelerate | bf16 | 8 (16) | 4 | 1 step pessimistic |",
    ]


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.tuples(
            st.sampled_from(["ok", "oom", "error"]),
            st.one_of(st.none(), st.floats(0.5, 500.0)),
            st.one_of(st.none(), st.integers(1, 80 * 2**30)),
        ),
        min_size=1,
        max_size=5,
    ),
    order=st.randoms(use_true_random=False),
)
def test_a_rows_load_is_its_first_cells_and_its_peak_the_largest_in_both_tables(
    cells: list[tuple[str, float | None, int | None]], order: random.Random
) -> None:
    """A row loads once; a reload after an OOM or error is the restart's. The run's table shows
    the load of the row's first cell that has one (the verdict table, the first judged one) and
    the largest peak of any cell."""
    built = tuple(
        replace(
            ok_cell(10.0, batch_size=2**i),
            outcome=Outcome(outcome),
            samples_ms_per_token=(10.0,),  # a failed cell's too (an edited or older file)
            load_time_s=load,
            generate_memory=None if peak is None else MemoryReading("nvml", peak),
            load_memory=None,
        )
        for i, (outcome, load, peak) in enumerate(cells)
    )
    run = tiny_run(*order.sample(built, len(built)))  # merged files list cells in any order
    row = render_run_table(run).splitlines()[3]
    loads = [c.load_time_s for c in built if c.load_time_s is not None]
    peaks = [c.peak_memory_bytes for c in built if c.peak_memory_bytes is not None]
    shown = [
        f"{loads[0]:.2f}" if loads else "",
        f"{max(peaks) / GIB:.2f}" if peaks else "",
    ]
    expected = [text for text in shown if text]  # an empty column leaves only spaces
    fields = re.split(r"\s{2,}", row.strip())
    if expected:
        assert fields[-len(expected) :] == expected
    # A cell that did not run shows what happened to it, never a figure.
    words = {"ok": ms_number(10.0), "oom": "OOM", "error": "error"}
    assert fields[1 : 1 + len(built)] == [words[c.outcome.value] for c in built]
    # Against itself as the baseline, so that the verdict table shows its (judged) load: that
    # of the first cell that ran (an OOM cell's figures are not judged).
    verdicts = render_comparison(judge(run, accept_run(run, None, source="x", force=True)))
    judged = [c.load_time_s for c in built if c.load_time_s is not None and c.outcome.value == "ok"]
    if judged:
        assert format_value("load_time", judged[0]) in verdicts
