"""The verdict table and the lines under it (``bloomperf.render.comparison``), read back: a
batch cell's text and style, a row's load and memory, the latency table, the timing headline,
the JSON document and the text and markdown layouts, each against a rule written out here (a
figure parsed back from the text, the document's fields against the verdicts they came from)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME, RatioEstimate
from bloomperf.analysis.verdicts import (
    BOUNDARY_MOVED_UP,
    ERROR,
    EXPECTED_OOM,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_JUDGED,
    SKIPPED,
    TIMEOUT,
    UNEXPECTED_OOM,
    UNTRUSTWORTHY,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.core.formatting import GIB
from bloomperf.core.metrics import metric
from bloomperf.render.comparison import (
    cell_style,
    cell_text,
    change_text,
    latency_rows,
    memory_text,
    render_comparison,
    row_text,
    styled_rows,
    timing_headline,
)

MS, LOAD, MEMORY, TTFT = "ms_per_token", "load_time", "peak_memory", "ttft_ms"
JUDGED = (SAME, REGRESSED, IMPROVED)


def judged(name: str, status: str, measured: float, ratio: float = 1.0) -> MetricVerdict:
    """A figure judged against its baseline at ±10 %, with its ratio's interval around it."""
    estimate = RatioEstimate(ratio, ratio * 0.99, ratio * 1.01)
    tolerance = None if status == NOT_JUDGED else 0.1
    return MetricVerdict(name, status, measured, measured / ratio, tolerance, estimate)


def cell(
    status: str = SAME,
    *figures: MetricVerdict,
    batch: int = 1,
    outcome: str = "ok",
    ms: float | None = 2.0,
    **changes: object,
) -> CellVerdict:
    fields: dict = {
        "backend": "accelerate",
        "dtype": "bf16",
        "batch_size": batch,
        "status": status,
        "measured_outcome": outcome,
        "metrics": figures,
        "measured_ms_per_token": ms,
        "expected_ms_per_token": ms,
    }
    return CellVerdict(**{**fields, **changes})  # type: ignore[arg-type]


def percent_of(text: str) -> float:
    """The signed percent a change's text shows, parsed back."""
    found = re.search(r"([+-]\d+(?:\.\d)?)%", text)
    assert found, text
    return float(found[1])


# ---- a change in percent ---------------------------------------------------------------------

ratios = st.floats(0.05, 20.0, allow_nan=False)


@given(ratio=ratios, status=st.sampled_from([*JUDGED, NOT_JUDGED]))
def test_a_terminals_change_is_whole_percent_from_10_and_one_decimal_below(
    ratio: float, status: str
) -> None:
    percent = (ratio - 1) * 100
    text = change_text(judged(MS, status, 1.0, ratio), short=True)
    if status not in (REGRESSED, IMPROVED) and abs(percent) < 0.05:
        assert text == ""  # noise shows no change at all
        return
    assert text.startswith(" ") and "(" not in text and text.endswith("%")
    shown = percent_of(text)
    decimals = 0 if abs(percent) >= 10 else 1
    assert ("." in text) == (decimals == 1), (percent, text)
    assert abs(shown - percent) <= 0.5 * 10**-decimals + 1e-9


@given(ratio=ratios, status=st.sampled_from([*JUDGED, NOT_JUDGED]))
def test_a_reports_change_is_one_decimal_in_parentheses_and_says_when_not_judged(
    ratio: float, status: str
) -> None:
    percent = (ratio - 1) * 100
    text = change_text(judged(MS, status, 1.0, ratio))
    if status not in (REGRESSED, IMPROVED) and abs(percent) < 0.05:
        assert text == ""
        return
    assert re.fullmatch(r" \([+-]\d+\.\d%(, not judged)?\)", text), text
    assert abs(percent_of(text) - percent) <= 0.05 + 1e-9
    assert text.endswith(", not judged)") == (status == NOT_JUDGED)


@pytest.mark.parametrize("status", [REGRESSED, IMPROVED])
def test_a_judged_change_shows_even_when_it_rounds_to_zero(status: str) -> None:
    assert change_text(judged(MS, status, 1.0, 1.0001)) == " (+0.0%)"
    assert change_text(judged(MS, status, 1.0, 1.0001), short=True) == " +0.0%"


def test_no_estimate_shows_no_change() -> None:
    unjudged = MetricVerdict(MS, NO_BASELINE, 1.0, None, None, None)
    assert change_text(unjudged) == change_text(unjudged, short=True) == change_text(None) == ""


# ---- a batch cell ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (EXPECTED_OOM, "OOM (expected)"),
        (UNEXPECTED_OOM, "OOM UNEXPECTED"),
        (NO_BASELINE, "OOM (no baseline)"),
        (INCOMPARABLE, "OOM (incomparable)"),
        ("some-new-status", "OOM (some-new-status)"),
    ],
)
def test_an_oom_cell_says_oom_and_its_status(status: str, text: str) -> None:
    oom = cell(status, outcome="oom", ms=None)
    assert cell_text(oom) == cell_text(oom, short=True) == text


@pytest.mark.parametrize(("status", "text"), [(ERROR, "ERROR"), (TIMEOUT, "TIMEOUT")])
def test_a_cell_that_did_not_finish_says_so_loudly_and_a_skipped_one_quietly(
    status: str, text: str
) -> None:
    assert cell_text(cell(status, outcome=status, ms=None)) == text
    assert cell_text(cell(SKIPPED, outcome="skipped", ms=None)) == "skipped"


def test_no_cell_is_a_dash() -> None:
    assert cell_text(None) == cell_text(None, short=True) == "–"
    assert cell_style(None) is None


def test_a_judged_cell_shows_its_figure_its_change_and_a_loud_verdict() -> None:
    slower = cell(REGRESSED, judged(MS, REGRESSED, 2.0, 1.25))
    assert cell_text(slower) == "2.00 ms (+25.0%) REGRESSED"
    assert cell_text(slower, short=True) == "2.00 ms +25% REGRESSED"
    faster = cell(IMPROVED, judged(MS, IMPROVED, 2.0, 0.8))
    assert cell_text(faster) == "2.00 ms (-20.0%) improved"
    same = cell(SAME, judged(MS, SAME, 2.0, 1.0))
    assert cell_text(same) == cell_text(same, short=True) == "2.00 ms"


@pytest.mark.parametrize(
    ("status", "label"),
    [
        (BOUNDARY_MOVED_UP, " (OOM expected)"),
        (NO_BASELINE, " (no baseline)"),
        (UNTRUSTWORTHY, " UNTRUSTWORTHY"),
        ("some-new-status", " (some-new-status)"),
    ],
)
def test_a_cell_with_a_figure_and_another_status_says_the_status_after_it(
    status: str, label: str
) -> None:
    assert cell_text(cell(status)) == "2.00 ms" + label


def test_a_cell_with_no_figure_shows_its_outcome() -> None:
    assert cell_text(cell(SAME, ms=None, outcome="ok")) == "ok"


def test_every_other_metric_that_moved_follows_the_headline_in_the_order_registered() -> None:
    """A report names each moved figure with its own words; a terminal by its abbreviation and
    change alone. Figures that did not move, or have no measurement, are not named."""
    moved = cell(
        REGRESSED,
        judged(MS, SAME, 2.0, 1.0),
        judged(TTFT, IMPROVED, 3.0, 0.5),
        judged(MEMORY, REGRESSED, 2 * GIB, 1.5),
        judged("tpot_ms", SAME, 1.0, 1.3),
        MetricVerdict("tpot_p99_ms", REGRESSED, None, 1.0, 0.1, RatioEstimate(2.0, 2.0, 2.0)),
    )
    assert cell_text(moved) == (
        "2.00 ms; peak memory 2.00 GiB (+50.0%) REGRESSED; TTFT 3.00 ms (-50.0%) improved"
    )
    assert cell_text(moved, short=True) == "2.00 ms (mem +50%) (TTFT -50%)"


def test_a_metric_that_did_not_move_hides_only_itself() -> None:
    """Peak memory comes first in the registry: still, it hides no figure after it."""
    later = cell(SAME, judged(MEMORY, SAME, GIB), judged(TTFT, REGRESSED, 3.0, 2.0))
    assert cell_text(later, short=True) == "2.00 ms (TTFT +100%)"


def test_a_load_time_that_moved_is_not_named_in_a_batch_cell() -> None:
    """One load serves every batch size: its column says it once per row."""
    assert cell_text(cell(REGRESSED, judged(LOAD, REGRESSED, 5.0, 2.0))) == "2.00 ms"


@pytest.mark.parametrize(
    ("verdict", "style"),
    [
        (cell(REGRESSED, judged(MS, REGRESSED, 2.0, 1.5)), "regressed"),
        (cell(IMPROVED, judged(MS, IMPROVED, 2.0, 0.5)), "improved"),
        (cell(SAME, judged(MS, SAME, 2.0, 1.0)), None),
        (cell(SAME, judged(MS, NOT_JUDGED, 2.0, 1.3)), "dim"),  # the headline's own
        (cell(NOT_JUDGED), "dim"),
        (cell(UNEXPECTED_OOM, outcome="oom", ms=None), "regressed"),
        (cell(EXPECTED_OOM, outcome="oom", ms=None), None),
        (cell(ERROR, outcome="error", ms=None), "regressed"),
        (cell(SKIPPED, outcome="skipped", ms=None), None),
        (cell(NO_BASELINE, outcome="oom", ms=None), None),
    ],
)
def test_a_cell_is_red_when_it_fails_green_when_it_improved_and_dim_when_not_judged(
    verdict: CellVerdict, style: str | None
) -> None:
    assert cell_style(verdict) == style


# ---- a row: its load and its memory ----------------------------------------------------------


def test_a_rows_load_is_the_first_measured_one_with_its_verdict() -> None:
    load = metric(LOAD)
    row = [cell(SAME), cell(REGRESSED, judged(LOAD, REGRESSED, 5.0, 2.0), batch=8)]
    assert row_text(row, load) == "5 s (+100.0%) REGRESSED"
    assert row_text(row, load, short=True) == "5 s +100%"
    assert row_text([cell(SAME, judged(LOAD, SAME, 5.0))], load) == "5 s (same)"
    assert row_text([cell(SAME, judged(LOAD, NO_BASELINE, 5.0))], load) == "5 s (no baseline)"
    newer = [cell(SAME, judged(LOAD, "some-new-status", 5.0))]
    assert row_text(newer, load) == "5 s (some-new-status)"
    assert row_text([cell(SAME)], load) == row_text([cell(SAME)], load, short=True) == "–"


def test_a_load_not_judged_says_so_once() -> None:
    load = metric(LOAD)
    moved = [cell(SAME, judged(LOAD, NOT_JUDGED, 5.0, 1.5))]
    assert row_text(moved, load) == "5 s (+50.0%, not judged)"
    still = [cell(SAME, judged(LOAD, NOT_JUDGED, 5.0, 1.0))]
    assert row_text(still, load) == "5 s (not judged)"


def test_a_rows_memory_is_its_largest_peak_and_names_the_batch_sizes_that_moved() -> None:
    row = [
        cell(SAME, judged(MEMORY, REGRESSED, 30 * GIB, 1.5)),
        cell(SAME, judged(MEMORY, IMPROVED, 40 * GIB, 0.5), batch=8),
        cell(SAME, judged(MEMORY, REGRESSED, 20 * GIB, 1.5), batch=16),
        cell(SAME, judged(MEMORY, SAME, 10 * GIB), batch=32),
    ]
    assert memory_text(row) == "≤ 40 GiB, REGRESSED at bs1, bs16; improved at bs8"


@pytest.mark.parametrize(
    ("gib", "figure"),
    [(9.5, "≤ 9.5 GiB"), (10.0, "≤ 10 GiB"), (10.6, "≤ 11 GiB"), (0.47, "≤ 0.47 GiB")],
)
def test_a_peak_is_whole_gib_from_10_and_two_digits_below(gib: float, figure: str) -> None:
    assert memory_text([cell(SAME, judged(MEMORY, SAME, gib * GIB))]) == f"{figure} (same)"


def test_a_rows_memory_that_did_not_move_lists_each_status_once() -> None:
    row = [
        cell(SAME, judged(MEMORY, SAME, GIB)),
        cell(SAME, judged(MEMORY, NO_BASELINE, GIB), batch=8),
        cell(SAME, judged(MEMORY, SAME, GIB), batch=16),
        cell(SAME, judged(MEMORY, "some-new-status", GIB), batch=32),
    ]
    assert memory_text(row) == "≤ 1 GiB (no baseline / same / some-new-status)"
    assert memory_text([cell(SAME)]) == "–"


# ---- the table ---------------------------------------------------------------------------------


def comparison(*cells: CellVerdict, topology: str = "cpu", **changes: object) -> Comparison:
    return Comparison(cells, topology, "tiny", "baselines/cpu.tiny.json", **changes)  # type: ignore[arg-type]


def test_the_table_has_a_row_per_backend_and_dtype_and_a_column_per_batch_size() -> None:
    cells = [
        cell(REGRESSED, judged(MS, REGRESSED, 2.0, 1.5), judged(MEMORY, REGRESSED, GIB, 1.5)),
        cell(SAME, judged(MS, SAME, 1.0), judged(LOAD, IMPROVED, 3.0, 0.5), batch=8, ms=1.0),
        cell(SAME, judged(MS, SAME, 1.0), dtype="fp32", batch=8, ms=1.0),
    ]
    header, body, styles = styled_rows(comparison(*cells))
    assert header == ["Solution (dtype)", "Batch 1", "Batch 8", "Load time", "Peak memory"]
    assert [row[0] for row in body] == ["Accelerate bf16", "Accelerate fp32"]
    assert body[0][1:] == [
        "2.00 ms (+50.0%) REGRESSED; peak memory 1.00 GiB (+50.0%) REGRESSED",
        "1.00 ms",
        "3 s (-50.0%) improved",
        "≤ 1 GiB, REGRESSED at bs1",
    ]
    assert body[1][1:] == ["–", "1.00 ms", "–", "–"]
    assert styles[0] == [None, "regressed", None, "improved", "regressed"]
    assert styles[1] == [None, None, None, None, None]
    short = styled_rows(comparison(*cells), short=True)[1]
    assert short[0][1] == "2.00 ms +50% REGRESSED (mem +50%)" and short[0][3] == "3 s -50%"


def test_a_gpu_topologys_memory_column_is_summed_over_its_gpus() -> None:
    header = styled_rows(comparison(cell(), topology="8xA100-80GB"))[0]
    assert header[-1] == "Peak memory (all GPUs)"


def test_the_latency_table_has_a_row_per_cell_with_step_times() -> None:
    timed = {"ttft_ms": 4.5, "tpot_ms": 2.0, "tpot_p90_ms": None, "tpot_p99_ms": 3.0}
    cells = [
        cell(latency={**timed, "tokens_per_s": 512.25}),
        cell(batch=8),  # no step times
        cell(batch=16, latency={"tpot_ms": None}),
        cell(batch=32, latency=timed),
    ]
    header, body = latency_rows(comparison(*cells))
    assert header == ["Cell", "TTFT", "TPOT p50", "p90", "p99", "tokens/s"]
    assert body == [
        ["accelerate-bf16-bs1", "4.50 ms", "2.00 ms", "0.00 ms", "3.00 ms", "512.2"],
        ["accelerate-bf16-bs32", "4.50 ms", "2.00 ms", "0.00 ms", "3.00 ms", "0.0"],
    ]


# ---- the timing headline ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "why"),
    [
        ("cpu", "a shared CPU's timing swings run to run; use bloomperf ab"),
        ("8xA100-80GB", "the baseline holds no tolerance for it"),
    ],
)
def test_timing_recorded_but_not_judged_anywhere_says_why_once(topology: str, why: str) -> None:
    unjudged = cell(SAME, judged(MS, NOT_JUDGED, 2.0), judged(LOAD, NOT_JUDGED, 1.0))
    memory = judged(MEMORY, REGRESSED, GIB, 2.0)  # bytes: not timing, judged or not
    headline = f"timing recorded, not judged ({why})"
    assert timing_headline(comparison(unjudged, topology=topology)) == headline
    with_memory = cell(SAME, judged(MS, NOT_JUDGED, 2.0), memory)
    assert timing_headline(comparison(with_memory, topology=topology)) == headline
    text = render_comparison(comparison(with_memory, topology=topology), width=1000)
    assert text.splitlines()[2] == headline
    painted = render_comparison(comparison(with_memory, topology=topology), colour=True, width=1000)
    assert painted.splitlines()[2] == f"\x1b[2m{headline}\x1b[0m"


@pytest.mark.parametrize("unit_metric", [MS, LOAD])
def test_one_judged_timing_figure_and_no_headline(unit_metric: str) -> None:
    partly = cell(SAME, judged(MS, NOT_JUDGED, 2.0), judged(unit_metric, SAME, 1.0), batch=8)
    assert timing_headline(comparison(cell(SAME, judged(MS, NOT_JUDGED, 2.0)), partly)) == ""
    assert timing_headline(comparison(cell(SAME, judged(MEMORY, NOT_JUDGED, GIB)))) == ""
    assert timing_headline(comparison()) == ""


# ---- the whole comparison as text, markdown and JSON -----------------------------------------


def a_failing_comparison() -> Comparison:
    return comparison(
        cell(REGRESSED, judged(MS, REGRESSED, 2.0, 1.5)),
        cell(IMPROVED, judged(MS, IMPROVED, 1.0, 0.5), batch=8),
        cell(INCOMPARABLE, batch=16, message="another SLA"),
        missing=("accelerate-bf16-bs64", "accelerate-bf16-bs128"),
    )


def test_the_text_has_its_title_baseline_table_notes_and_summary_in_order() -> None:
    c = a_failing_comparison()
    lines = render_comparison(c, width=1000).splitlines()  # a note on a line of its own
    assert lines[:3] == ["cpu · tiny", "baseline: baselines/cpu.tiny.json", ""]
    assert lines[3].startswith("Solution (dtype)")
    notes_start = next(i for i, line in enumerate(lines) if line.startswith("accelerate-"))
    assert lines[notes_start - 1] == ""
    notes = lines[notes_start : lines.index("", notes_start)]
    assert notes[0].startswith("accelerate-bf16-bs1: ms/token regressed")
    assert notes[1].startswith("accelerate-bf16-bs8: ms/token improved")
    assert notes[2] == "accelerate-bf16-bs16: incomparable: another SLA"
    assert notes[3] == "not in the results: accelerate-bf16-bs64, accelerate-bf16-bs128"
    assert lines[-2:] == ["", c.summary] and c.summary.endswith("; FAILED")


def test_colour_paints_failures_red_the_summary_by_the_verdict_and_nothing_without_it() -> None:
    c = a_failing_comparison()
    plain_text = render_comparison(c)
    painted = render_comparison(c, colour=True)
    assert "\x1b[" not in plain_text
    unpainted = re.sub(r"\x1b\[[0-9;]*m", "", painted)
    assert unpainted == plain_text
    red = re.compile(r"\x1b\[31m")
    lines = painted.splitlines()
    assert red.match(next(line for line in lines if "bs1: ms/token regressed" in line))
    improved_note = next(line for line in lines if "bs8: ms/token improved" in line)
    assert not improved_note.startswith("\x1b[")
    assert red.match(lines[-1])
    passing = comparison(cell(IMPROVED, judged(MS, IMPROVED, 1.0, 0.5)))
    assert render_comparison(passing, colour=True).splitlines()[-1].startswith("\x1b[32m")


def test_an_empty_comparison_says_it_has_no_cells() -> None:
    lines = render_comparison(comparison()).splitlines()
    assert "(no cells)" in lines and lines[-1] == "0 cells: none"


def test_the_markdown_has_a_bold_title_a_table_its_notes_and_the_summary() -> None:
    c = a_failing_comparison()
    text = render_comparison(c, "markdown")
    assert text.endswith(c.summary + "\n") and not text.endswith("\n\n")
    blocks = text.removesuffix("\n").split("\n\n")
    assert blocks[0] == "**cpu · tiny vs baselines/cpu.tiny.json**"
    assert blocks[1].splitlines()[0].startswith("| Solution (dtype) |")
    notes = blocks[2].splitlines()
    assert all(line.startswith("- ") for line in notes) and len(notes) == 4
    assert notes[-1] == "- not in the results: accelerate-bf16-bs64, accelerate-bf16-bs128"
    assert blocks[3] == c.summary


def test_markdown_without_notes_has_one_blank_line_between_table_and_summary() -> None:
    for c in (comparison(cell(SAME, judged(MS, SAME, 2.0))), comparison()):
        text = render_comparison(c, "markdown")
        assert "\n\n\n" not in text
        blocks = text.removesuffix("\n").split("\n\n")
        assert len(blocks) == 3 and blocks[2] == c.summary, blocks


def test_markdown_escapes_what_a_worker_wrote_and_the_text_strips_its_escapes() -> None:
    hostile = cell(ERROR, outcome="error", ms=None, message="<b>x</b> | \x1b[2J boom")
    c = comparison(hostile)
    markdown = render_comparison(c, "markdown")
    assert "\\<b>x\\</b> \\|" in markdown and "\x1b" not in markdown
    text = render_comparison(c, width=1000)
    assert "\x1b" not in text and "error: <b>x</b> | " in text  # a terminal needs no escapes


def test_an_incomparable_run_says_why_first_in_the_notes() -> None:
    c = comparison(
        cell(REGRESSED, judged(MS, REGRESSED, 2.0, 1.5)), incomparable="another workload"
    )
    for fmt, prefix in (("text", ""), ("markdown", "- ")):
        lines = render_comparison(c, fmt).splitlines()
        first_note = next(line for line in lines if "incomparable" in line or "bs1:" in line)
        assert first_note == f"{prefix}incomparable: another workload"


def test_the_latency_table_follows_the_verdict_table_in_text_and_markdown() -> None:
    timed = {"ttft_ms": 4.5, "tpot_ms": 2.0, "tpot_p90_ms": 2.5, "tpot_p99_ms": 3.0}
    c = comparison(cell(SAME, judged(MS, SAME, 2.0), latency=timed))
    text = render_comparison(c).splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("Cell"))
    assert text[at - 1] == "" and text[at + 1].startswith("accelerate-bf16-bs1  4.50 ms")
    blocks = render_comparison(c, "markdown").removesuffix("\n").split("\n\n")
    assert blocks[2].startswith("| Cell |") and blocks[3] == c.summary
    assert all(line.startswith("|") for line in blocks[2].splitlines())


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@given(
    ratio=st.one_of(st.floats(0.1, 10.0), st.just(math.inf)),
    measured=st.one_of(st.none(), st.floats(0.01, 1e3)),
    ttft=st.one_of(st.none(), st.floats(0.01, 1e3), st.just(math.inf)),
)
def test_the_json_document_carries_every_field_and_writes_no_infinity(
    ratio: float, measured: float | None, ttft: float | None
) -> None:
    figure = MetricVerdict(MS, REGRESSED, measured, 2.0, 0.1, RatioEstimate(ratio, 1.0, ratio))
    bad = cell(REGRESSED, figure, latency={"ttft_ms": ttft, "tokens_per_s": 9.0})
    c = comparison(
        bad,
        cell(SAME, batch=8),
        missing=("accelerate-bf16-bs64",),
        incomplete="it did not finish",
    )
    text = render_comparison(c, "json")
    assert text.endswith("}\n") and text.startswith('{\n  "kind"')  # two-space indents
    document = json.loads(text, parse_constant=lambda name: pytest.fail(name))
    assert document == {
        "kind": "bloomperf-comparison",
        "schema_version": 1,
        "topology": "cpu",
        "model": "tiny",
        "baseline": "baselines/cpu.tiny.json",
        "incomparable": None,
        "incomplete": "it did not finish",
        "unjudged": None,
        "failed": True,
        "counts": {SAME: 1, REGRESSED: 1},
        "summary": c.summary,
        "missing": ["accelerate-bf16-bs64"],
        "cells": [
            {
                "id": v.id,
                "backend": "accelerate",
                "dtype": "bf16",
                "batch_size": v.batch_size,
                "status": v.status,
                "measured_outcome": "ok",
                "expected_outcome": None,
                "ms_per_token": 2.0,
                "expected_ms_per_token": 2.0,
                "fails": v.fails(),
                "explain": v.explain(),
                "metrics": [
                    {
                        "metric": m.metric,
                        "status": m.status,
                        "measured": finite_or_none(m.measured),
                        "expected": 2.0,
                        "tolerance": 0.1,
                        "ratio": finite_or_none(ratio),
                        "low": 1.0,
                        "high": finite_or_none(ratio),
                    }
                    for m in v.metrics
                ],
                "latency": {k: finite_or_none(x) for k, x in v.latency.items()},
            }
            for v in c.cells
        ],
    }


def test_the_json_of_a_passing_comparison_says_none_where_nothing_is_wrong() -> None:
    unjudged = MetricVerdict(MS, NO_BASELINE, 2.0, None, None, None)
    c = comparison(cell(NO_BASELINE, unjudged), incomparable="", unjudged="nothing judged")
    document = json.loads(render_comparison(c, "json"))
    assert (document["incomparable"], document["incomplete"]) == (None, None)
    assert document["unjudged"] == "nothing judged"
    (metric_document,) = document["cells"][0]["metrics"]
    assert (metric_document["ratio"], metric_document["low"], metric_document["high"]) == (
        None,
        None,
        None,
    )
    assert metric_document["tolerance"] is None and metric_document["expected"] is None
