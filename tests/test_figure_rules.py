"""What every report plot stands on, read back from matplotlib's own objects: the batch-size axis
ticks exactly the sizes that ran, the log axis's ticks, the band above the figures that OOM marks
sit in (its share of the axes, stated here as arithmetic), each row's marks at its own height,
the legend's entries, and a save that never follows a planted link."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.render.report.figure import (
    COLOURS,
    OOM_COLOUR,
    OOM_ROW,
    batch_axis,
    draw_row,
    finish_legend,
    legend_entries,
    log_value_axis,
    new_figure,
    oom_band,
    save_figure,
)


def axes() -> Any:
    return new_figure().add_subplot()


sizes = st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]), unique=True).map(sorted)


@settings(deadline=None)  # matplotlib's first figure takes a while
@given(ran=sizes)
def test_the_batch_axis_ticks_exactly_the_sizes_that_ran(ran: list[int]) -> None:
    ax = axes()
    batch_axis(ax, ran)
    assert (ax.get_xscale(), ax.xaxis.get_scale(), ax.get_xlabel()) == ("log", "log", "batch size")
    assert ax.xaxis._scale.base == 2
    assert list(ax.xaxis.get_major_locator().tick_values(1, 512)) == ran
    assert list(ax.xaxis.get_minor_locator().tick_values(1, 512)) == []
    formatter = ax.xaxis.get_major_formatter()
    assert [formatter(v, 0) for v in ran] == [str(v) for v in ran]
    if ran:  # a margin of a factor 1.4 on each side of a log axis
        assert ax.get_xlim() == pytest.approx((min(ran) / 1.4, max(ran) * 1.4))


@settings(deadline=None)  # matplotlib's first figure takes a while
@given(values=st.lists(st.floats(0.01, 1e4), min_size=1, max_size=6), zero=st.booleans())
def test_the_value_axis_ticks_1_2_5_or_denser_within_a_decade(
    values: list[float], zero: bool
) -> None:
    ax = axes()
    log_value_axis(ax, [*values, *([0.0] if zero else [])], "ms/token")
    narrow = max(values) < 10 * min(values)  # a zero has no place on a log axis
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0)
    locator = ax.yaxis.get_major_locator()
    assert list(locator._subs) == list(subs)
    assert (ax.get_yscale(), ax.get_ylabel()) == ("log", "ms/token")
    assert list(ax.yaxis.get_minor_locator().tick_values(1, 100)) == []
    assert ax.yaxis.get_major_formatter()(0.5, 0) == "0.5"
    assert any(line.get_visible() for line in ax.get_ygridlines())


@settings(deadline=None)  # matplotlib's first figure takes a while
@given(
    low=st.floats(0.1, 100),
    span=st.floats(1.01, 1000),
    rows=st.integers(1, 8),
    log=st.booleans(),
)
def test_the_oom_band_takes_its_share_of_the_axes_above_the_figures(
    low: float, span: float, rows: int, log: bool
) -> None:
    """The figures keep the lower 1 - band of the axes, the band 3 % plus a row's height per
    row: stated as each scale's arithmetic."""
    high = low * span
    ax = axes()
    if log:
        ax.set_yscale("log")
    oom_band(ax, low, high, rows, log)
    bottom, top = ax.get_ylim()
    band = 0.03 + OOM_ROW * rows
    share = math.log(high / low) / math.log(top / low) if log else (high - low) / (top - low)
    assert bottom == low and share == pytest.approx(1 - band)
    (shade,) = ax.patches  # the band itself, shaded
    assert shade.get_facecolor()[3] == pytest.approx(0.08)
    (label,) = ax.texts
    assert label.get_text() == "out of memory" and label.get_color() == OOM_COLOUR
    assert label.xy == pytest.approx((0.005, 1 - band / 2))  # the band's middle
    assert label.xycoords == "axes fraction" and label.get_va() == "center"
    assert all(low <= t <= high for t in ax.get_yticks())  # no amount in the band


@pytest.mark.parametrize("i", [0, 1, 9])
def test_a_rows_marks_sit_at_its_own_height_in_its_own_colour(i: int) -> None:
    ax = axes()
    points, expected = [(1, 5.0), (2, 6.0)], [(1, 4.0), (2, 4.5)]
    drawn = draw_row(ax, i, "accelerate fp16", points, expected, [8], [4, 8])
    assert drawn == {"measured", "baseline", "oom", "oom-baseline"}
    measured, baseline, cross, ring = ax.get_lines()
    colour = COLOURS[i % len(COLOURS)]
    assert all(line.get_color() == colour for line in (measured, baseline, cross, ring))
    assert list(zip(measured.get_xdata(), measured.get_ydata(), strict=True)) == points
    assert (measured.get_label(), measured.get_linestyle(), measured.get_marker()) == (
        "accelerate fp16",
        "-",
        "o",
    )
    assert list(zip(baseline.get_xdata(), baseline.get_ydata(), strict=True)) == expected
    assert (baseline.get_linestyle(), baseline.get_markerfacecolor()) == ("--", "none")
    height = 0.97 - OOM_ROW * i  # a fraction of the axes, below the one before
    assert (list(cross.get_xdata()), list(cross.get_ydata())) == ([8], [height])
    assert (list(ring.get_xdata()), list(ring.get_ydata())) == ([4, 8], [height, height])
    assert (cross.get_marker(), cross.get_markeredgecolor()) == ("X", OOM_COLOUR)
    assert (ring.get_marker(), ring.get_markerfacecolor()) == ("o", "none")
    assert ring.get_markersize() > cross.get_markersize()  # a cross inside a ring shows
    assert not cross.get_clip_on() and cross.get_transform() == ax.get_xaxis_transform()
    assert cross.get_linestyle() == "None" and ring.get_linestyle() == "None"


@settings(deadline=None)  # matplotlib's first figure takes a while
@given(
    parts=st.lists(st.booleans(), min_size=4, max_size=4),
    regressed=st.booleans(),
)
def test_a_row_draws_only_what_it_has_and_the_legend_explains_only_that(
    parts: list[bool], regressed: bool
) -> None:
    ax = axes()
    points, expected, ooms, expected_oom = (
        ([(1, 2.0)] if parts[0] else []),
        ([(1, 3.0)] if parts[1] else []),
        ([2] if parts[2] else []),
        ([4] if parts[3] else []),
    )
    drawn = draw_row(ax, 0, "row", points, expected, ooms, expected_oom)
    keys = ["measured", "baseline", "oom", "oom-baseline"]
    assert drawn == {k for k, part in zip(keys, parts, strict=True) if part}
    assert len(ax.get_lines()) == sum(parts)
    labels = ["measured", "baseline", "OOM (measured)", "OOM (baseline)"]
    entries = legend_entries(drawn | ({"regressed"} if regressed else set()))
    assert [e.get_label() for e in entries] == [
        label for label, part in zip(labels, parts, strict=True) if part
    ] + (["regressed"] if regressed else [])
    assert all(e.get_color() == "grey" for e in entries)
    finish_legend(ax, drawn)
    shown = [t.get_text() for t in ax.get_legend().get_texts()]
    assert shown == (["row"] if parts[0] else []) + [
        label for label, part in zip(labels, parts, strict=True) if part
    ]


def test_the_legend_stands_outside_the_axes_on_the_right_rows_first() -> None:
    ax = axes()
    drawn = draw_row(ax, 0, "accelerate fp16", [(1, 2.0)], [], [4], [])
    extra = legend_entries({"regressed"})
    finish_legend(ax, drawn, extra)
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "accelerate fp16",
        "measured",
        "OOM (measured)",
        "regressed",
    ]
    anchor = legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert (anchor.x0, anchor.y0) == pytest.approx((1.01, 1.0))
    assert legend._loc == 2
    (regressed,) = [h for h in legend.legend_handles if h.get_label() == "regressed"]
    assert (regressed.get_markeredgecolor(), regressed.get_markerfacecolor()) == (
        OOM_COLOUR,
        "none",
    )


def test_a_figure_is_saved_whole_as_png_never_through_a_planted_link(tmp_path: Path) -> None:
    fig = new_figure()
    fig.add_subplot().plot([1, 2], [3, 4])
    assert tuple(fig.get_size_inches()) == (9.0, 5.2) and fig.dpi == 110
    path = tmp_path / "plot.png"
    assert save_figure(fig, path) == path
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]  # no temporary left
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    planted = tmp_path / "planted.png"
    planted.symlink_to(victim)
    with pytest.raises(BloomperfError, match="is a symbolic link; refusing to replace it"):
        save_figure(fig, planted)
    assert victim.read_text() == "keep" and planted.is_symlink()
