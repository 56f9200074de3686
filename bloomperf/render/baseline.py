"""``bloomperf baseline show``: a baseline as the blog's tables, or as its own JSON."""

from __future__ import annotations

import json

from bloomperf.backends import row_label
from bloomperf.core.formatting import (
    format_gib,
    format_ms,
    format_table,
    plain,
    table_layout,
)
from bloomperf.store.baseline import EXPECT_NOT_RUN, EXPECT_OOM, Baseline, BaselineCell
from bloomperf.store.baseline.codec import baseline_to_dict, whole_number


def baseline_cell_text(c: BaselineCell | None) -> str:
    if c is None or c.outcome == EXPECT_NOT_RUN:
        return "–"
    if c.outcome == EXPECT_OOM:
        return "OOM"
    if c.ms_per_token is None:
        return "ok"
    return format_ms(c.ms_per_token, c.ms_per_token_decimals)


def render_baseline_text(b: Baseline) -> str:
    rows, sizes = table_layout(b.cells)
    header = ["Solution (dtype)", *(f"Batch {s}" for s in sizes)]
    body = [
        [row_label(*row), *(baseline_cell_text(b.cell(*row, s)) for s in sizes)] for row in rows
    ]
    parts = [f"{b.topology} · {b.model} · ms per token", format_table(header, body)]
    if any(c.peak_memory_bytes is not None for c in b.cells):
        memory = [
            [row_label(*row), *(_memory_text(b.cell(*row, s)) for s in sizes)] for row in rows
        ]
        parts += ["", "Peak memory", format_table(header, memory)]
    if b.load_times:
        loads = [
            [
                row_label(lt.backend, lt.dtype) + (f" ({lt.variant})" if lt.variant else ""),
                f"{whole_number(lt.seconds)}",
                _tolerance_text(lt.tolerance),
            ]
            for lt in b.load_times
        ]
        parts += [
            "",
            "Model load time",
            format_table(["Solution", "Load time (s)", "Tolerance"], loads),
        ]
    parts += ["", "Provenance"]
    # A baseline's words are a file's: one inert line each, as every result's message.
    parts += [plain(f"  {p.id}: {p.source}; {p.date}; {p.hardware}") for p in b.provenance]
    if b.notes:
        parts += ["", "Notes"] + [plain(f"  - {n}") for n in b.notes]
    return "\n".join(parts) + "\n"


def _memory_text(c: BaselineCell | None) -> str:
    if c is None or c.peak_memory_bytes is None:
        return "–"
    return format_gib(c.peak_memory_bytes)


def _tolerance_text(tolerance: float | None) -> str:
    return "not judged" if tolerance is None else f"±{tolerance * 100:g}%"


def render_baseline_json(b: Baseline) -> str:
    """The baseline file's own form (so it loads back), every cell with its ``ms_per_token``."""
    data = baseline_to_dict(b)
    for cell in data["cells"]:
        cell.setdefault("ms_per_token", None)
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
