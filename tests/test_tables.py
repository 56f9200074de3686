"""The one renderer per table format (text, markdown, HTML) and what each must escape.

A result's message or a package version is text from outside: a ``|`` in it must not open a
markdown column, a ``<`` must not open an HTML tag, and an escape sequence must not reach a
terminal or shift a text column.
"""

from __future__ import annotations

import re

from bloomperf.analysis.boundaries import BoundaryCheck
from bloomperf.cli.bisect import Step, render_steps
from bloomperf.cli.predict import render_checks
from bloomperf.core.formatting import Html, format_table, html_table, markdown_table
from bloomperf.harness.interleave import Settings

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
