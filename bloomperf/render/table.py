"""The blog's table for a run: rows backend + dtype, columns batch sizes, ms/token or OOM."""

from __future__ import annotations

from bloomperf.core.formatting import GIB, format_table, ms_number, table_layout
from bloomperf.store.results import CellResult, Outcome, RunResult

CELL_TEXT = {
    Outcome.OOM: "OOM",
    Outcome.ERROR: "error",
    Outcome.TIMEOUT: "timeout",
    Outcome.SKIPPED: "–",
}


def cell_text(cell: CellResult | None) -> str:
    if cell is None:
        return ""
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return ms_number(cell.ms_per_token)
    return CELL_TEXT.get(cell.outcome, cell.outcome.value)


def efficiency_text(cell: CellResult | None) -> str:
    value = cell.details.get("efficiency_percent") if cell is not None else None
    return f"{value:.0f}%" if isinstance(value, (int, float)) else ""


def render_run_table(run: RunResult) -> str:
    """Plain-text table: ms/token per cell, then load time and peak memory per row."""
    layout, batches = table_layout(run.cells)
    rows: dict[tuple[str, str], dict[int, CellResult]] = {row: {} for row in layout}
    for cell in run.cells:
        rows[(cell.backend, cell.dtype)][cell.batch_size] = cell
    header = ["backend dtype", *(f"bs {b}" for b in batches), "load s", "peak GiB"]
    lines = []
    for (backend, dtype), cells in rows.items():
        # The load that served the row's first cell: a reload after an OOM or error is the
        # restart's, not the row's (the verdict table's load column shows the same one).
        loads = [cells[b].load_time_s for b in sorted(cells) if cells[b].load_time_s is not None]
        peaks = [c.peak_memory_bytes for c in cells.values() if c.peak_memory_bytes is not None]
        lines.append(
            [
                f"{backend} {dtype}",
                *(cell_text(cells.get(b)) for b in batches),
                f"{loads[0]:.2f}" if loads else "",
                f"{max(peaks) / GIB:.2f}" if peaks else "",
            ]
        )
    text = format_table(header, lines, numbers_right=True, rule=True).splitlines()
    title = (
        f"{run.model.name} on {run.topology}: ms/token "
        f"({run.workload.new_tokens} new tokens, median of {run.workload.cycles} cycles)"
    )
    if any("efficiency_percent" in c.details for c in run.cells):
        text += ["", "roofline efficiency (lower bound on ms/token / measured):"]
        for (backend, dtype), cells in rows.items():
            values = "  ".join(f"bs{b} {efficiency_text(cells.get(b))}" for b in batches)
            text.append(f"  {backend} {dtype}: {values}")
    return "\n".join([title, *text])
