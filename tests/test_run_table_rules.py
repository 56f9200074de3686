"""The run's table (`bloomperf run`'s summary, the blog's layout), read back by a parser written
from what the table promises: a row per backend and dtype, a column per batch size with
ms/token or the outcome, the row's first load and its highest peak, numbers right-aligned, and
the roofline efficiency under it when cells carry one."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.core.formatting import ms_number
from bloomperf.store.results import CellResult, MemoryReading, Outcome
from tests.builders import GiB, tiny_run

WORDS = {Outcome.OOM: "OOM", Outcome.ERROR: "error", Outcome.TIMEOUT: "timeout"}
WORDS[Outcome.SKIPPED] = "–"


@st.composite
def cells_of_a_row(draw: st.DrawFn, backend: str, dtype: str) -> list[CellResult]:
    batches = draw(st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=1, max_size=4, unique=True))
    cells = []
    for batch in sorted(batches):
        outcome = draw(st.sampled_from(list(Outcome)))
        ms = draw(st.floats(0.5, 900.0)) if outcome is Outcome.OK else None
        load = draw(st.none() | st.floats(0.1, 99.0))
        peak = draw(st.none() | st.integers(1, 80 * GiB))
        efficiency = draw(st.none() | st.floats(1.0, 99.0))
        cells.append(
            CellResult(
                backend,
                dtype,
                batch,
                outcome,
                (ms,) if ms is not None else (),
                load_time_s=load,
                generate_memory=MemoryReading("rss", peak) if peak is not None else None,
                details={} if efficiency is None else {"efficiency_percent": efficiency},
            )
        )
    return cells


def expected_text(cell: CellResult | None) -> str:
    if cell is None:
        return ""
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return ms_number(cell.ms_per_token)
    return WORDS.get(cell.outcome, cell.outcome.value)


@settings(max_examples=60, deadline=None)
@given(cells_of_a_row("accelerate", "bf16"), cells_of_a_row("ds-zero", "fp16"))
def test_each_row_shows_its_cells_first_load_and_highest_peak(
    first: list[CellResult], second: list[CellResult]
) -> None:
    run = tiny_run(*first, *second)
    batches = sorted({c.batch_size for c in run.cells})
    lines = render(run)
    assert lines[0] == "tiny on cpu: ms/token (20 new tokens, median of 3 cycles)"
    header, rule, *body = lines[1:5]
    names = ["backend dtype", *(f"bs {b}" for b in batches), "load s", "peak GiB"]
    assert [part.strip() for part in header.split("  ") if part.strip()] == names
    assert set(rule) <= {"-", " "}
    starts = column_ends(header, names)
    for line, row in zip(body, (first, second), strict=True):
        by_batch = {c.batch_size: c for c in row}
        loads = [c.load_time_s for c in row if c.load_time_s is not None]
        peaks = [c.peak_memory_bytes for c in row if c.peak_memory_bytes is not None]
        wanted = [
            f"{row[0].backend} {row[0].dtype}",
            *(expected_text(by_batch.get(b)) for b in batches),
            f"{loads[0]:.2f}" if loads else "",
            f"{max(peaks) / GiB:.2f}" if peaks else "",
        ]
        assert line.startswith(wanted[0] + " ")
        # Every figure ends where its column's header ends: numbers are right-aligned.
        for (end, name), text in zip(starts[1:], wanted[1:], strict=True):
            if text:
                assert line[end - len(text) : end] == text, (line, name, text)
            else:
                assert line[end - len(name) : end].strip() == "", (line, name)
    efficiency = [c for c in run.cells if "efficiency_percent" in c.details]
    tail = lines[5:]
    if not efficiency:
        assert tail == []
        return
    assert tail[:2] == ["", "roofline efficiency (lower bound on ms/token / measured):"]
    for line, row in zip(tail[2:], (first, second), strict=True):
        by_batch = {c.batch_size: c for c in row}
        parts = []
        for b in batches:
            value = by_batch[b].details.get("efficiency_percent") if b in by_batch else None
            parts.append(f"bs{b} {value:.0f}%" if value is not None else f"bs{b} ")
        assert line == f"  {row[0].backend} {row[0].dtype}: " + "  ".join(parts)


def render(run: object) -> list[str]:
    from bloomperf.render.table import render_run_table

    return render_run_table(run).splitlines()  # type: ignore[arg-type]


def column_ends(header: str, names: list[str]) -> list[tuple[int, str]]:
    ends, at = [], 0
    for name in names:
        at = header.index(name, at) + len(name)
        ends.append((at, name))
    return ends


def test_a_cell_s_load_is_the_row_s_first_load_not_a_reload() -> None:
    first = CellResult("accelerate", "bf16", 1, Outcome.OK, (5.0,), load_time_s=12.5)
    reloaded = replace(first, batch_size=4, load_time_s=99.0)
    line = render(tiny_run(reloaded, first))[3]
    assert line.split()[-1] == "12.50" and "99.00" not in line


def test_a_cell_that_ran_without_a_figure_says_ok() -> None:
    from bloomperf.render.table import cell_text

    assert cell_text(CellResult("accelerate", "bf16", 1, Outcome.OK)) == "ok"
    assert cell_text(None) == ""
