"""The report's plots of the blog's workload, read back from their figures: peak memory per GPU
against one GPU's capacity, ms/token by batch size with regressed cells ringed, and load time
as bars. The expected figures are worked out here from the cells, not by the plotting code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgb

from bloomperf.backends import backend_class, backend_names, row_label
from bloomperf.catalog.hardware import parse_topology_id
from bloomperf.core.formatting import GIB, format_seconds
from bloomperf.render.report.figure import COLOURS, OOM_COLOUR
from bloomperf.render.report.memory import memory_figure
from bloomperf.render.report.timing import load_time_figure, ms_per_token_figure
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import CellResult, MemoryReading, Outcome, RunResult
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, BLOG_RESULTS, scaled_run, tiny_run

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


def baseline_lines(
    run: RunResult, baseline: Baseline, figure: Callable[[Any], float | None]
) -> list[tuple[str, list[tuple[int, float]]]]:
    """(colour, points) of each row's baseline line: its cells that have the figure, by batch
    size, in the colour of the row's place."""
    lines = []
    for i, row in enumerate(row_order(run)):
        mine = sorted(
            (b for b in baseline.cells if (b.backend, b.dtype) == row and figure(b)),
            key=lambda b: b.batch_size,
        )
        if mine:
            lines.append((COLOURS[i % len(COLOURS)], [(b.batch_size, figure(b)) for b in mine]))
    return lines


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
    divide = gpus_of(run) or 1
    expected = baseline_lines(
        run, baseline, lambda b: b.peak_memory_bytes and b.peak_memory_bytes / divide / GIB
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
    # Each row's baseline, dashed and hollow in its colour, at the baseline's own figures.
    dashed = [line for line in lines if line.get_linestyle() == "--"]
    wanted = baseline_lines(run, baseline, lambda b: b.ms_per_token)
    assert [(line.get_color(), points(line)) for line in dashed] == [
        (colour, [(b, pytest.approx(v)) for b, v in figures]) for colour, figures in wanted
    ]
    assert all(line.get_markerfacecolor() == "none" for line in dashed)
    # Every batch size that ran or that the baseline has a figure for is a tick.
    sizes = {c.batch_size for c in run.cells} | {b for _, figures in wanted for b, _ in figures}
    assert [int(t) for t in ax.get_xticks()] == sorted(sizes)
    values = [v for c in run.cells if (v := c.ms_per_token)] + [
        v for _, figures in wanted for _, v in figures
    ]
    if "out of memory" in [t.get_text() for t in ax.texts]:
        # The figures keep the axes' lower part, with room of a factor 1.3 on either side.
        assert ax.get_ylim()[0] == pytest.approx(min(values) / 1.3)
        (band,) = [p for p in ax.patches if p.get_alpha() == 0.08]
        low, high = min(values) / 1.3, max(values) * 1.3
        assert band.get_y() == pytest.approx(high)
        # On the log axis, the band's share of the height is a share of the decades.
        share = 0.03 + 0.05 * len(row_order(run))
        assert ax.get_ylim()[1] == pytest.approx(low * (high / low) ** (1 / (1 - share)))
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


def oom_marks(ax: Any, marker: str) -> list[tuple[str, list[int]]]:
    """(colour, batch sizes) of each row's OOM marks: crosses measured, rings expected."""
    size = {"X": 11, "o": 14}[marker]
    return [
        (line.get_color(), [int(x) for x in line.get_xdata()])
        for line in ax.get_lines()
        if line.get_marker() == marker and line.get_markersize() == size
    ]


@settings(max_examples=30, deadline=None)
@given(runs(), st.booleans())
def test_each_rows_ooms_are_crossed_and_the_baselines_ringed_in_a_band_above(run, judged):
    baseline = baseline_of(run, 1.0) if judged else None
    timed = any(c.ms_per_token for c in run.cells)
    # A log axis with no figure on it has no height to put a band above: ms/token draws none.
    for figure, band_possible in (
        (memory_figure(run, baseline), True),
        (ms_per_token_figure(run, baseline), timed),
    ):
        (ax,) = figure.axes
        crosses, rings = [], []
        for i, row in enumerate(row_order(run)):
            colour = COLOURS[i % len(COLOURS)]
            ooms = [c.batch_size for c in of_row(run, row) if c.outcome is Outcome.OOM]
            crosses += [(colour, ooms)] if ooms else []
            expected = sorted(
                b.batch_size
                for b in (baseline.cells if baseline else ())
                if (b.backend, b.dtype) == row and b.outcome == "oom"
            )
            rings += [(colour, expected)] if expected else []
        assert oom_marks(ax, "X") == crosses and oom_marks(ax, "o") == rings
        texts = [t.get_text() for t in ax.texts]
        has_band = "out of memory" in texts
        assert has_band == (bool(crosses or rings) and band_possible)
        assert ("OOM (measured)" in legend_texts(ax)) == bool(crosses)
        assert ("OOM (baseline)" in legend_texts(ax)) == bool(rings)


def test_a_band_is_kept_for_an_earlier_rows_oom_and_for_the_baselines_alone() -> None:
    ok = CellResult(
        "accelerate", "bf16", 1, Outcome.OK, (5.0,), generate_memory=MemoryReading("rss", GIB)
    )
    oom = CellResult("accelerate", "bf16", 2, Outcome.OOM, message="out of memory")
    other = replace(ok, backend="ds-inference", dtype="fp16")
    ax = memory_figure(tiny_run(ok, oom, other), None).axes[0]
    assert "out of memory" in [t.get_text() for t in ax.texts]
    assert "OOM (measured)" in legend_texts(ax)
    # The baseline ran out of memory at batch size 2, where this run's cell errored.
    errored = replace(oom, outcome=Outcome.ERROR, message="boom")
    baseline = baseline_of(tiny_run(ok, oom, other), 1.0)
    ax = memory_figure(tiny_run(ok, errored, other), baseline).axes[0]
    assert "out of memory" in [t.get_text() for t in ax.texts]
    assert legend_texts(ax)[-1] == "OOM (baseline)"
    ax = ms_per_token_figure(tiny_run(ok, errored, other), baseline).axes[0]
    assert "out of memory" in [t.get_text() for t in ax.texts]
    assert legend_texts(ax)[-1] == "OOM (baseline)"


@settings(max_examples=25, deadline=None)
@given(runs())
def test_the_gpus_spread_is_shaded_in_the_rows_colour_and_the_axes_read_at_a_glance(run):
    baseline = baseline_of(run, 0.9)
    (ax,) = memory_figure(run, baseline).axes
    gpus = gpus_of(run)
    bands = list(ax.collections)
    expected = []
    for i, row in enumerate(row_order(run)):
        figures = [fullest_and_emptiest(c, gpus) for c in of_row(run, row)]
        kept = [f for f in figures if f is not None]
        readings = [r for c in of_row(run, row) for r in (c.load_memory, c.generate_memory) if r]
        if gpus and any(r.per_device_bytes for r in readings):
            expected.append(
                (COLOURS[i % len(COLOURS)], min(f[1] for f in kept), max(f[0] for f in kept))
            )
    assert len(bands) == len(expected)
    for band, (colour, low, high) in zip(bands, expected, strict=True):
        ys = band.get_paths()[0].vertices[:, 1]
        assert min(ys) == pytest.approx(low) and max(ys) == pytest.approx(high)
        assert tuple(band.get_facecolor()[0]) == pytest.approx((*to_rgb(colour), 0.1))
    if expected:
        (spread,) = [h for h in ax.get_legend().legend_handles if h.get_label().startswith("empt")]
        assert (spread.get_color(), spread.get_linewidth(), spread.get_alpha()) == ("grey", 6, 0.3)
    # The x axis: every batch size of the run and of the baseline's memory figures.
    sizes = {c.batch_size for c in run.cells} | {
        b.batch_size
        for b in baseline.cells
        if b.peak_memory_bytes is not None and (b.backend, b.dtype) in set(row_order(run))
    }
    assert [int(t) for t in ax.get_xticks()] == sorted(sizes)
    assert all(line.get_visible() for line in ax.get_ygridlines())
    assert {line.get_alpha() for line in ax.get_ygridlines()} == {0.3}
    if gpus:
        (capacity,) = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert (capacity.get_color(), capacity.get_linewidth()) == ("black", 1.2)
        (note,) = [t for t in ax.texts if t.get_text().startswith("capacity of one")]
        assert note.xy == (0.01, capacity.get_ydata()[0])
        assert note.xycoords == ("axes fraction", "data")
        assert (note.get_va(), note.get_fontsize()) == ("bottom", 8)


BLOG_RUN = read_results(BLOG_RESULTS)
BLOG = load_baseline(BLOG_BASELINE)


def baseline_load(cells: list[CellResult]) -> float | None:
    """The baseline's load time for a row: the one entry of its backend and dtype (of the
    checkpoint a cell names, where it names one), from the first cell that has one."""
    for cell in cells:
        found = [
            lt for lt in BLOG.load_times if (lt.backend, lt.dtype) == (cell.backend, cell.dtype)
        ]
        variant = cell.details.get("checkpoint")
        if isinstance(variant, str):
            found = [lt for lt in found if lt.variant in (variant, "")]
        if len(found) == 1:
            return found[0].seconds
    return None


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from(BLOG_RUN.cells), min_size=1, unique_by=lambda c: c.id),
    st.floats(0.5, 2.0),
    st.booleans(),
)
def test_load_time_bars_are_measured_above_and_the_baselines_hatched_below(cells, factor, judged):
    run = replace(
        BLOG_RUN,
        cells=tuple(
            replace(c, load_time_s=c.load_time_s * factor if c.load_time_s else None) for c in cells
        ),
    )
    fig = load_time_figure(run, BLOG if judged else None)
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == (9.0, 4.0)
    rows = row_order(run)
    measured = [
        max((c.load_time_s for c in of_row(run, r) if c.load_time_s is not None), default=None)
        for r in rows
    ]
    expected = [baseline_load(of_row(run, r)) if judged else None for r in rows]
    bars = ax.containers
    assert len(bars) == (2 if any(e is not None for e in expected) else 1)
    for i, (bar, m) in enumerate(zip(bars[0], measured, strict=True)):
        assert bar.get_width() == pytest.approx(m or 0.0)
        assert (bar.get_y() + bar.get_height() / 2, bar.get_height()) == pytest.approx(
            (i + 0.2, 0.38)
        )
        assert tuple(bar.get_facecolor()[:3]) == pytest.approx(to_rgb(COLOURS[0]))
    if len(bars) == 2:
        for i, (bar, e) in enumerate(zip(bars[1], expected, strict=True)):
            assert bar.get_width() == pytest.approx(e or 0.0)
            assert bar.get_y() + bar.get_height() / 2 == pytest.approx(i - 0.2)
            assert bar.get_height() == pytest.approx(0.38) and bar.get_hatch() == "//"
            assert bar.get_facecolor()[3] == 0.0  # hollow
            assert tuple(bar.get_edgecolor()[:3]) == pytest.approx(to_rgb("grey"))
    # Each bar's figure just right of its end: measured in black, the baseline's in grey.
    labels = {(t.get_text(), round(t.xy[1], 3)): t for t in ax.texts}
    for i, (m, e) in enumerate(zip(measured, expected, strict=True)):
        text = labels[(format_seconds(m) if m is not None else "not measured", round(i + 0.2, 3))]
        assert text.xy[0] == pytest.approx(m or 0.0)
        assert text.get_color() == ("black" if m is not None else "grey")
        if e is not None:
            below = labels[(format_seconds(e), round(i - 0.2, 3))]
            assert below.xy[0] == pytest.approx(e) and below.get_color() == "grey"
    assert len(ax.texts) == len(rows) + sum(e is not None for e in expected)
    for text in ax.texts:
        assert (text.get_va(), text.get_fontsize(), text.xyann) == ("center", 8, (3, 0))
        assert text.anncoords == "offset points"
    assert legend_texts(ax) == (["measured", "baseline"] if len(bars) == 2 else ["measured"])
    assert ax.get_legend()._loc == 1  # upper right
    assert ax.get_xmargin() == 0.15 and ax.yaxis_inverted()
    assert all(line.get_visible() for line in ax.get_xgridlines())
    assert {line.get_alpha() for line in ax.get_xgridlines()} == {0.3}
    assert not any(line.get_visible() for line in ax.get_ygridlines())
    assert {t.get_fontsize() for t in ax.get_legend().get_texts()} == {8}


def test_a_regressed_cell_is_its_rows_colour_ringed_in_red_on_top() -> None:
    regressed = frozenset({BLOG_RUN.cells[1].id})
    (ax,) = ms_per_token_figure(BLOG_RUN, BLOG, regressed).axes
    inner, ring = [line for line in ax.get_lines() if line.get_zorder() == 4]
    row = row_order(BLOG_RUN).index((BLOG_RUN.cells[1].backend, BLOG_RUN.cells[1].dtype))
    assert inner.get_color() == COLOURS[row] and inner.get_linestyle() == "None"
    assert (inner.get_marker(), ring.get_marker(), ring.get_linestyle()) == ("o", "o", "None")
    assert (ring.get_markersize(), ring.get_markerfacecolor(), ring.get_markeredgewidth()) == (
        16,
        "none",
        2,
    )
    assert (
        points(inner)
        == points(ring)
        == [(BLOG_RUN.cells[1].batch_size, BLOG_RUN.cells[1].ms_per_token)]
    )


def test_a_baseline_figure_at_a_batch_size_the_run_left_out_is_still_a_tick() -> None:
    ran = replace(BLOG_RUN, cells=tuple(c for c in BLOG_RUN.cells if c.batch_size == 1))
    (ax,) = ms_per_token_figure(ran, BLOG).axes
    rows = set(row_order(ran))
    expected = {b.batch_size for b in BLOG.cells if (b.backend, b.dtype) in rows and b.ms_per_token}
    assert len(expected) > 1
    assert [int(t) for t in ax.get_xticks()] == sorted(expected | {1})
