"""How figures, times and tables are written for people: each formatting fact once.

The bottom layer: imports nothing of bloomperf, so every module may use it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

GIB = 2**30
MIB = 2**20

# The blog's names for the rows of its tables.
DISPLAY_NAMES = {
    "accelerate": "Accelerate",
    "ds-inference": "DeepSpeed-Inference",
    "ds-autotp": "DeepSpeed-AutoTP",
    "ds-zero": "DeepSpeed-ZeRO",
}

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
        decimals = 2 if value >= 0.1 or value <= 0 else max(2, 2 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


def format_ms(value: float, decimals: int | None = None) -> str:
    return f"{ms_number(value, decimals)} ms"


def format_gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def format_seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 1000 else f"{value:.0f} s"


def format_value(metric: str, value: float | str | None) -> str:
    """A figure of ``metric`` (ms_per_token, peak_memory, load_time) with its unit."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return value
    if metric == "ms_per_token" or metric.endswith("_ms"):  # also TTFT and TPOT
        return format_ms(value)
    if metric == "peak_memory":
        return format_gib(value)
    return format_seconds(value)


def row_label(backend: str, dtype: str) -> str:
    return f"{DISPLAY_NAMES.get(backend, backend)} {dtype}"


def table_layout(cells: Iterable[Any]) -> tuple[list[tuple[str, str]], list[int]]:
    """Rows (backend, dtype) in the order they first appear, and batch sizes ascending."""
    rows: list[tuple[str, str]] = []
    sizes: set[int] = set()
    for c in cells:
        if (c.backend, c.dtype) not in rows:
            rows.append((c.backend, c.dtype))
        sizes.add(c.batch_size)
    return rows, sorted(sizes)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns separated by at least two spaces, so that single spaces stay inside a cell."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(text.ljust(w) for text, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(text: str) -> str:
        return clean(text).replace("|", "\\|").replace("\n", " ")

    return [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows),
    ]


def clean(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (newlines kept)."""
    return _SURROGATES.sub("\ufffd", _CONTROLS.sub("", _ESCAPES.sub("", text)))
