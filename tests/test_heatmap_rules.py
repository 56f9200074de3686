"""The report's heatmap, square by square, for any comparison: what each square says and its
colour (a cell without figures shows its status across its row, a metric its comparison does
not cover a dash, a figure without a baseline its status, a ratio with ``*`` when not judged),
where the text stands, and how it is set (white on the error red, bold on red). The expected
square is worked out here from the verdicts, not by the module's ``cell_text``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_rgba

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME
from bloomperf.analysis.verdicts import (
    CELL_STATUSES,
    ERROR,
    NO_BASELINE,
    NOT_JUDGED,
    NOT_MEASURED,
    TIMEOUT,
    UNEXPECTED_OOM,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.core.metrics import label_of, metric_names
from bloomperf.render.report.heatmap import COLOURS, OTHER, ratio_heatmap

JUDGED = (SAME, REGRESSED, IMPROVED)
METRIC_STATUSES = (*JUDGED, NO_BASELINE, NOT_MEASURED, NOT_JUDGED)
RED_STATUSES = (UNEXPECTED_OOM, ERROR, TIMEOUT)  # each drawn in the one error red


def expected_square(cell: CellVerdict, metric: str) -> tuple[str, str]:
    """(text, colour) of a square, from the verdicts alone."""
    verdict = next((m for m in cell.metrics if m.metric == metric), None)
    if not cell.metrics:
        return cell.status, COLOURS.get(cell.status, OTHER)
    if verdict is None:
        return "–", OTHER
    if verdict.measured is None or verdict.expected in (None, 0):
        return verdict.status, OTHER
    assert verdict.expected is not None
    text = f"{verdict.measured / verdict.expected:.2f}×"
    if verdict.status not in JUDGED:
        return text + "*", OTHER
    return text, COLOURS[verdict.status]


figures = st.one_of(st.none(), st.floats(0.01, 1e4), st.just(0.0))
metric_verdicts = st.builds(
    MetricVerdict,
    metric=st.sampled_from(metric_names()),
    status=st.sampled_from(METRIC_STATUSES),
    measured=st.one_of(st.none(), st.floats(0.01, 1e4)),
    expected=figures,
    tolerance=st.just(0.1),
)


@st.composite
def comparisons(draw: Any) -> Comparison:
    count = draw(st.integers(1, 6))
    cells = []
    for batch in range(1, count + 1):
        verdicts = draw(st.lists(metric_verdicts, max_size=3, unique_by=lambda m: m.metric))
        cells.append(
            CellVerdict(
                backend=draw(st.sampled_from(["accelerate", "ds-zero"])),
                dtype="bf16",
                batch_size=batch,
                status=draw(st.sampled_from(CELL_STATUSES)),
                measured_outcome="ok",
                metrics=tuple(verdicts),
            )
        )
    return Comparison(cells=tuple(cells), topology="cpu", model="tiny", baseline="cpu.tiny.json")


def columns(comparison: Comparison) -> list[str]:
    """The registered metrics some cell has a verdict for, in the registry's order; every
    registered metric when none has."""
    covered = {m.metric for cell in comparison.cells for m in cell.metrics}
    return [name for name in metric_names() if name in covered] or list(metric_names())


@settings(max_examples=40, deadline=None)  # a figure a case
@given(comparisons())
def test_each_square_says_its_verdict_in_its_colour_at_its_place(comparison: Comparison) -> None:
    fig = ratio_heatmap(comparison)
    (ax,) = fig.axes
    metrics = columns(comparison)
    assert [t.get_text() for t in ax.get_xticklabels()] == [label_of(m) for m in metrics]
    assert [t.get_text() for t in ax.get_yticklabels()] == [c.id for c in comparison.cells]
    texts = {(t.get_position()[0], t.get_position()[1]): t for t in ax.texts}
    squares = {(p.get_x(), p.get_y()): p for p in ax.patches}
    assert len(texts) == len(squares) == len(metrics) * len(comparison.cells)
    for row, cell in enumerate(comparison.cells):
        for col, metric in enumerate(metrics):
            label, colour = expected_square(cell, metric)
            square = squares[(col, row)]
            assert (square.get_width(), square.get_height()) == (1, 1)
            assert square.get_facecolor() == to_rgba(colour), (cell.id, metric)
            text = texts[(col + 0.5, row + 0.5)]
            assert text.get_text() == label, (cell.id, metric)
            on_red = colour == COLOURS[ERROR]
            assert text.get_color() == ("white" if on_red else "black")
            verdict = cell.metric(metric)
            regressed = verdict is not None and verdict.status == REGRESSED
            assert text.get_fontweight() == ("bold" if on_red or regressed else "normal")
            assert (text.get_ha(), text.get_va(), text.get_fontsize()) == ("center", "center", 8)


@settings(max_examples=20, deadline=None)
@given(comparisons())
def test_the_figure_is_8_inches_wide_and_a_row_adds_three_tenths_of_an_inch(
    comparison: Comparison,
) -> None:
    width, height = ratio_heatmap(comparison).get_size_inches()
    assert width == 8.0
    assert abs(height - (1.6 + 0.3 * len(comparison.cells))) < 1e-9


def test_the_error_red_is_one_colour_for_every_failure_to_run() -> None:
    assert {COLOURS[s] for s in RED_STATUSES} == {COLOURS[ERROR]}
    assert len({COLOURS[REGRESSED], COLOURS[IMPROVED], COLOURS[SAME], COLOURS[ERROR], OTHER}) == 5


@settings(max_examples=20, deadline=None)
@given(comparisons())
def test_the_grid_reads_top_down_with_the_metrics_above_and_a_legend_of_every_colour(
    comparison: Comparison,
) -> None:
    fig = ratio_heatmap(comparison)
    (ax,) = fig.axes
    metrics, rows = len(columns(comparison)), len(comparison.cells)
    # The first cell at the top: the y axis runs down, and each tick sits mid-square.
    assert ax.get_xlim() == (0, metrics) and ax.get_ylim() == (rows, 0)
    assert list(ax.get_xticks()) == [i + 0.5 for i in range(metrics)]
    assert list(ax.get_yticks()) == [i + 0.5 for i in range(rows)]
    assert ax.xaxis.get_ticks_position() == "top"
    assert ax.get_title(loc="left") == f"measured ÷ baseline, {comparison.summary}"
    (legend,) = fig.legends
    keys = {
        text.get_text(): to_rgba(patch.get_facecolor())
        for text, patch in zip(legend.get_texts(), legend.get_patches(), strict=True)
    }
    assert keys == {
        "regressed": to_rgba(COLOURS[REGRESSED]),
        "improved": to_rgba(COLOURS[IMPROVED]),
        "same": to_rgba(COLOURS[SAME]),
        "unexpected OOM / error / timeout": to_rgba(COLOURS[ERROR]),
        "not judged (* ratio shown), OOM expected, no baseline": to_rgba(OTHER),
    }
