"""The report's latency plots, line by line, for any set of backend and dtype rows: each row's
measured line in its own colour, its baseline dashed and hollow in the same colour, the TPOT
percentile panels three to a line on one shared axis, the titles, labels and legends; and the
notes that stand where a plot is left out. The expected points are read from the cells through
the results store (``latency_to_dict``), not from the plotting code."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.backends import backend_class, backend_names, row_label
from bloomperf.render.report.figure import COLOURS
from bloomperf.render.report.latency import (
    by_batch_figure,
    figure_of,
    flag_lines,
    missing_note,
    rows_of,
    tail_figure,
)
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.results import EnergyReading, RunResult, latency_to_dict
from bloomperf.store.results.files import read_results
from bloomperf.store.telemetry import Telemetry
from tests.builders import RESULTS, scaled_run

BASE = read_results(RESULTS / "cpu.tiny.steps.results.json")
ROWS = [(b, d) for b in backend_names() for d in backend_class(b).dtypes]
PERCENTILES = [("tpot_ms", "p50", "-"), ("tpot_p90_ms", "p90", "--"), ("tpot_p99_ms", "p99", ":")]


@st.composite
def runs(draw: Any) -> RunResult:
    """1 to 7 rows, each the base run's cells of one dtype under another backend and dtype; some
    rows keep only some batch sizes, and a row may have no step times at all (nothing to draw)."""
    rows = draw(st.lists(st.sampled_from(ROWS), min_size=1, max_size=7, unique=True))
    cells = []
    for backend, dtype in rows:
        source = draw(st.sampled_from(["fp32", "bf16", "int8"]))
        own = [c for c in BASE.cells if c.dtype == source]
        kept = draw(st.lists(st.sampled_from(own), min_size=1, unique_by=lambda c: c.batch_size))
        timed = draw(st.booleans()) or not cells  # the first row is timed: a plot is drawn
        for cell in kept:
            cell = replace(cell, backend=backend, dtype=dtype)
            cells.append(cell if timed else replace(cell, samples_step_ms=()))
    return replace(BASE, cells=tuple(cells))


def points_of(run: RunResult, row: tuple[str, str], field: str) -> list[tuple[int, float]]:
    cells = sorted(
        (c for c in run.cells if (c.backend, c.dtype) == row), key=lambda c: c.batch_size
    )
    figures = [(c.batch_size, latency_to_dict(c)[field]) for c in cells]
    return [(b, v) for b, v in figures if v is not None]


def drawn(line: Any) -> list[tuple[int, float]]:
    return [(int(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)]


@settings(max_examples=30, deadline=None)
@given(runs(), st.sampled_from(["ttft_ms", "tpot_ms"]), st.booleans())
def test_each_row_is_a_line_in_its_colour_with_its_baseline_dashed_beside_it(run, field, judged):
    baseline = (
        accept_run(scaled_run(run, 0.7), None, source="t", now="2026-12-01") if judged else None
    )
    fig, series = by_batch_figure(run, baseline, field, "the y label", "the title")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    expected_labels = []
    for i, (label, cells) in enumerate(rows_of(run)):
        row = (cells[0].backend, cells[0].dtype)
        assert label == row_label(*row)
        colour = COLOURS[i % len(COLOURS)]  # a row's colour is its place, drawn or not
        points = points_of(run, row, field)
        if points:
            expected_labels.append(label)
            line = lines[label]
            assert drawn(line) == points and series[label] == points
            assert (line.get_color(), line.get_linestyle(), line.get_marker()) == (colour, "-", "o")
        if baseline is None or not points:
            assert f"{label} (baseline)" not in lines
            continue
        expected_labels.append(f"{label} (baseline)")
        base = lines[f"{label} (baseline)"]
        # The baseline's own figures: the median of each accepted cell's samples.
        accepted = sorted(
            (
                b
                for b in baseline.cells
                if (b.backend, b.dtype) == row and b.figure_samples.get(field)
            ),
            key=lambda b: b.batch_size,
        )
        assert drawn(base) == [
            (b.batch_size, statistics.median(b.figure_samples[field])) for b in accepted
        ]
        assert (base.get_color(), base.get_linestyle(), base.get_marker()) == (colour, "--", "o")
        assert base.get_markerfacecolor() == "none"
    assert [line.get_label() for line in ax.get_lines()] == expected_labels
    assert [text.get_text() for text in ax.get_legend().get_texts()] == expected_labels
    assert ax.get_title() == f"{run.model.name} on {run.topology}: the title"
    assert ax.get_ylabel() == "the y label" and ax.get_xscale() == ax.get_yscale() == "log"
    batches = sorted({b for points in series.values() for b, _ in points})
    assert [int(t) for t in ax.get_xticks()] == batches


@settings(max_examples=30, deadline=None)
@given(runs())
def test_the_percentiles_are_one_panel_per_timed_row_three_to_a_line_on_one_axis(run):
    fig, series = tail_figure(run)
    timed = [
        (label, cells)
        for label, cells in rows_of(run)
        if points_of(run, (cells[0].backend, cells[0].dtype), "tpot_ms")
    ]
    columns = min(3, len(timed))
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == columns * -(-len(timed) // columns)  # whole lines of three at most
    assert len(panels) == len(timed) and panels == fig.axes[: len(timed)]
    for i, ((label, cells), ax) in enumerate(zip(timed, panels, strict=True)):
        row = (cells[0].backend, cells[0].dtype)
        assert ax.get_title() == label
        assert ax.get_ylabel() == ("ms per decode step" if i % columns == 0 else "")
        for line, (field, tag, style) in zip(ax.get_lines(), PERCENTILES, strict=True):
            assert drawn(line) == points_of(run, row, field) == series[f"{label} {tag}"]
            assert line.get_label() == tag and line.get_linestyle() == style
            assert (line.get_color(), line.get_marker()) == (COLOURS[i % len(COLOURS)], "o")
    assert len({ax.get_ylim() for ax in panels}) == 1  # one scale: panels compare by eye
    assert fig.get_suptitle() == (
        f"{run.model.name} on {run.topology}: time per output token, percentiles"
    )
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["p50", "p90", "p99"]
    handles = legend.legend_handles
    assert [(h.get_linestyle(), h.get_marker(), h.get_color()) for h in handles] == [
        (style, "o", "grey") for _, _, style in PERCENTILES
    ]


def test_a_flag_line_per_flagged_cell_naming_each_flag():
    cells = list(BASE.cells[:4])
    cells[0] = replace(cells[0], telemetry=Telemetry(samples=3, flags=("thermal", "power cap")))
    cells[1] = replace(cells[1], telemetry=Telemetry(samples=3))  # telemetry, no flag
    cells[3] = replace(cells[3], telemetry=Telemetry(samples=1, flags=("clocks moved",)))
    run = replace(BASE, cells=tuple(cells))
    assert flag_lines(run) == [
        f"{cells[0].id}: telemetry flags: thermal, power cap",
        f"{cells[3].id}: telemetry flags: clocks moved",
    ]
    assert flag_lines(replace(BASE, cells=BASE.cells[:2])) == []


def test_a_plot_left_out_says_why_in_its_own_words():
    untimed = replace(BASE, cells=tuple(replace(c, samples_step_ms=()) for c in BASE.cells))
    for key in ("ttft", "tpot", "tail"):
        assert missing_note(untimed, key) == (
            "Not drawn: no cell has per-step times (none ran, or the file predates them)."
        )
    unread = replace(BASE, cells=tuple(replace(c, energy=None) for c in BASE.cells))
    assert missing_note(unread, "energy") == (
        "No energy plot: no cell has an energy figure (no energy reading in the results)."
    )
    reasons = ["", "RAPL is not readable here", "NVML failed"]
    cells = [
        replace(c, energy=EnergyReading("unavailable", None, 1.0, 10, reason))
        for c, reason in zip(BASE.cells, reasons, strict=False)
    ]
    read = replace(unread, cells=(*cells, *unread.cells[3:]))
    assert missing_note(read, "energy") == (
        "No energy plot: no cell has an energy figure (RAPL is not readable here)."
    )


def test_a_cell_without_an_energy_reading_has_no_energy_figure():
    cell = BASE.cells[0]
    assert cell.energy is None or figure_of(cell, "j_per_token") == cell.energy.j_per_token
    assert figure_of(replace(cell, energy=None), "j_per_token") is None
    reading = EnergyReading("rapl", 5.0, 1.0, 10)
    assert figure_of(replace(cell, energy=reading), "j_per_token") == reading.j_per_token == 0.5


def test_each_plot_file_is_drawn_with_its_own_title_and_axis_words(tmp_path, monkeypatch):
    """What each PNG shows (the figure as handed to the file writer): the words are the plot's."""
    from bloomperf.render.report import latency

    saved: dict[str, Any] = {}
    monkeypatch.setattr(latency, "save_figure", lambda fig, path: saved.update({path.name: fig}))
    energy = EnergyReading("rapl", 5.0, 1.0, 10)
    run = replace(BASE, cells=tuple(replace(c, energy=energy) for c in BASE.cells))
    plots = latency.write_latency_plots(run, None, tmp_path)
    assert set(plots.paths) == {"ttft", "tpot", "tail", "energy"} and not plots.notes
    words = {
        "ttft.png": ("time to first token by batch size", "ms, prefill step"),
        "tpot.png": ("time per output token", "ms per decode step (median)"),
        "energy_per_token.png": ("energy per token by batch size", "joules per token"),
    }
    for name, (title, ylabel) in words.items():
        (ax,) = saved[name].axes
        assert ax.get_title() == f"{run.model.name} on {run.topology}: {title}"
        assert ax.get_ylabel() == ylabel
    assert (
        saved["tpot_percentiles.png"].get_suptitle().endswith("time per output token, percentiles")
    )


def test_a_plot_left_out_does_not_stop_the_plots_after_it(tmp_path):
    """No step times (the first three left out, each with its note) but an energy figure: the
    energy plot, last, is still drawn."""
    from bloomperf.render.report.latency import write_latency_plots

    energy = EnergyReading("rapl", 5.0, 1.0, 10)
    cells = tuple(replace(c, samples_step_ms=(), energy=energy) for c in BASE.cells)
    plots = write_latency_plots(replace(BASE, cells=cells), None, tmp_path)
    assert set(plots.paths) == {"energy"} and plots.paths["energy"].is_file()
    assert set(plots.notes) == {"ttft", "tpot", "tail"}
