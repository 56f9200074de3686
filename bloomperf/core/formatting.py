"""How figures, times and tables are written for people: each formatting fact once.

The bottom layer: imports nothing of bloomperf, so every module may use it.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

GIB = 2**30
MIB = 2**20

# CSI / OSC escape sequences and the other C0/C1 controls a hostile message could carry to a
# terminal or a report; tabs and newlines are kept where text may span lines.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A lone surrogate (from a JSON "\ud800") cannot be encoded to print: shown as U+FFFD.
_SURROGATES = re.compile(r"[\ud800-\udfff]")


def utc_now() -> str:
    """The time stamps stored in results and baselines: ``2026-11-30T21:05:09+00:00``."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def ms_number(value: float, decimals: int | None = None) -> str:
    """ms/token as the blog prints it: given decimals, else 2 (3 significant below 0.1)."""
    if decimals is None:
        # Below 0.1 the first digit is the 2nd decimal or later: 2 more keep 3 significant.
        decimals = 2 if value >= 0.1 or value <= 0 else 2 - math.floor(math.log10(value))
    return f"{value:.{decimals}f}"


def format_ms(value: float, decimals: int | None = None) -> str:
    return f"{ms_number(value, decimals)} ms"


def format_gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def format_seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 1000 else f"{value:.0f} s"


def table_layout(cells: Iterable[Any]) -> tuple[list[tuple[str, str]], list[int]]:
    """Rows (backend, dtype) in the order they first appear, and batch sizes ascending."""
    rows: list[tuple[str, str]] = []
    sizes: set[int] = set()
    for c in cells:
        if (c.backend, c.dtype) not in rows:
            rows.append((c.backend, c.dtype))
        sizes.add(c.batch_size)
    return rows, sorted(sizes)


def format_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    numbers_right: bool = False,
    rule: bool = False,
) -> str:
    """Columns separated by at least two spaces, so that single spaces stay inside a cell.

    ``numbers_right`` right-aligns every column after the first (columns of figures);
    ``rule`` underlines the header with dashes.
    """
    table = [[_one_line(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            text.rjust(w) if numbers_right and i else text.ljust(w)
            for i, (text, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [line(r) for r in table]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A pipe table; each cell is ``markdown_text``: a ``|`` cannot open a column, nor a ``<``
    raw HTML."""

    cell = markdown_text
    return [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows),
    ]


@dataclass(frozen=True)
class Html:
    """A table cell that is already HTML (a link): put into ``html_table`` as it is."""

    markup: str


def html_table(header: Sequence[str], rows: Sequence[Sequence[str | Html]]) -> str:
    """An HTML table; text cells are escaped, and coloured by what they say."""

    def cell(value: str | Html) -> str:
        if isinstance(value, Html):
            return f"<td>{value.markup}</td>"
        return f"<td{_verdict_class(value)}>{html.escape(clean(value))}</td>"

    head = "".join(f"<th>{html.escape(clean(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_FAILED_RUNS = ("ERROR", "TIMEOUT")


def _verdict_class(text: str) -> str:
    """Red for a failed verdict or a change for the worse, green for an improvement."""
    if "REGRESSED" in text or "UNEXPECTED" in text or "worse" in text or text in _FAILED_RUNS:
        return ' class="bad"'
    return ' class="good"' if "improved" in text or "better" in text else ""


def _one_line(text: str) -> str:
    return plain(text)


# A line whose text starts with "::" is a workflow command to a GitHub Actions runner (after
# leading blanks): text read from a file never carries a "::" pair, wherever it ends up.
_COMMAND = re.compile(r":(?=:)")
# What CommonMark / GitHub markdown would turn into a link, a code span or a new table column,
# and a "<" that could open raw HTML or an autolink (one before a letter, "/", "!" or "?"; a
# "torch<2.4" stays as it is). Emphasis is harmless and stays readable.
_MARKDOWN = re.compile(r"([\\`\[\]|]|<(?=[A-Za-z/!?]))")


def plain(text: str) -> str:
    """Untrusted text (a cell's message, a name from a file) as one inert line: no escape
    sequence, control character or line break, and never a workflow command."""
    # ``clean`` has already dropped a carriage return, a control character like the others.
    return _COMMAND.sub(": ", clean(text).replace("\n", " "))


def markdown_text(text: str) -> str:
    """Untrusted text for a markdown page: ``plain``, with every character that markdown reads
    as markup or HTML backslash-escaped (it shows as itself)."""
    return _MARKDOWN.sub(r"\\\1", plain(text))


def clean(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (newlines kept)."""
    return _SURROGATES.sub("\ufffd", _CONTROLS.sub("", _ESCAPES.sub("", text)))


# A terminal line's width: every line bloomperf prints fits it (a usage error included).
LINE_WIDTH = 100


def unknown_name(
    value: str, valid: Sequence[str], used: int = 30, where: str = "see --help"
) -> str:
    """Why ``value`` is refused, naming the valid ones in as many columns as a line has left
    after ``used`` (the prefix the message will get, e.g. ``bloomperf: error: --backends: ``):
    "(valid: a, b, c)", else "is not a, b or c", else their count and ``where`` they are
    listed. The value is shortened: a user's typo is not to push the valid names off the line."""
    shown = value if len(value) <= 12 else value[:11] + "…"
    names = list(valid)
    listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    for text in (
        f"unknown value {shown!r} (valid: {', '.join(names)})",
        f"{shown!r} is not {listed}",
    ):
        if used + len(text) <= LINE_WIDTH:
            return text
    count = "1 valid one" if len(names) == 1 else f"{len(names)} valid ones"
    return f"unknown value {shown!r} ({count}: {where})"


class UnknownName(ValueError):
    """A parser's refusal of a name, fitted to the line again (``fit``) by whoever knows the
    prefix it gets (argparse adds ``bloomperf predict: error: argument --backends: ``)."""

    def __init__(self, value: str, valid: Sequence[str]) -> None:
        self.value, self.valid = value, tuple(valid)
        super().__init__(unknown_name(value, valid))

    def fit(self, used: int) -> str:
        return unknown_name(self.value, self.valid, used)
