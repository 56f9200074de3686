"""The report's plots of the blog's workload, read back from their figures: peak memory per GPU
against one GPU's capacity, ms/token by batch size with regressed cells ringed, and load time
as bars. The expected figures are worked out here from the cells, not by the plotting code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.backends import backend_class, backend_names, row_label
from bloomperf.catalog.hardware import parse_topology_id
from bloomperf.core.formatting import GIB, format_seconds
from bloomperf.render.report.figure import COLOURS, OOM_COLOUR
from bloomperf.render.report.memory import memory_figure
from bloomperf.render.report.timing import load_time_figure, ms_per_token_figure
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.results import CellResult, MemoryReading, Outcome, RunResult
from tests.builders import scaled_run, tiny_run

ROWS = [(b, d) for b in backend_names() for d in backend_class(b).dtypes]
SIZES = (1, 2, 4, 8, 16, 32)
TOPOLOGIES = ("cpu", "8xA100-SXM4-80GB", "2x4xH100-80GB")


def gpus_of(run: RunResult) -> int:
    """The GPUs a total is spread over: the topology's, when NVML read any figure; none on CPU
    (the process's memory, not divided)."""
    nvml = any(
        r is not None and r.source == "nvml"
        for c in run.cells
        for r in (c.load_memory, c.generate_memory)
    )
    return {"8xA100-SXM4-80GB": 8, "2x4xH100-80GB": 8}.get(run.topology, 0) if nvml else 0


@st.composite
def cells_of_row(draw: Any, row: tuple[str, str], topology: str, devices: bool) -> list[CellResult]:
    sizes = draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=4, unique=True))
    cells = []
    for size in sorted(sizes):
        if draw(st.integers(0, 4)) == 0:
            cells.append(CellResult(*row, size, Outcome.OOM, message="CUDA out of memory"))
            continue
        gib = draw(st.floats(0.5, 70.0))
        if topology == "cpu":
            load = MemoryReading("rss", int(gib * GIB * 0.5))
            generate = MemoryReading("rss", int(gib * GIB))
        else:
            n = 8
            per = tuple(int(draw(st.floats(0.2, 70.0)) * GIB) for _ in range(n)) if devices else ()
            later = tuple(int(b * draw(st.floats(0.5, 1.5))) for b in per)
            load = MemoryReading("nvml", sum(per) or int(gib * GIB * n * 0.5), per)
            generate = MemoryReading("nvml", sum(later) or int(gib * GIB * n), later)
        ms = draw(st.floats(1.0, 500.0))
        cells.append(
            CellResult(
                *row,
                size,
                Outcome.OK,
                (ms * 0.99, ms, ms * 1.01),
                load_time_s=draw(st.one_of(st.none(), st.floats(1.0, 900.0))),
                load_memory=load,
                generate_memory=generate,
            )
        )
    return cells


@st.composite
def runs(draw: Any) -> RunResult:
    topology = draw(st.sampled_from(TOPOLOGIES))
    devices = draw(st.booleans())
    rows = draw(st.lists(st.sampled_from(ROWS), min_size=1, max_size=5, unique=True))
    cells = [cell for row in rows for cell in draw(cells_of_row(row, topology, devices))]
    return replace(tiny_run(*cells), topology=topology)


def baseline_of(run: RunResult, factor: float) -> Baseline:
    return accept_run(scaled_run(run, factor), None, source="t", force=True, now="2026-12-01")


def points(line: Any) -> list[tuple[int, float]]:
    return [(int(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]


def close(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [x for x, _ in a] == [x for x, _ in b] and all(
        abs(u - v) <= 1e-9 * max(1.0, abs(v)) for (_, u), (_, v) in zip(a, b, strict=True)
    )


def row_order(run: RunResult) -> list[tuple[str, str]]:
    """The rows in the order their first cell appears in the results (a row's colour)."""
    return list(dict.fromkeys((c.backend, c.dtype) for c in run.cells))


def of_row(run: RunResult, row: tuple[str, str]) -> list[CellResult]:
    return sorted((c for c in run.cells if (c.backend, c.dtype) == row), key=lambda c: c.batch_size)


def fullest_and_emptiest(cell: CellResult, gpus: int) -> tuple[float, float] | None:
    """A GPU's peak over both phases, for the fullest and the emptiest GPU; the total spread
    evenly where no per-device figure was read."""
    readings = [r for r in (cell.load_memory, cell.generate_memory) if r is not None]
    split = [r.per_device_bytes for r in readings if r.per_device_bytes]
    if split and gpus:
        each = [max(values) for values in zip(*split, strict=True)]
        return max(each) / GIB, min(each) / GIB
    totals = [r.peak_bytes for r in readings if r.peak_bytes is not None]
    if not totals:
        return None
    share = max(totals) / (gpus or 1) / GIB
    return share, share


def legend_texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


# ---- memory -----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(runs(), st.sampled_from([None, 0.8, 1.25]))
def test_memory_is_each_rows_fullest_gpu_against_the_baseline_per_gpu(run, factor):
    baseline = baseline_of(run, 1.0) if factor is None else None
    if factor is not None:
        baseline = baseline_of(run, factor)
    fig = memory_figure(run, baseline)
    (ax,) = fig.axes
    gpus = gpus_of(run)
    lines = {line.get_label(): line for line in ax.get_lines()}
    split = False
    for i, row in enumerate(row_order(run)):
        colour = COLOURS[i % len(COLOURS)]
        figures = [(c.batch_size, fullest_and_emptiest(c, gpus)) for c in of_row(run, row)]
        kept = [(b, f) for b, f in figures if f is not None]
        label = row_label(*row)
        if kept:
            assert close(points(lines[label]), [(b, f[0]) for b, f in kept])
            assert lines[label].get_color() == colour
            split |= any(f[0] != f[1] for _, f in kept)
        else:
            assert label not in lines
    if not gpus:
        assert ax.get_ylabel() == "peak memory of the process (GiB; no GPU)"
        assert ax.get_title() == f"tiny on {run.topology}: peak memory of the process by batch size"
        assert not [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    else:
        assert ax.get_title() == f"tiny on {run.topology}: peak memory per GPU by batch size"
        per_device = any(
            r is not None and r.per_device_bytes
            for c in run.cells
            for r in (c.load_memory, c.generate_memory)
        )
        if per_device:
            assert ax.get_ylabel() == "peak memory of the fullest GPU (GiB)"
            assert "emptiest–fullest GPU" in legend_texts(ax)
        else:
            assert ax.get_ylabel() == f"peak memory per GPU (GiB; the total ÷ {gpus})"
            assert "emptiest–fullest GPU" not in legend_texts(ax)
        assert split <= per_device
        capacity = parse_topology_id(run.topology)[2]
        dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert [float(line.get_ydata()[0]) for line in dotted] == [capacity.memory_bytes / GIB]
        notes = [t.get_text() for t in ax.texts]
        assert f"capacity of one {capacity.name}: {capacity.memory_bytes / GIB:.0f} GiB" in notes
    # From zero, with the highest figure (or a GPU's capacity) inside the axes.
    low, high = ax.get_ylim()
    tallest = max(
        [y for line in ax.get_lines() if line.get_linestyle() in "-:" for y in line.get_ydata()]
        or [0.0]
    )
    assert low == 0.0 and high >= tallest


@settings(max_examples=25, deadline=None)
@given(runs())
def test_the_baseline_is_dashed_beside_its_row_at_its_own_figure_per_gpu(run):
    baseline = baseline_of(run, 0.7)
    fig = memory_figure(run, baseline)
    (ax,) = fig.axes
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    gpus = gpus_of(run)
    expected = []
    for i, row in enumerate(row_order(run)):
        mine = sorted(
            (b for b in baseline.cells if (b.backend, b.dtype) == row and b.peak_memory_bytes),
            key=lambda b: b.batch_size,
        )
        if mine:
            divide = gpus or 1
            expected.append(
                (COLOURS[i], [(b.batch_size, b.peak_memory_bytes / divide / GIB) for b in mine])
            )
    assert len(dashed) == len(expected)
    for line, (colour, wanted) in zip(dashed, expected, strict=True):
        assert line.get_color() == colour and line.get_markerfacecolor() == "none"
        assert close(points(line), wanted)


def test_a_memory_plot_with_oom_cells_keeps_a_band_above_the_figures() -> None:
    row = ("accelerate", "bf16")
    cells = [
        CellResult(*row, 1, Outcome.OK, (5.0,), generate_memory=MemoryReading("rss", 2 * GIB)),
        CellResult(*row, 2, Outcome.OOM, message="out of memory"),
    ]
    ax = memory_figure(tiny_run(*cells), None).axes[0]
    low, high = ax.get_ylim()
    assert low == 0.0 and high > 2 * 1.05
    assert "out of memory" in [t.get_text() for t in ax.texts]
    assert "OOM (measured)" in legend_texts(ax)
    without = memory_figure(tiny_run(cells[0]), None).axes[0]
    assert without.get_ylim() == pytest.approx((0.0, 2 * 1.05))
    assert "out of memory" not in [t.get_text() for t in without.texts]


def test_a_run_without_any_memory_figure_still_has_a_gib_of_axis() -> None:
    cell = CellResult("accelerate", "bf16", 1, Outcome.OK, (5.0,))
    ax = memory_figure(tiny_run(cell), None).axes[0]
    assert ax.get_ylim() == (0.0, 1.0)


# ---- ms/token ---------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(runs(), st.data())
def test_ms_per_token_is_each_rows_line_with_regressed_cells_ringed(run, data):
    ids = [c.id for c in run.cells if c.ms_per_token is not None]
    regressed = frozenset(data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else ())
    baseline = baseline_of(run, 0.8)
    fig = ms_per_token_figure(run, baseline, regressed)
    (ax,) = fig.axes
    lines = ax.get_lines()
    by_label = {line.get_label(): line for line in lines}
    for i, row in enumerate(row_order(run)):
        timed = [(c.batch_size, c.ms_per_token) for c in of_row(run, row) if c.ms_per_token]
        label = row_label(*row)
        if timed:
            line = by_label[label]
            assert close(points(line), timed) and line.get_color() == COLOURS[i % len(COLOURS)]
    rings = [
        line
        for line in lines
        if line.get_markersize() == 16 and line.get_markeredgecolor() == OOM_COLOUR
    ]
    ringed = sorted((int(x), float(y)) for line in rings for x, y in points(line))
    wanted = sorted((c.batch_size, c.ms_per_token) for c in run.cells if c.id in regressed)
    assert close(ringed, wanted)
    assert ("regressed" in legend_texts(ax)) == bool(regressed)
    assert ax.get_ylabel() == "ms per token (lower is better)" and ax.get_yscale() == "log"
    assert ax.get_title() == f"tiny on {run.topology}: ms per token by batch size"
    assert ax.get_xscale() == "log"


# ---- load time --------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(runs(), st.booleans())
def test_load_time_is_a_bar_per_row_at_its_longest_load_beside_the_baseline(run, judged):
    baseline = baseline_of(run, 1.5) if judged else None
    fig = load_time_figure(run, baseline)
    (ax,) = fig.axes
    rows = row_order(run)
    assert [t.get_text() for t in ax.get_yticklabels()] == [row_label(*r) for r in rows]
    measured = ax.containers[0]
    for bar, row in zip(measured, rows, strict=True):
        loads = [c.load_time_s for c in of_row(run, row) if c.load_time_s is not None]
        assert bar.get_width() == pytest.approx(max(loads) if loads else 0.0)
    words = [t.get_text() for t in ax.texts]
    for row in rows:
        loads = [c.load_time_s for c in of_row(run, row) if c.load_time_s is not None]
        assert (format_seconds(max(loads)) if loads else "not measured") in words
    assert ax.get_xlabel() == "model load time (s, lower is better)"
    assert ax.get_title() == f"tiny on {run.topology}: load time"
    assert legend_texts(ax)[0] == "measured"
