"""What the trend plots draw, read back from the figures' own artists: the history site's page of
one cell (``draw_cell``: a panel per metric, rings on regressed nights, the baseline, changes,
crosses on unfinished nights) and the report's grid of every cell (``draw_trend``: each figure
in per cent of its median on one shared scale). The expected values are worked out here from
the nights as built, not from bloomperf's series or medians."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_hex

from bloomperf.analysis.changes import Change
from bloomperf.analysis.compare import judge
from bloomperf.render.history.trend import (
    BETTER,
    LINE,
    REGRESSED_COLOUR,
    WORSE,
    Topology,
    draw_cell,
    plot_cell,
)
from bloomperf.render.report.figure import COLOURS, OOM_COLOUR
from bloomperf.render.report.trend import draw_trend, plot_trend
from bloomperf.store.baseline import EXPECT_OK, BaselineCell
from bloomperf.store.history.nights import Night
from bloomperf.store.results import CellResult, MemoryReading, Outcome
from tests.builders import cpu_baseline, night, on_night, tiny_run

MIB = 1 << 20
GIB = 1 << 30
CELL = "accelerate-fp32-bs1"
BASE_MS = 10.0  # the baseline's ms/token; 10 % tolerance
BASE_RSS = 2 * GIB  # the baseline's peak; 10 % tolerance


@dataclass(frozen=True)
class Day:
    """One night of the cell: its outcome (None: not run that night), ms/token, memory, load."""

    outcome: Outcome | None
    ms: float = BASE_MS
    rss_mib: float | None = None
    load_s: float | None = None


def cell_of(day: Day) -> CellResult | None:
    if day.outcome is None:
        return None
    if day.outcome is not Outcome.OK:
        return CellResult("accelerate", "fp32", 1, day.outcome, message="stopped")
    memory = MemoryReading("rss", int(day.rss_mib * MIB)) if day.rss_mib is not None else None
    samples = (day.ms * 0.98, day.ms, day.ms * 1.03)  # median: day.ms
    return CellResult(
        "accelerate", "fp32", 1, Outcome.OK, samples, load_time_s=day.load_s, generate_memory=memory
    )


def nights_of(days: list[Day], other: float = 5.0) -> list[Night]:
    """A night per day, each also running another cell (``accelerate-fp32-bs2``)."""
    nights = []
    for i, day in enumerate(days):
        cells = [c for c in [cell_of(day)] if c is not None]
        cells.append(CellResult("accelerate", "fp32", 2, Outcome.OK, (other, other, other)))
        run = on_night(tiny_run(*cells), night(i))
        nights.append(Night(str(night(i)), Path(f"{night(i)}.json"), run))
    return nights


BASELINE = cpu_baseline(
    BaselineCell(
        "accelerate",
        "fp32",
        1,
        EXPECT_OK,
        ms_per_token=BASE_MS,
        ms_per_token_tolerance=0.1,
        peak_memory_bytes=BASE_RSS,
        peak_memory_tolerance=0.1,
    )
)


def topology_of(days: list[Day], changes: list[Change] | None = None) -> Topology:
    nights = nights_of(days)
    verdicts = [judge(n.run, BASELINE) for n in nights]
    return Topology("cpu", nights, changes or [], verdicts, BASELINE)


def change(night_index: int, metric: str, before: float | str, after: float | str) -> Change:
    return Change(CELL, metric, night_index, str(night(night_index)), before, after, 3)


def measured(ax) -> list[float]:
    (line,) = [line for line in ax.get_lines() if line.get_label() == "measured"]
    return list(line.get_ydata())


def labelled(ax, label: str) -> list:
    return [line for line in ax.get_lines() if line.get_label() == label]


def vertical_lines(ax) -> list[tuple[float, str]]:
    """(x, colour) of each line drawn across the axes at one x (``axvline``)."""
    found = []
    for line in ax.get_lines():
        xs = list(line.get_xdata())
        if len(xs) == 2 and xs[0] == xs[1] and list(line.get_ydata()) == [0, 1]:
            found.append((float(xs[0]), to_hex(line.get_color())))
    return found


def same(values: list[float], expected: list[float | None]) -> bool:
    return len(values) == len(expected) and all(
        math.isnan(v) if e is None else v == pytest.approx(e, rel=1e-12)
        for v, e in zip(values, expected, strict=True)
    )


# ---- the history site's trend page of one cell --------------------------------------------------

DAYS = st.lists(
    st.one_of(
        st.builds(
            Day,
            st.just(Outcome.OK),
            st.sampled_from([BASE_MS * 0.95, BASE_MS, BASE_MS * 1.05, BASE_MS * 1.5]),
            st.one_of(st.none(), st.sampled_from([1024.0, 2048.0, 3072.0])),
            st.one_of(st.none(), st.sampled_from([4.0, 9.0])),
        ),
        st.sampled_from([Day(None), Day(Outcome.OOM), Day(Outcome.ERROR), Day(Outcome.SKIPPED)]),
    ),
    min_size=1,
    max_size=19,
).filter(lambda days: any(d.outcome is Outcome.OK for d in days))
# Each kind of night, in 17 nights (a tick every second night): figures in and out of the
# tolerance, memory and load time on some, nights not run, out of memory, failed and skipped.
EVERY_KIND = [
    Day(Outcome.OK, BASE_MS, 2048.0, 9.0),
    Day(None),
    Day(Outcome.OK, BASE_MS * 1.5, 3072.0),
    Day(Outcome.OOM),
    Day(Outcome.OK, BASE_MS * 0.95, None, 4.0),
    Day(Outcome.SKIPPED),
    Day(Outcome.ERROR),
    Day(Outcome.OK, BASE_MS * 1.05, 1024.0, 9.0),
    *[Day(Outcome.OK, BASE_MS)] * 8,
    Day(Outcome.OK, BASE_MS * 1.5, 2048.0, 4.0),
]


@settings(max_examples=10, deadline=None)
@given(days=DAYS)
@example(days=EVERY_KIND)
def test_each_panel_draws_the_cells_figure_of_each_night_and_a_gap_where_it_has_none(
    days: list[Day],
) -> None:
    fig = draw_cell(topology_of(days), CELL)
    ran = [d if d.outcome is Outcome.OK else None for d in days]
    expected = {
        "ms/token": ("ms", [d.ms if d else None for d in ran]),
        "peak memory, of the process (rss)": (
            "GiB",
            [d.rss_mib / 1024 if d and d.rss_mib else None for d in ran],
        ),
        "load time": ("s", [d.load_s if d else None for d in ran]),
    }
    # A panel per metric the cell has a figure of on some night, in the registry's order.
    shown = {k: v for k, v in expected.items() if any(x is not None for x in v[1])}
    axes = fig.axes
    assert [ax.get_title(loc="left") for ax in axes] == list(shown)
    for ax, (unit, ys) in zip(axes, shown.values(), strict=True):
        assert ax.get_ylabel() == unit
        assert same(measured(ax), ys)
        (line,) = labelled(ax, "measured")
        assert list(line.get_xdata()) == list(range(len(days)))
        assert to_hex(line.get_color()) == LINE
        assert (line.get_linestyle(), line.get_marker()) == ("-", "o")  # dots joined by a line
        assert ax.get_xlim() == (-0.5, len(days) - 0.5)  # every panel on the same nights
        # At least ±10 % around the median figure, and every figure inside.
        values = [y for y in ys if y is not None]
        centre = float(np.median(values))
        low, high = ax.get_ylim()
        assert low <= centre * 0.9 + 1e-9 and high >= centre * 1.1 - 1e-9
        assert low < min(values) and high > max(values)
    # The newest night's dates under the last panel: every step-th night, at most about 8.
    step = max(1, len(days) // 8)
    assert list(axes[-1].get_xticks()) == list(range(0, len(days), step))
    labels = [t.get_text() for t in axes[-1].get_xticklabels()]
    assert labels == [str(night(i)) for i in range(0, len(days), step)]
    assert axes[-1].get_xlim() == (-0.5, len(days) - 0.5)
    assert fig.get_suptitle() == f"{CELL} on cpu: {len(days)} nights"


@settings(max_examples=10, deadline=None)
@given(days=DAYS)
@example(days=EVERY_KIND)
def test_rings_mark_exactly_the_nights_judged_regressed_against_the_baseline(
    days: list[Day],
) -> None:
    fig = draw_cell(topology_of(days), CELL)
    ms_axes = fig.axes[0]
    slow = [i for i, d in enumerate(days) if d.outcome is Outcome.OK and d.ms > BASE_MS * 1.1]
    rings = labelled(ms_axes, "regressed vs baseline")
    if slow:
        (ring,) = rings
        assert list(ring.get_xdata()) == slow
        assert list(ring.get_ydata()) == [days[i].ms for i in slow]
        assert to_hex(ring.get_markeredgecolor()) == REGRESSED_COLOUR
        assert ring.get_linestyle() == "None" and ring.get_markerfacecolor() == "none"
    else:
        assert rings == []
    big = [
        i
        for i, d in enumerate(days)
        if d.outcome is Outcome.OK and d.rss_mib is not None and d.rss_mib * MIB > BASE_RSS * 1.1
    ]
    memory = [ax for ax in fig.axes if ax.get_title(loc="left").startswith("peak memory")]
    if memory:
        found = labelled(memory[0], "regressed vs baseline")
        assert [list(r.get_xdata()) for r in found] == ([big] if big else [])
        assert [list(r.get_ydata()) for r in found] == (
            [[days[i].rss_mib / 1024 for i in big]] if big else []  # type: ignore[operator]
        )


@settings(max_examples=10, deadline=None)
@given(days=DAYS)
@example(days=EVERY_KIND)
# Only the memory panel has rings: its legend entry comes after the first panel's marks.
@example(
    days=[Day(Outcome.OK, BASE_MS, 3072.0), Day(Outcome.OOM), Day(Outcome.OK, BASE_MS, 1024.0)]
)
def test_a_cross_and_its_outcome_on_each_night_the_cell_ran_and_did_not_finish(
    days: list[Day],
) -> None:
    fig = draw_cell(topology_of(days), CELL)
    first = fig.axes[0]
    failed = [i for i, d in enumerate(days) if d.outcome in (Outcome.OOM, Outcome.ERROR)]
    crosses = [line for line in first.get_lines() if line.get_marker() == "x"]
    assert [list(c.get_xdata()) for c in crosses] == [[i] for i in failed]
    assert all(to_hex(c.get_color()) == WORSE and list(c.get_ydata()) == [0.04] for c in crosses)
    # At the bottom edge whatever the figures: y in the axes' fraction, x on the night.
    to_axes = first.transAxes.inverted()
    for cross in crosses:
        x, y = cross.get_xdata()[0], cross.get_ydata()[0]
        placed = to_axes.transform(cross.get_transform().transform((x, y)))
        assert placed[1] == pytest.approx(0.04)
    words = [(t.xy, t.get_text()) for t in first.texts]
    assert words == [((i, 0.1), days[i].outcome.value) for i in failed]  # type: ignore[union-attr]
    for word in first.texts:
        assert word.xycoords == ("data", "axes fraction") and to_hex(word.get_color()) == WORSE
        assert word.get_horizontalalignment() == "center"
    assert [ax.get_lines() for ax in fig.axes[1:]] == [
        [line for line in ax.get_lines() if line.get_marker() != "x"] for ax in fig.axes[1:]
    ]
    # One legend entry per kind of mark, below the panels.
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == len(set(texts)) and "measured" in texts
    # The baseline's figure is the newest night's verdict's, so it shows when that night ran.
    if days[-1].outcome is Outcome.OK:
        assert "baseline" in texts
    ok = [d for d in days if d.outcome is Outcome.OK]
    regressed = any(d.ms > BASE_MS * 1.1 or (d.rss_mib or 0) * MIB > BASE_RSS * 1.1 for d in ok)
    kinds = {"measured"}
    kinds |= {"regressed vs baseline"} if regressed else set()
    kinds |= {"did not finish"} if failed else set()
    assert set(texts) - {"baseline"} == kinds
    # Each entry is drawn as its mark is.
    for text, handle in zip(texts, legend.legend_handles, strict=True):
        look = (handle.get_marker(), handle.get_linestyle())
        assert (
            look
            == {
                "measured": ("o", "-"),
                "regressed vs baseline": ("o", "None"),
                "baseline": ("None", ":"),
                "did not finish": ("x", "None"),
            }[text]
        )


def test_drawn_the_legend_lies_below_every_panel_and_a_flat_figure_spans_ten_percent() -> None:
    fig = draw_cell(topology_of(EVERY_KIND), CELL)
    fig.canvas.draw()  # lays the figure out as saving it would
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert all(box.y1 <= ax.get_tightbbox().y0 for ax in fig.axes)  # below the dates too
    for ax in fig.axes:
        for text in ax.texts:  # every word inside its panel
            assert ax.get_window_extent().contains(*text.get_window_extent().get_points()[0])
    flat = draw_cell(topology_of([Day(Outcome.OK, BASE_MS)] * 4), CELL)
    assert flat.axes[0].get_ylim() == pytest.approx((BASE_MS * 0.9, BASE_MS * 1.1))


def test_the_baseline_is_a_line_at_its_figure_on_the_panels_that_have_one() -> None:
    days = [Day(Outcome.OK, BASE_MS, 1024.0, 9.0)] * 3
    fig = draw_cell(topology_of(days), CELL)
    ms, memory, load = fig.axes
    (line,) = labelled(ms, "baseline")
    assert list(line.get_ydata()) == [BASE_MS, BASE_MS] and line.get_linestyle() == ":"
    assert to_hex(line.get_color()) == to_hex("grey")
    (line,) = labelled(memory, "baseline")
    assert list(line.get_ydata()) == [BASE_RSS / GIB] * 2  # in the panel's unit
    assert labelled(load, "baseline") == []  # the baseline gives no load time


def test_each_change_is_a_dashed_line_on_its_night_red_when_worse_green_when_better() -> None:
    days = [Day(Outcome.OK, BASE_MS, 1024.0)] * 6
    changes = [
        change(2, "ms_per_token", 10.0, 12.0),  # slower: worse
        change(3, "peak_memory", float(GIB), 0.5 * GIB),  # smaller: better
        change(4, "outcome", "ok", "oom"),  # stopped running: worse, on every panel
        Change("accelerate-fp32-bs2", "ms_per_token", 1, str(night(1)), 5.0, 9.0, 3),
    ]
    fig = draw_cell(topology_of(days, changes), CELL)
    ms, memory = fig.axes
    assert vertical_lines(ms) == [(2.0, WORSE), (4.0, WORSE)]
    assert vertical_lines(memory) == [(3.0, BETTER), (4.0, WORSE)]
    texts = [t.get_text() for t in ms.texts]
    assert texts == [f"+20% from\n{night(2)}", f"→ oom from\n{night(4)}"]
    assert [t.get_text() for t in memory.texts] == [
        f"-50% from\n{night(3)}",
        f"→ oom from\n{night(4)}",
    ]


def test_memory_on_gpus_is_said_to_be_summed_and_the_newest_reading_names_it() -> None:
    topology = topology_of([Day(Outcome.OK, BASE_MS, 1024.0)] * 2)
    newest = topology.nights[-1]
    gpu = CellResult(
        "accelerate",
        "fp32",
        1,
        Outcome.OK,
        (BASE_MS,) * 3,
        load_memory=MemoryReading("nvml", 3 * GIB),
    )
    other = [c for c in newest.run.cells if c.id != CELL]
    run = on_night(tiny_run(gpu, *other), night(1))
    nights = [topology.nights[0], Night(newest.label, newest.path, run)]
    fig = draw_cell(Topology("cpu", nights, [], topology.verdicts, BASELINE), CELL)
    assert fig.axes[1].get_title(loc="left") == "peak memory, all GPUs summed"
    assert same(measured(fig.axes[1]), [1.0, 3.0])  # the load's peak when generate has none


def test_a_cell_without_a_figure_on_any_night_has_no_plot_and_writes_nothing(
    tmp_path: Path,
) -> None:
    topology = topology_of([Day(Outcome.OOM), Day(None), Day(Outcome.ERROR)])
    assert draw_cell(topology, CELL) is None
    assert plot_cell(topology, CELL, tmp_path / "cell.png") is None
    assert list(tmp_path.iterdir()) == []
    path = plot_cell(topology, "accelerate-fp32-bs2", tmp_path / "other.png")
    assert path == tmp_path / "other.png" and path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


# ---- the report's trend grid of every cell ------------------------------------------------------

FIGURES = st.lists(st.sampled_from([4.0, 5.0, 6.0, 10.0, 12.5]), min_size=1, max_size=17)


@settings(max_examples=10, deadline=None)
@example(first=[4.0, 5.0, 12.5, 6.0, 5.0, 5.0, 10.0, 4.0, 5.0, 6.0, 5.0], cells=6, tolerance=0.2)
@example(first=[5.0, 6.0], cells=5, tolerance=0.05)  # five panels: two rows of four
@example(first=[5.0], cells=4, tolerance=0.05)  # four: one row
@example(first=[5.0, 4.0, 6.0], cells=1, tolerance=0.05)  # one: one column
@given(
    first=FIGURES,
    cells=st.integers(1, 9),
    tolerance=st.sampled_from([0.03, 0.05, 0.2]),
)
def test_the_report_draws_each_cell_in_per_cent_of_its_median_on_one_scale(
    first: list[float], cells: int, tolerance: float
) -> None:
    # Cell k runs batch size k + 1: cell 0 takes the drawn figures, the others a k-step ramp.
    figures = {k: [f if k == 0 else 5.0 + k * (i % 3) for i, f in enumerate(first)]
               for k in range(cells)}  # fmt: skip
    nights = []
    for i in range(len(first)):
        ran = [
            CellResult("accelerate", "fp32", k + 1, Outcome.OK, (figures[k][i],) * 3)
            for k in range(cells)
        ]
        nights.append(Night(str(night(i)), Path("n.json"), on_night(tiny_run(*ran), night(i))))
    fig = draw_trend(nights, [], tolerance)
    columns = 4 if cells > 4 else cells
    rows = math.ceil(cells / columns)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == rows * columns and len(visible) == cells
    percents = {}
    for k, ax in enumerate(visible):
        values = figures[k]
        centre = sorted(values)[len(values) // 2] if len(values) % 2 else (
            (sorted(values)[len(values) // 2 - 1] + sorted(values)[len(values) // 2]) / 2
        )  # fmt: skip
        percents[k] = [(v / centre - 1) * 100 for v in values]
        (line,) = ax.get_lines()
        assert (line.get_linestyle(), line.get_marker()) == ("-", "o")
        assert list(line.get_xdata()) == list(range(len(first)))
        assert list(line.get_ydata()) == pytest.approx(percents[k])
        assert to_hex(line.get_color()) == to_hex(COLOURS[0])
        assert ax.get_title().startswith(f"accelerate-fp32-bs{k + 1} (median ")
        (band,) = ax.patches
        # The tolerance either side, across the panel, in a grey light enough to read through.
        assert to_hex(band.get_facecolor(), keep_alpha=False) == to_hex("grey")
        assert 0 < band.get_alpha() <= 0.2
        box = band.get_bbox()
        assert (box.y0, box.y1) == pytest.approx((-tolerance * 100, tolerance * 100))
        assert (box.x0, box.x1) == (0, 1)
        step = math.ceil(len(first) / 5)
        assert list(ax.get_xticks()) == list(range(0, len(first), step))
        assert [t.get_text() for t in ax.get_xticklabels()] == [
            str(night(i))[5:10] for i in range(0, len(first), step)
        ]
        assert ax.get_xlim() == (-0.5, len(first) - 0.5)
    # One y scale: at least -10 .. +10 %, and every cell's widest reach, with headroom.
    low = min(-10.0, *(p for ps in percents.values() for p in ps))
    high = max(10.0, *(p for ps in percents.values() for p in ps))
    for ax in visible:
        assert ax.get_ylim() == pytest.approx((low * 1.1, high * 1.25))
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "% vs median" if i % columns == 0 else "" for i in range(rows * columns)
    ]
    title = fig.get_suptitle()
    assert title.startswith(f"ms per token over {len(first)} nights ({night(0)} … ")
    assert f"grey band: ±{tolerance * 100:g} %" in title


def test_the_reports_changes_are_marked_on_their_cells_panel_with_their_size() -> None:
    nights = [
        Night(str(night(i)), Path("n.json"), on_night(tiny_run(*cells), night(i)))
        for i, cells in enumerate(
            [[CellResult("accelerate", "fp32", b, Outcome.OK, (ms,) * 3) for b in (1, 2)]
             for ms in (5.0, 5.0, 6.0, 6.0)]
        )
    ]  # fmt: skip
    changes = [
        change(2, "ms_per_token", 5.0, 6.0),
        Change("accelerate-fp32-bs2", "outcome", 3, str(night(3)), "ok", "error", 1),
        Change("accelerate-fp32-bs2", "peak_memory", 1, str(night(1)), 1.0, 2.0, 1),
    ]
    first, second = draw_trend(nights, changes, 0.05).axes
    assert vertical_lines(first) == [(2.0, to_hex(OOM_COLOUR))]
    assert [t.get_text() for t in first.texts] == [f"+20% from\n{night(2)}"]
    assert vertical_lines(second) == [(3.0, to_hex(OOM_COLOUR))]  # not the memory change
    assert [t.get_text() for t in second.texts] == [f"→ error from\n{night(3)}"]
    assert first.get_title() == "accelerate-fp32-bs1 (median 5.50 ms)"


def report_night(i: int, *cells: CellResult, label: str | None = None) -> Night:
    return Night(label or str(night(i)), Path("n.json"), on_night(tiny_run(*cells), night(i)))


def test_a_sweep_draws_its_served_figures_and_a_cell_missing_nights_leaves_them_out() -> None:
    served = [
        CellResult("vllm", "fp32", 1, Outcome.OK, figures={"serving_effective_rps": (rps,)})
        for rps in (2.0, 2.0, 3.0)
    ]
    ms = CellResult("accelerate", "fp32", 1, Outcome.OK, (5.0,) * 3)
    nights = [
        report_night(0, served[0]),
        report_night(1, served[1], ms),
        report_night(2, served[2], ms, label=f"{night(2)}-2"),  # a second run that night
    ]
    fig = draw_trend(nights, [], 0.05)
    plain, sweep = fig.axes
    (line,) = plain.get_lines()
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [0.0, 0.0]
    assert plain.get_title() == "accelerate-fp32-bs1 (median 5.00 ms)"
    assert sweep.get_title().startswith("vllm-fp32-bs1\neffective throughput (median 2")
    (line,) = sweep.get_lines()
    assert list(line.get_ydata()) == pytest.approx([0.0, 0.0, 50.0])
    labels = [t.get_text() for t in sweep.get_xticklabels()]
    assert labels == [str(night(i))[5:10] for i in range(3)]  # the date, not the run's number
    assert fig.get_suptitle().startswith("each cell's figures over 3 nights")


def grid_cell(batch: int, night_index: int, served: bool) -> CellResult:
    if served:  # two panels, each titled on two lines
        figures = {"serving_effective_rps": (2.0 + night_index % 3,),
                   "serving_ttft_p99_ms": (100.0 + night_index,)}  # fmt: skip
        return CellResult("vllm", "fp32", batch, Outcome.OK, figures=figures)
    return CellResult("accelerate", "fp32", batch, Outcome.OK, (5.0 + night_index % 2,) * 3)


@pytest.mark.parametrize(("cells", "served"), [(1, False), (4, False), (6, False), (3, True)])
def test_drawn_the_report_grid_keeps_panels_apart_inside_the_figure_under_its_title(
    cells: int, served: bool
) -> None:
    nights = [
        report_night(i, *(grid_cell(b + 1, i, served) for b in range(cells))) for i in range(9)
    ]
    changes = [change(4, "ms_per_token", 5.0, 8.5)]  # +70 %
    fig = draw_trend(nights, changes, 0.05)
    fig.canvas.draw()
    whole = fig.bbox
    boxes = [ax.get_tightbbox() for ax in fig.axes if ax.get_visible()]
    for box in boxes:  # titles, dates and per cent labels: inside the figure
        assert box.x0 >= whole.x0 - 1 and box.x1 <= whole.x1 + 1
        assert box.y0 >= whole.y0 - 1 and box.y1 <= whole.y1 + 1
    for i, one in enumerate(boxes):
        for other in boxes[i + 1 :]:
            assert not one.overlaps(other)
    title = fig._suptitle.get_window_extent()
    assert all(title.y0 >= box.y1 + 2 for box in boxes)
    assert whole.x0 <= title.x0 and title.x1 <= whole.x1
    if served:
        return
    # The change's line dashed at its night, its label inside the panel just left of it.
    first = fig.axes[0]
    ((x, colour),) = vertical_lines(first)
    (line,) = [line for line in first.get_lines() if list(line.get_xdata()) == [x, x]]
    assert (x, line.get_linestyle()) == (4.0, "--")
    (label,) = first.texts
    assert label.get_text() == f"+70% from\n{night(4)}" and to_hex(label.get_color()) == colour
    assert label.xycoords == ("data", "axes fraction")  # near the top whatever the figures
    at = first.transData.transform((x, 0))[0]
    extent = label.get_window_extent()
    assert at - 12 < extent.x1 <= at
    assert first.get_window_extent().contains(extent.x0, extent.y0)
    assert first.get_window_extent().contains(extent.x1, extent.y1)


def test_the_report_trend_written_is_the_png_of_the_figure_drawn(tmp_path: Path) -> None:
    nights = [report_night(i, grid_cell(1, i, False), grid_cell(2, i, True)) for i in range(3)]
    path = plot_trend(nights, [change(1, "ms_per_token", 5.0, 6.0)], tmp_path / "t.png", 0.2)
    data = path.read_bytes()
    assert path == tmp_path / "t.png" and data.startswith(b"\x89PNG\r\n\x1a\n")
    fig = draw_trend(nights, [change(1, "ms_per_token", 5.0, 6.0)], 0.2)
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png")
    assert data[16:24] == drawn.getvalue()[16:24]  # the PNG's width and height
    assert "grey band: ±20 %" in fig.get_suptitle() and len(fig.axes[0].texts) == 1
