"""The terminal's text rules, stated as properties: tables cut into blocks that fit, columns that
line up, words never split, colour only for a person at a terminal."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.render.terminal import (
    GAP,
    RESET,
    STYLES,
    fit_lines,
    fit_table,
    terminal_width,
    wants_colour,
    wrap,
)

words = st.text(alphabet="abc-/.", min_size=1, max_size=12)
cells = st.text(alphabet="ab1 .", min_size=1, max_size=9).map(str.strip).filter(bool)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]], int, int]:
    n = draw(st.integers(2, 7))
    header = draw(st.lists(cells, min_size=n, max_size=n))
    rows = draw(st.lists(st.lists(cells, min_size=n, max_size=n), max_size=4))
    return header, rows, draw(st.integers(10, 60)), draw(st.integers(1, 2))


@settings(max_examples=80, deadline=None)
@given(tables())
def test_a_table_is_cut_into_blocks_that_fit_and_line_up(
    table: tuple[list[str], list[list[str]], int, int],
) -> None:
    header, rows, width, keep = table
    text = fit_table(header, rows, width, keep=keep)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lead = sum(widths[:keep]) + len(GAP) * keep
    blocks = text.split("\n\n")
    shown: list[int] = []
    for block in blocks:
        lines = block.splitlines()
        assert len(lines) == 1 + len(rows)
        columns = [*range(keep), *[c for c in range(keep, len(header)) if c not in shown]]
        # Each cell starts where its column starts in every line: the widths before it plus gaps.
        ours = []
        used = lead
        for c in columns[keep:]:
            if ours and used + widths[c] > width:
                break
            ours.append(c)
            used += widths[c] + len(GAP)
        starts = {}
        at = 0
        for c in [*range(keep), *ours]:
            starts[c] = at
            at += widths[c] + len(GAP)
        for line, row in zip(lines, [header, *rows], strict=True):
            assert line == line.rstrip()
            for c in [*range(keep), *ours]:
                assert line[starts[c] : starts[c] + len(row[c])] == row[c], (line, c)
            assert len(line) == starts[ours[-1]] + len(row[ours[-1]]) if ours else True
        # It fits, unless one column alone is wider than the terminal.
        if len(ours) > 1:
            assert all(len(line) <= width for line in lines), block
        shown += ours
    assert shown == list(range(keep, len(header)))


def test_colour_paints_the_header_bold_and_each_body_cell_its_style() -> None:
    text = fit_table(
        ["id", "x", "y"], [["a", "1", "2"]], 100, [[None, "regressed", "improved"]], True
    )
    header, body = text.splitlines()
    bold, red, green = STYLES["bold"], STYLES["regressed"], STYLES["improved"]
    assert header == f"{bold}id{RESET}  {bold}x{RESET}  {bold}y{RESET}"
    assert body == f"a   {red}1{RESET}  {green}2{RESET}"
    plain = fit_table(["id", "x", "y"], [["a", "1", "2"]], 100, [[None, "regressed", None]])
    assert "\x1b" not in plain and plain.splitlines()[1] == "a   1  2"


@settings(max_examples=80)
@given(st.lists(words, max_size=12), st.integers(8, 30), st.sampled_from(["", "  "]))
def test_wrap_keeps_every_word_whole_and_in_order(
    parts: list[str], width: int, indent: str
) -> None:
    line = " ".join(parts)
    out = wrap(line, width, indent)
    assert out and " ".join(" ".join(out).split()) == " ".join(line.split())
    assert all(o.startswith(indent) for o in out[1:])
    for o in out:
        assert len(o) <= width or len(o.split()) == 1, out


def test_wrap_breaks_neither_a_long_word_nor_a_hyphen() -> None:
    assert wrap("see /a/very-long-path-name here", 10, "  ") == [
        "see",
        "  /a/very-long-path-name",
        "  here",
    ]
    assert wrap("", 10) == [""]


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "  "]), st.lists(words, min_size=1, max_size=8)),
        min_size=1,
        max_size=5,
    ),
    st.integers(20, 40),
)
def test_fit_lines_wraps_each_long_line_under_its_own_indent(
    lines: list[tuple[str, list[str]]], width: int
) -> None:
    text = "\n".join(indent + " ".join(parts) for indent, parts in lines)
    out = fit_lines(text, width).splitlines()
    assert " ".join(" ".join(out).split()) == " ".join(text.split())
    for line in out:
        assert len(line) <= width or len(line.split()) == 1
    # A line that fits is left as it is; a continuation is indented four more than its line.
    at = 0
    for indent, parts in lines:
        whole = indent + " ".join(parts)
        if len(whole) <= width:
            assert out[at] == whole
            at += 1
            continue
        at += 1
        while at < len(out) and re.match(rf"{indent}    \S", out[at]):
            at += 1
    assert at == len(out)


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("env", "stream", "expected"),
    [
        ({}, Stream(True), True),
        ({}, Stream(False), False),
        ({}, object(), False),  # no isatty at all: a file-like thing, never coloured
        ({"NO_COLOR": "1"}, Stream(True), False),
        ({"TERM": "dumb"}, Stream(True), False),
        ({"TERM": "xterm"}, Stream(True), True),
    ],
)
def test_colour_is_for_a_person_at_a_terminal(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], stream: object, expected: bool
) -> None:
    for name in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert wants_colour(stream) is expected


@pytest.mark.parametrize(("columns", "width"), [("100", 100), ("132", 132), ("12", 40)])
def test_the_width_is_columns_and_never_below_40(
    monkeypatch: pytest.MonkeyPatch, columns: str, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    assert terminal_width() == width


def test_a_line_ends_at_its_last_character_and_starts_at_its_first() -> None:
    """An empty last cell leaves no trailing spaces; a blank first cell keeps its place."""
    assert fit_table(["a", "b"], [["x", ""], ["", "y"]], 100).splitlines() == ["a  b", "x", "   y"]


def test_continuations_are_indented_four_spaces_unless_told() -> None:
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "    ccc"]


def test_a_table_cut_into_blocks_leads_each_with_its_row_labels_by_default() -> None:
    header = ["cell", "a", "b", "c"]
    rows = [["accelerate-bf16-bs1", "10.0", "20.0", "30.0"]]
    blocks = fit_table(header, rows, 34).split("\n\n")  # 19 + 2 + 4 + 2 + 4: two figures
    assert [block.splitlines()[0].split() for block in blocks] == [
        ["cell", "a", "b"],
        ["cell", "c"],
    ]
    assert all(block.splitlines()[1].startswith("accelerate-bf16-bs1") for block in blocks)
