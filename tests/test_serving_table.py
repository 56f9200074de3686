"""`bloomperf serve`'s sweep table and its agreement table, read back row by row: a row per rate
in increasing order, each figure from its summary, the SLA in words, the effective throughput
(or its lower bound when every rate met the SLA), and one line per rate that failed."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.render.serving import HEADERS, render_agreement, render_sweep
from bloomperf.store.serving import RateSummary, Sla

SLA = Sla(ttft_s=1.5, token_rate=4.0, attainment=0.9)


def summary(rate: float, outcome: str = "ok", message: str = "", **figures: object) -> RateSummary:
    quantiles = {"p50": 100.0, "p90": 150.0, "p99": 300.0}
    values: dict[str, object] = {
        "requests": 8,
        "completed": 8 if outcome == "ok" else 3,
        "duration_s": 4.0,
        "request_throughput": 2.0,
        "output_throughput": 64.0,
        "ttft_ms": quantiles,
        "tpot_ms": {"p50": 20.0, "p99": 44.4},
        "itl_ms": {},
        "sla_met": 0.875,
        "issued_rps": 2.25,
        **figures,
    }
    return RateSummary(rate, outcome, message, **values)  # type: ignore[arg-type]


def cells(line: str) -> list[str]:
    return [part.strip() for part in line.split("  ") if part.strip()]


rates = st.lists(
    st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0, math.inf]), min_size=1, max_size=5, unique=True
)


@settings(max_examples=40, deadline=None)
@given(rates, st.lists(st.sampled_from(["ok", "error", "timeout"]), min_size=5, max_size=5))
def test_one_row_per_rate_in_order_with_its_figures(
    offered: list[float], outcomes: list[str]
) -> None:
    sweep = [
        summary(r, o, "" if o == "ok" else f"{o} at {r}\nsecond line")
        for r, o in zip(offered, outcomes[: len(offered)], strict=True)
    ]
    lines = render_sweep(sweep, SLA, 1.0).splitlines()
    assert cells(lines[0]) == list(HEADERS)
    body = lines[2 : 2 + len(sweep)] if set(lines[1]) <= {"-", " "} else lines[1 : 1 + len(sweep)]
    ordered = sorted(sweep, key=lambda s: s.rate)
    for line, s in zip(body, ordered, strict=True):
        label = "inf" if math.isinf(s.rate) else f"{s.rate:g}"
        if s.outcome == "ok":
            assert cells(line) == [label, "2.2", "2.00", "64.0", "100/300", "20/44", "-", "88%"]
        else:
            assert cells(line) == [label, s.outcome]
    rest = lines[len(lines) - 2 - sum(s.outcome != "ok" for s in sweep) :]
    assert rest[0] == "SLA: TTFT <= 1.5 s and >= 4 tokens/s per user, for 90% of requests"
    failed = [s for s in ordered if s.outcome != "ok"]
    labels = ["inf" if math.isinf(s.rate) else f"{s.rate:g}" for s in failed]
    assert rest[2:] == [
        f"  rate {label}: {s.outcome}: {s.message.splitlines()[0]}"
        for label, s in zip(labels, failed, strict=True)
    ]


def test_the_effective_throughput_is_a_lower_bound_when_the_top_rate_met_the_sla() -> None:
    sweep = [summary(2.0), summary(1.0)]
    assert render_sweep(sweep, SLA, 2.0).splitlines()[-1] == (
        "effective throughput: at least 2 requests/s (every rate met the SLA: add higher --rates)"
    )
    assert render_sweep(sweep, SLA, 1.0).splitlines()[-1] == "effective throughput: 1 requests/s"
    assert render_sweep(sweep, SLA, 0.0).splitlines()[-1] == "effective throughput: 0 requests/s"
    assert render_sweep([], SLA, 0.0).splitlines()[-1] == "effective throughput: 0 requests/s"


def test_a_rate_with_a_message_says_it_cut_to_100_characters() -> None:
    long = summary(1.0, "ok", "x" * 200)
    assert render_sweep([long], SLA, 0.0).splitlines()[-1] == ("  rate 1: ok: " + "x" * 200)[:100]


def test_the_agreement_table_puts_each_rate_s_means_beside_the_server_s() -> None:
    sweep = [
        summary(2.0, mean_ms={"ttft": 120.04, "itl": 21.0}, server_mean_ms={"ttft": 118.0}),
        summary(
            1.0, mean_ms={"ttft": 99.96, "itl": 20.0}, server_mean_ms={"ttft": 98.0, "itl": 19.5}
        ),
        summary(4.0, mean_ms={"ttft": 1.0, "itl": 1.0}),  # the server said nothing: no row
        summary(8.0, "error", server_mean_ms={"ttft": 1.0}),  # failed: no row
    ]
    lines = render_agreement(sweep).splitlines()
    assert cells(lines[0]) == ["rate/s", "TTFT ms", "ITL ms", "server TTFT", "server ITL"]
    rows = [cells(line) for line in lines if line[:1].isdigit()]
    assert rows == [["1", "100.0", "20.0", "98.0", "19.5"], ["2", "120.0", "21.0", "118.0", "nan"]]
    assert render_agreement([summary(1.0)]) == ""


def test_what_a_summary_does_not_know_is_a_dash_and_a_failure_without_words_is_named() -> None:
    quiet = summary(1.0, issued_rps=None, itl_ms={"p50": 7.0, "p99": 9.4})
    failed = summary(2.0, "error")
    lines = render_sweep([quiet, failed], SLA, 1.0).splitlines()
    row = next(cells(line) for line in lines if line.startswith("1 "))
    assert row[1] == "-" and row[6] == "7/9"
    assert lines[-1] == "  rate 2: error: "


def test_a_top_rate_below_one_request_a_second_is_still_a_lower_bound() -> None:
    line = render_sweep([summary(0.5)], SLA, 0.5).splitlines()[-1]
    assert line.startswith("effective throughput: at least 0.5 requests/s")


def test_a_mean_the_client_lacks_is_nan_beside_the_server_s() -> None:
    row = summary(1.0, mean_ms={"ttft": 10.0}, server_mean_ms={"ttft": 9.0, "itl": 2.0})
    assert cells(render_agreement([row]).splitlines()[-1]) == ["1", "10.0", "nan", "9.0", "2.0"]
