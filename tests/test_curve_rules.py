"""The report's serving plot, line by line, for any sweeps: each cell's curve (completed
requests/s against p99 TTFT on the left and p99 inter-token latency on the right, the rates
that ran in their offered order), its baseline's dashed with hollow markers in the same colour,
each effective throughput a vertical line, the SLA's TTFT limit dotted, and a legend naming
each curve's effective throughput. The expected lines are worked out here from the rates."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bloomperf.render.report.curve import curve_of, serving_figure
from bloomperf.render.report.figure import COLOURS
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.results import Outcome, RunResult
from bloomperf.store.serving import RateSummary, Sla, sweep_cell
from tests.test_serving_gate import SETTINGS, sweep_run

latencies = st.floats(1.0, 1e5)


@st.composite
def rate_runs(draw: Any) -> list[RateSummary]:
    offered = draw(st.lists(st.integers(1, 64), min_size=1, max_size=6, unique=True))
    rates = []
    for rate in offered:
        ttft = draw(st.sampled_from([{}, {"p50": 1.0}])) or {}
        if draw(st.booleans()):
            ttft = {"p50": draw(latencies), "p99": draw(latencies)}
        itl = draw(st.sampled_from([{}, {"p99": 0.0}]))
        if itl:
            itl = {"p99": draw(latencies)}
        rates.append(
            RateSummary(
                rate=float(rate) if rate < 64 else math.inf,
                outcome=draw(st.sampled_from(["ok", "ok", "error", "timeout"])),
                message="",
                requests=8,
                completed=8,
                duration_s=1.0,
                request_throughput=draw(st.floats(0.01, 100.0)),
                output_throughput=1.0,
                ttft_ms=ttft,
                tpot_ms={},
                itl_ms=itl,
                sla_met=1.0,
            )
        )
    return rates


def expected_curve(rates: list[RateSummary]) -> list[tuple[float, float, float]]:
    """The rates that ran with a TTFT, by offered rate: (done/s, TTFT p99, ITL p99 or NaN)."""
    ran = sorted(
        (r for r in rates if r.outcome == "ok" and "p99" in r.ttft_ms), key=lambda r: r.rate
    )
    return [(r.request_throughput, r.ttft_ms["p99"], r.itl_ms.get("p99", math.nan)) for r in ran]


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True)
    )


# Effective throughputs: none found, zero, under one request/s, one, more, and every rate met.
effective_figures = st.sampled_from([None, 0.0, 0.5, 1.0, 3.5, math.inf])


def sweep_of(rates: list[RateSummary], effective: float | None, sla: Sla, dtype: str) -> Any:
    return replace(sweep_cell(SETTINGS, sla, rates, effective), dtype=dtype)


@settings(max_examples=40, deadline=None)
@given(rate_runs())
def test_a_curve_is_the_rates_that_ran_in_their_offered_order(rates: list[RateSummary]) -> None:
    assert curve_of(rates) == expected_curve(rates) or all(
        same(list(a), list(b)) for a, b in zip(curve_of(rates), expected_curve(rates), strict=True)
    )


def ran(rate: float, ttft: float) -> RateSummary:
    """A rate that ran, with its p99 TTFT and inter-token latency."""
    return RateSummary(
        rate=rate, outcome="ok", message="", requests=8, completed=8, duration_s=1.0,
        request_throughput=rate * 0.9, output_throughput=1.0, ttft_ms={"p99": ttft},
        tpot_ms={}, itl_ms={"p99": ttft / 10}, sla_met=1.0,
    )  # fmt: skip


@settings(max_examples=30, deadline=None)
# A sweep none of whose rates ran still has its baseline's curve drawn, dashed, with its
# effective throughput's line dashed too.
@example(measured=[([], None)], baseline=([ran(1, 50.0), ran(2, 80.0)], 0.5), ttft_s=1.0)
@given(
    measured=st.lists(st.tuples(rate_runs(), effective_figures), min_size=1, max_size=2),
    baseline=st.one_of(st.none(), st.tuples(rate_runs(), effective_figures)),
    ttft_s=st.floats(0.1, 10.0),
)
def test_each_sweep_is_drawn_with_its_baseline_its_effective_throughput_and_the_sla(
    measured: list[tuple[list[RateSummary], float | None]],
    baseline: tuple[list[RateSummary], float | None] | None,
    ttft_s: float,
) -> None:
    sla = Sla(ttft_s=ttft_s)
    cells = tuple(
        sweep_of(rates, effective, sla, dtype)
        for (rates, effective), dtype in zip(measured, ("fp32", "bf16"), strict=False)
    )
    run: RunResult = replace(sweep_run(measured[0][0]), cells=cells)
    accepted, kept = None, False
    if baseline is not None:  # a baseline for the first cell (fp32) only
        expected = sweep_of(*baseline, sla=sla, dtype="fp32")
        # A sweep with a failed rate did not finish: --force accepts the baseline without it.
        kept = expected.outcome == Outcome.OK
        accepted = accept_run(replace(run, cells=(expected,)), None, source="b", force=True)
    fig, drawn = serving_figure(run, accepted)

    sides = []  # (label, rates, effective, colour, dashed), in drawing order
    for i, ((rates, effective), cell) in enumerate(zip(measured, cells, strict=False)):
        label = f"serve-fastgen-1200-128 {cell.dtype}"
        sides.append((label, rates, effective, COLOURS[i], False))
        if baseline is not None and kept and cell.dtype == "fp32":
            sides.append((f"{label}, baseline", baseline[0], baseline[1], COLOURS[i], True))
    sides = [s for s in sides if expected_curve(s[1])]
    assert list(drawn) == [s[0] for s in sides]
    if not sides:
        return
    left, right = fig.axes
    for ax, column in ((left, 1), (right, 2)):
        curves = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(curves) == len(sides)
        for line, (name, rates, effective, colour, dashed) in zip(curves, sides, strict=True):
            points = expected_curve(rates)
            shown = "∞" if effective == math.inf else f"{effective or 0:g}"
            assert line.get_label() == f"{name}: effective {shown} req/s"
            assert list(line.get_xdata()) == [p[0] for p in points]
            assert same(list(line.get_ydata()), [p[column] for p in points])
            assert (line.get_linestyle(), line.get_marker()) == ("--" if dashed else "-", "o")
            assert line.get_color() == colour
            assert line.get_markerfacecolor() == ("none" if dashed else colour)
        verticals = [
            (line.get_xdata()[0], line.get_color(), line.get_linestyle())
            for line in ax.get_lines()
            if line.get_label().startswith("_")
            and line.get_xdata()[0] == line.get_xdata()[1]
            and line.get_linestyle() != ":"
        ]
        assert verticals == [
            (eff, colour, "--" if dashed else "-")
            for _, _, eff, colour, dashed in sides
            if eff is not None and 0 < eff < math.inf
        ]
        assert ax.get_yscale() == "log" and ax.get_xlabel() == "completed requests/s"
    limits = [line.get_ydata()[0] for line in left.get_lines() if line.get_linestyle() == ":"]
    assert limits == [ttft_s * 1000] * len(sides)
    assert not [line for line in right.get_lines() if line.get_linestyle() == ":"]
    assert left.get_title() == "dotted: the SLA's TTFT limit"
    assert right.get_title() == "vertical: effective throughput (offered rate)"
    assert (left.get_ylabel(), right.get_ylabel()) == (
        "TTFT p99 (ms)",
        "inter-token latency p99 (ms)",
    )
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        line.get_label() for line in right.get_lines() if not line.get_label().startswith("_")
    ]
