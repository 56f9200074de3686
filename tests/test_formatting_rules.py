"""How figures, tables and refusals are written, each rule against an oracle of its own: the
decimals ms/token gets from the position of its first digit (``decimal``), columns read back at
their offsets, an HTML table read back by Python's own parser, and a refusal's three forms chosen
by the room left on a 100-column line."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bloomperf.core.formatting import (
    LINE_WIDTH,
    UnknownName,
    clean,
    format_ms,
    format_seconds,
    format_table,
    html_table,
    ms_number,
    plain,
    unknown_name,
    utc_now,
)

# ---- figures --------------------------------------------------------------------------------


@given(st.floats(min_value=1e-6, max_value=0.0999, allow_nan=False))
def test_ms_per_token_below_a_tenth_keeps_three_significant_digits(value: float) -> None:
    first_digit = -Decimal(value).adjusted()  # 0.0123 -> 2: its first digit is the 2nd decimal
    assume(Decimal(f"{value:.3g}").adjusted() == -first_digit)  # rounding keeps that digit's place
    text = ms_number(value)
    assert len(text.split(".")[1]) == first_digit + 2
    assert float(text) == pytest.approx(value, abs=10 ** -(first_digit + 2))


@given(st.one_of(st.floats(min_value=0.1, max_value=1e6), st.floats(-1e6, 0.0)))
def test_ms_per_token_from_a_tenth_up_and_at_or_below_zero_has_two_decimals(value: float) -> None:
    assert ms_number(value) == f"{value:.2f}"
    assert format_ms(value) == f"{value:.2f} ms"


@given(st.floats(min_value=1e-6, max_value=1e6), st.integers(0, 6))
def test_decimals_asked_for_are_the_decimals_written(value: float, decimals: int) -> None:
    assert ms_number(value, decimals) == f"{value:.{decimals}f}"
    assert format_ms(value, decimals) == f"{value:.{decimals}f} ms"


@given(st.floats(min_value=0.001, max_value=999.4))
def test_seconds_below_a_thousand_keep_three_significant_digits(value: float) -> None:
    assert format_seconds(value) == f"{value:.3g} s"


@given(st.floats(min_value=1000.0, max_value=1e9))
def test_seconds_from_a_thousand_are_whole_and_never_in_exponent_form(value: float) -> None:
    text = format_seconds(value)
    assert text == f"{value:.0f} s" and "e" not in text


def test_a_thousand_seconds_is_written_out() -> None:
    assert format_seconds(1000.0) == "1000 s"
    assert format_seconds(999.0) == "999 s"


def test_a_time_stamp_is_utc_to_the_second() -> None:
    stamp = utc_now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", stamp)
    moment = dt.datetime.fromisoformat(stamp)
    assert abs((dt.datetime.now(dt.timezone.utc) - moment).total_seconds()) < 60


# ---- text tables ----------------------------------------------------------------------------

words = st.text(st.characters(categories=("Ll", "Nd")), max_size=6)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    width = draw(st.integers(1, 4))
    header = draw(st.lists(words, min_size=width, max_size=width))
    rows = draw(st.lists(st.lists(words, min_size=width, max_size=width), max_size=4))
    return header, rows


@given(tables(), st.booleans())
def test_every_cell_starts_at_its_column_s_offset_and_no_line_ends_in_a_blank(
    table: tuple[list[str], list[list[str]]], numbers_right: bool
) -> None:
    header, rows = table
    lines = format_table(header, rows, numbers_right=numbers_right).split("\n")
    assert len(lines) == 1 + len(rows)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line, cells in zip(lines, [header, *rows], strict=True):
        assert line == line.rstrip()
        padded = line.ljust(sum(widths) + 2 * (len(widths) - 1))
        start = 0
        for i, (text, width) in enumerate(zip(cells, widths, strict=True)):
            field = padded[start : start + width]
            right = numbers_right and i > 0
            assert field == (text.rjust(width) if right else text.ljust(width))
            start += width + 2


def test_columns_are_left_aligned_unless_asked_and_a_rule_underlines_the_header() -> None:
    assert format_table(["a", "bb"], [["ccc", "d"]]) == "a    bb\nccc  d"
    assert format_table(["a", "bb"], [["ccc", "d"]], rule=True) == "a    bb\n---  --\nccc  d"


def test_a_row_longer_than_the_header_is_refused_not_cut() -> None:
    with pytest.raises(ValueError):
        format_table(["a"], [["1", "2"]])


# ---- HTML tables ----------------------------------------------------------------------------


class TableReader(HTMLParser):
    """Reads a table back: header cells, rows of (class, text), and any text outside a cell."""

    def __init__(self) -> None:
        super().__init__()
        self.header: list[str] = []
        self.rows: list[list[tuple[str | None, str]]] = []
        self.stray: list[str] = []
        self.cell: list[str] | None = None
        self.kind: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        if tag in ("th", "td"):
            self.cell, self.kind = [], dict(attrs).get("class")

    def handle_endtag(self, tag: str) -> None:
        if tag == "th" and self.cell is not None:
            self.header.append("".join(self.cell))
        if tag == "td" and self.cell is not None:
            self.rows[-1].append((self.kind, "".join(self.cell)))
        if tag in ("th", "td"):
            self.cell = None

    def handle_data(self, data: str) -> None:
        (self.cell if self.cell is not None else self.stray).append(data)


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@given(
    st.lists(texts, min_size=1, max_size=3),
    st.lists(st.lists(texts, min_size=1, max_size=3), max_size=3),
)
def test_an_html_table_reads_back_cell_for_cell(header: list[str], rows: list[list[str]]) -> None:
    reader = TableReader()
    reader.feed(html_table(header, rows))
    assert reader.header == [clean(h) for h in header]
    assert [[text for _, text in row] for row in reader.rows[1:]] == [
        [clean(c) for c in row] for row in rows
    ]
    assert reader.stray == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("REGRESSED", "bad"),
        ("UNEXPECTED OOM", "bad"),
        ("2 worse", "bad"),
        ("ERROR", "bad"),
        ("TIMEOUT", "bad"),
        ("improved", "good"),
        ("1 better", "good"),
        ("ok", None),
        ("an ERROR in a sentence", None),  # only the outcome itself, not the word in a message
    ],
)
def test_a_cell_is_coloured_by_what_it_says(text: str, kind: str | None) -> None:
    reader = TableReader()
    reader.feed(html_table(["verdict"], [[text]]))
    assert reader.rows[-1] == [(kind, text)]


# ---- untrusted text -------------------------------------------------------------------------


def test_a_line_break_becomes_one_blank_and_a_workflow_command_cannot_form() -> None:
    assert plain("a\rb\nc\td") == "ab c\td"  # a carriage return is a control character
    assert plain("::error::x") == ": :error: :x"
    assert "::" not in plain(":" * 7)


def test_a_lone_surrogate_becomes_one_replacement_character() -> None:
    assert clean("a\ud800b") == "a\ufffdb"


# ---- a refused name, fitted to the line -----------------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyz"
names = st.lists(st.text(LETTERS, min_size=1, max_size=9), min_size=1, max_size=12)


def forms(value: str, valid: list[str]) -> tuple[str, str]:
    shown = repr(value if len(value) <= 12 else value[:11] + "…")
    listed = valid[0] if len(valid) == 1 else ", ".join(valid[:-1]) + " or " + valid[-1]
    return f"unknown value {shown} (valid: {', '.join(valid)})", f"{shown} is not {listed}"


@given(st.text(LETTERS, max_size=20), names, st.integers(0, 99))
def test_a_refusal_takes_the_first_form_that_fits_the_line(
    value: str, valid: list[str], used: int
) -> None:
    first, second = forms(value, valid)
    text = unknown_name(value, valid, used)
    if used + len(first) <= LINE_WIDTH:
        assert text == first
    elif used + len(second) <= LINE_WIDTH:
        assert text == second
    else:
        shown = repr(value if len(value) <= 12 else value[:11] + "…")
        count = "1 valid one" if len(valid) == 1 else f"{len(valid)} valid ones"
        assert text == f"unknown value {shown} ({count}: see --help)"
    assert UnknownName(value, valid).fit(used) == text


@pytest.mark.parametrize("extra", [0, 1])
def test_the_first_form_fits_exactly_to_the_last_column(extra: int) -> None:
    # 30 columns are taken by default ("bloomperf: error: --backends: "): the list fills the rest.
    valid = ["a" * (LINE_WIDTH - 30 - len("unknown value 'x' (valid: )") + extra)]
    first, second = forms("x", valid)
    assert unknown_name("x", valid) == (first if extra == 0 else second)
    assert str(UnknownName("x", valid)) == unknown_name("x", valid)


def test_a_long_value_is_cut_to_eleven_characters_and_an_ellipsis() -> None:
    assert unknown_name("abcdefghijkl", ["a"]) == "unknown value 'abcdefghijkl' (valid: a)"
    assert unknown_name("abcdefghijklm", ["a"]) == "unknown value 'abcdefghijk…' (valid: a)"
    assert unknown_name("x", ["a"] * 40, 0, where="see docs") == (
        "unknown value 'x' (40 valid ones: see docs)"
    )
    # One name too long for the line: counted in the singular.
    assert unknown_name("x", ["a" * 90], 0) == "unknown value 'x' (1 valid one: see --help)"


@pytest.mark.parametrize(
    ("valid", "listed"), [(["a"], "a"), (["a", "b"], "a or b"), (["a", "b", "c"], "a, b or c")]
)
def test_the_second_form_lists_the_names_with_or_before_the_last(
    valid: list[str], listed: str
) -> None:
    text = f"'x' is not {listed}"
    assert unknown_name("x", valid, LINE_WIDTH - len(text)) == text
