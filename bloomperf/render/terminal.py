"""Text for a terminal: tables cut to its width, long lines wrapped, and colour only where a
person reads it (a terminal without ``NO_COLOR``; never a pipe, a file or a CI log).

A table wider than the terminal is not allowed to wrap mid-cell: its columns after the row
labels are cut into blocks that fit, each block printed under the labels again (as pandas prints
a wide frame). Widths are measured on the plain text; colour is added after padding.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

DEFAULT_WIDTH = 100  # a pipe or a file: the width the output is held to
STYLES = {"regressed": "\x1b[31m", "improved": "\x1b[32m", "dim": "\x1b[2m", "bold": "\x1b[1m"}
RESET = "\x1b[0m"
GAP = "  "  # between columns: single spaces stay inside a cell


def wants_colour(stream: Any) -> bool:
    """Colour for a person at a terminal: not with NO_COLOR (https://no-color.org), not for a
    dumb terminal, never into a pipe or a file."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


def terminal_width() -> int:
    """``COLUMNS``, else the terminal's width, else ``DEFAULT_WIDTH`` (a pipe, a file)."""
    return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def paint(text: str, style: str | None, colour: bool) -> str:
    if not colour or not style or not text:
        return text
    return f"{STYLES[style]}{text}{RESET}"


def fit_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    styles: Sequence[Sequence[str | None]] | None = None,
    colour: bool = False,
    keep: int = 1,
) -> str:
    """The table in blocks of columns no wider than ``width``, the first ``keep`` columns (the
    row labels) leading every block; ``styles[r][c]`` paints body cell (r, c)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    blocks = column_blocks(widths, width, keep)
    parts = []
    for block in blocks:
        columns = [*range(keep), *block]
        lines = [render_line(header, columns, widths, None, colour, "bold")]
        for r, row in enumerate(rows):
            row_styles = styles[r] if styles is not None else None
            lines.append(render_line(row, columns, widths, row_styles, colour, None))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def column_blocks(widths: Sequence[int], width: int, keep: int) -> list[list[int]]:
    """The columns after ``keep`` packed greedily into blocks that fit ``width`` (a column
    wider than that alone gets a block of its own)."""
    lead = sum(widths[:keep]) + len(GAP) * keep
    blocks: list[list[int]] = [[]]
    used = lead
    for i in range(keep, len(widths)):
        needed = widths[i] + len(GAP)
        if blocks[-1] and used + needed - len(GAP) > width:
            blocks.append([])
            used = lead
        blocks[-1].append(i)
        used += needed
    return blocks


def render_line(
    cells: Sequence[str],
    columns: Sequence[int],
    widths: Sequence[int],
    styles: Sequence[str | None] | None,
    colour: bool,
    style_all: str | None,
) -> str:
    out = []
    for i in columns:
        text = str(cells[i])
        style = style_all or (styles[i] if styles is not None else None)
        padded = text.ljust(widths[i]) if i != columns[-1] else text
        out.append(paint(text, style, colour) + padded[len(text) :])
    return GAP.join(out).rstrip()


def wrap(line: str, width: int, indent: str = "    ") -> list[str]:
    """One long line as several, the continuation indented; words are never split."""
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [""]


def fit_lines(text: str, width: int) -> str:
    """Every line of ``text`` no wider than ``width``: a longer one continues on lines indented
    four more than its own."""
    out = []
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        out += wrap(line, width, indent + "    ") if len(line) > width else [line]
    return "\n".join(out)
