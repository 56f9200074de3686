"""`bloomperf baseline show`: the blog's tables of a baseline (ms/token, peak memory, load
times) read back cell by cell, and its JSON form loading back to the same baseline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.render.baseline import render_baseline_json, render_baseline_text
from bloomperf.store.baseline import EXPECT_NOT_RUN, EXPECT_OOM, BaselineCell, LoadTime
from bloomperf.store.baseline.codec import load_baseline
from tests.builders import GiB, cpu_baseline

BATCHES = (1, 4, 16)


def section(text: str, title: str) -> list[str]:
    """The table under ``title``: its header and rows, up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def row_cells(line: str) -> list[str]:
    return [part.strip() for part in line.split("  ") if part.strip()]


@st.composite
def baselines_cells(draw: st.DrawFn) -> list[BaselineCell]:
    cells = []
    for batch in BATCHES:
        outcome = draw(st.sampled_from(["ok", EXPECT_OOM, EXPECT_NOT_RUN]))
        ms = draw(st.none() | st.floats(1.0, 99.0)) if outcome == "ok" else None
        peak = draw(st.none() | st.integers(1, 80).map(lambda g: g * GiB))
        cells.append(BaselineCell("accelerate", "bf16", batch, outcome, ms, peak_memory_bytes=peak))
    return cells


@settings(max_examples=40, deadline=None)
@given(baselines_cells())
def test_the_tables_show_each_cell_s_outcome_and_peak(cells: list[BaselineCell]) -> None:
    text = render_baseline_text(cpu_baseline(*cells))
    assert text.splitlines()[0] == "cpu · tiny · ms per token"
    header, row = text.splitlines()[1:3]
    assert row_cells(header) == ["Solution (dtype)", *(f"Batch {b}" for b in BATCHES)]
    shown = row_cells(row)
    assert shown[0] == "Accelerate bf16"
    for cell, value in zip(cells, shown[1:], strict=True):
        if cell.outcome == EXPECT_NOT_RUN:
            assert value == "–"
        elif cell.outcome == EXPECT_OOM:
            assert value == "OOM"
        elif cell.ms_per_token is None:
            assert value == "ok"
        else:
            number, unit = value.split()
            assert unit == "ms" and float(number) == pytest.approx(cell.ms_per_token, abs=0.01)
    if all(c.peak_memory_bytes is None for c in cells):
        assert "Peak memory" not in text.splitlines()
        return
    memory_header, memory_row = section(text, "Peak memory")
    assert row_cells(memory_header) == row_cells(header)
    peaks = row_cells(memory_row)[1:]
    for cell, value in zip(cells, peaks, strict=True):
        if cell.peak_memory_bytes is None:
            assert value == "–"
        else:
            assert value == f"{cell.peak_memory_bytes // GiB}.00 GiB", value


def test_load_times_show_each_variant_and_tolerance() -> None:
    times = (
        LoadTime("ds-inference", "fp16", "pre-sharded", 20.0, 0.1),
        LoadTime("ds-inference", "fp16", "", 300.0, None),
    )
    cell = BaselineCell("accelerate", "bf16", 1, "ok", 5.0)
    text = render_baseline_text(replace(cpu_baseline(cell), load_times=times))
    header, *rows = section(text, "Model load time")
    assert row_cells(header) == ["Solution", "Load time (s)", "Tolerance"]
    assert [row_cells(r) for r in rows] == [
        ["DeepSpeed-Inference fp16 (pre-sharded)", "20", "±10%"],
        ["DeepSpeed-Inference fp16", "300", "not judged"],
    ]


def test_the_json_form_loads_back_to_the_same_baseline(tmp_path: Path) -> None:
    cells = (
        BaselineCell("accelerate", "bf16", 1, "ok", 5.25, peak_memory_bytes=3 * GiB),
        BaselineCell("accelerate", "bf16", 4, EXPECT_OOM),
    )
    baseline = cpu_baseline(*cells)
    text = render_baseline_json(baseline)
    assert text.endswith("}\n") and text.splitlines()[1].startswith('  "')  # two-space indent
    data = json.loads(text)
    assert [c["ms_per_token"] for c in data["cells"]] == [5.25, None]  # every cell says it
    path = tmp_path / "b.json"
    path.write_text(text)
    assert replace(load_baseline(path), path="") == baseline
    with pytest.raises(ValueError, match="not JSON compliant"):
        render_baseline_json(cpu_baseline(replace(cells[0], ms_per_token=float("nan"))))


def test_the_sections_come_in_order_each_after_one_blank_line() -> None:
    cell = BaselineCell("accelerate", "bf16", 1, "ok", 5.0, peak_memory_bytes=2 * GiB)
    times = (LoadTime("accelerate", "bf16", "", 12.0, 0.2),)
    baseline = replace(cpu_baseline(cell), load_times=times, notes=("first", "second"))
    text = render_baseline_text(baseline)
    assert text.endswith("\n") and not text.endswith("\n\n")
    lines = text.splitlines()
    titles = [lines[i + 1] for i, line in enumerate(lines) if line == ""]
    assert titles == ["Peak memory", "Model load time", "Provenance", "Notes"]
    assert lines[lines.index("Provenance") + 1] == "  p: test; 2026-11-30; cpu"
    assert lines[lines.index("Notes") + 1 :] == ["  - first", "  - second"]
