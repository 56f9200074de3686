"""The serving sweep's judging, by property: the SLA per request, the effective throughput, the
bisection between rates, the server's /metrics means, the FastGen-shaped lengths."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.prometheus import TTFT, HistogramTotals, histogram_totals, server_means_ms
from bloomperf.analysis.serving import (
    effective_throughput,
    failed_rate,
    issue_rate,
    meets_sla,
    next_bisection_rate,
    summarise_rate,
)
from bloomperf.catalog.serving_workload import SHAPES, draw_lengths
from bloomperf.store.serving import RateSummary, RequestTiming, Sla, decode_rate, encode_rate

SLA = Sla(ttft_s=1.0, token_rate=4.0, attainment=0.9)


def request(ttft: float, tpot: float, tokens: int = 11, ok: bool = True) -> RequestTiming:
    latency = ttft + tpot * (tokens - 1)
    return RequestTiming(ok, 20, tokens, ttft, latency, tuple([tpot] * (tokens - 1)))


def summary_at(rate: float, met: float) -> object:
    good = round(met * 10)
    requests = [request(0.1, 0.1)] * good + [request(5.0, 0.1)] * (10 - good)
    return summarise_rate(rate, requests, 10.0, SLA)


@given(st.floats(0.001, 10), st.floats(0.001, 2), st.integers(2, 200))
def test_a_request_meets_the_sla_exactly_within_both_limits(ttft, tpot, tokens):
    timing = request(ttft, tpot, tokens)
    expected = ttft <= SLA.ttft_s and timing.tpot_s is not None and timing.tpot_s <= SLA.tpot_s
    assert meets_sla(timing, SLA) == expected
    assert not meets_sla(request(ttft, tpot, tokens, ok=False), SLA)


@given(
    st.lists(
        st.tuples(st.floats(0.1, 50), st.booleans()),
        min_size=1,
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
def test_effective_throughput_is_the_top_of_the_passing_run_from_the_lowest_rate(points):
    summaries = [summary_at(rate, 1.0 if ok else 0.0) for rate, ok in points]
    found = effective_throughput(summaries, SLA)
    ordered = sorted(points)
    expected = 0.0
    for rate, ok in ordered:
        if not ok:
            break
        expected = rate
    assert found == expected


@given(st.floats(0.1, 10), st.floats(1.01, 10), st.floats(0.001, 0.5))
def test_bisection_proposes_a_rate_strictly_inside_the_bracket(low, factor, resolution):
    high = low * factor
    summaries = [summary_at(low, 1.0), summary_at(high, 0.0)]
    proposed = next_bisection_rate(summaries, SLA, resolution)
    if (high - low) / high <= resolution:
        assert proposed is None
    else:
        assert proposed is not None and low < proposed < high


def test_no_bisection_without_a_passing_rate_or_above_all_at_once():
    assert next_bisection_rate([summary_at(1, 0.0), summary_at(2, 0.0)], SLA, 0.1) is None
    assert next_bisection_rate([summary_at(1, 1.0), summary_at(math.inf, 0.0)], SLA, 0.1) is None
    assert next_bisection_rate([summary_at(1, 1.0), summary_at(2, 1.0)], SLA, 0.1) is None


def test_a_failed_rate_ends_the_passing_run_and_a_rate_below_attainment_fails():
    assert (
        effective_throughput(
            [summary_at(1, 1.0), failed_rate(2, "error", "died"), summary_at(3, 1.0)], SLA
        )
        == 1
    )
    assert effective_throughput([summary_at(1, 0.9), summary_at(2, 0.8)], SLA) == 1


@given(st.lists(st.floats(0.001, 5), min_size=1, max_size=50))
def test_percentiles_are_ordered_and_within_the_samples(ttfts):
    summary = summarise_rate(1.0, [request(t, 0.05) for t in ttfts], 10.0, SLA)
    p = summary.ttft_ms
    assert min(ttfts) * 1000 - 1e-6 <= p["p50"] <= p["p90"] <= p["p99"] <= max(ttfts) * 1000 + 1e-6
    assert summary.request_throughput == len(ttfts) / 10.0


def test_a_rate_round_trips_through_its_json_form_inf_included():
    for summary in (summary_at(math.inf, 1.0), failed_rate(2.5, "timeout", "slow")):
        assert decode_rate(encode_rate(summary)) == summary


def test_the_servers_means_come_from_the_histogram_deltas():
    before = (
        'vllm:time_to_first_token_seconds_sum{model_name="m"} 1.0\n'
        'vllm:time_to_first_token_seconds_count{model_name="m"} 2.0\n'
    )
    after = (
        'vllm:time_to_first_token_seconds_sum{model_name="m"} 4.0\n'
        'vllm:time_to_first_token_seconds_count{model_name="m"} 5.0\n'
        'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0\n'
        "vllm:inter_token_latency_seconds_sum 0.5\nvllm:inter_token_latency_seconds_count 10\n"
    )
    assert server_means_ms(before, after) == {"ttft": 1000.0, "itl": 50.0}


# One label set's histogram in /metrics: its sum and count, whole numbers of seconds so that the
# oracle's sum is exact in any order.
label_sets = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=4)


@given(label_sets)
def test_a_histogram_totals_every_label_set_and_reads_past_comments(
    sets: list[tuple[int, int]],
) -> None:
    """vLLM writes `# HELP` and `# TYPE` lines and its buckets around each label set's samples;
    the totals are the sums over every label set, and zero where the histogram is absent."""
    lines = [f"# HELP {TTFT} Histogram of time to first token.", f"# TYPE {TTFT} histogram"]
    for engine, (total, count) in enumerate(sets):
        labels = f'{{engine="{engine}",model_name="m"}}'
        lines += [
            f'{TTFT}_bucket{{engine="{engine}",le="+Inf",model_name="m"}} {count}',
            "# a comment between the samples",
            f"{TTFT}_sum{labels} {total}",
            f"{TTFT}_count{labels} {count}",
        ]
    expected = HistogramTotals(sum(t for t, _ in sets), sum(c for _, c in sets))
    assert histogram_totals("\n".join(lines), TTFT) == expected
    assert histogram_totals("\n".join(lines), "vllm:absent_seconds") == HistogramTotals(0.0, 0.0)


@given(st.sampled_from(sorted(SHAPES)), st.integers(128, 8192), st.integers(0, 2**32 - 1))
def test_drawn_lengths_always_fit_the_context(name, context, seed):
    for drawn in draw_lengths(SHAPES[name], context, 20, seed):
        assert drawn.prompt_tokens >= 4 and drawn.output_tokens >= 8
        assert drawn.prompt_tokens + drawn.output_tokens < context


# An independent account of one rate's figures, by definition (numpy's default percentile is
# linear interpolation between the order statistics at (n - 1) * p / 100).
def percentile_by_hand(values: list[float], p: float) -> float:
    ordered = sorted(values)
    h = (len(ordered) - 1) * p / 100
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


def percentiles_by_hand(seconds: list[float]) -> dict[str, float]:
    return {f"p{p}": percentile_by_hand([s * 1000 for s in seconds], p) for p in (50, 90, 99)}


def met_by_hand(r: RequestTiming, sla: Sla) -> bool:
    if not r.success or r.ttft_s > sla.ttft_s:
        return False
    return (
        r.output_tokens < 2
        or (r.latency_s - r.ttft_s) / (r.output_tokens - 1) <= 1 / sla.token_rate
    )


def close(found: dict[str, float], expected: dict[str, float]) -> bool:
    return found.keys() == expected.keys() and all(
        math.isclose(found[k], expected[k], rel_tol=1e-9, abs_tol=1e-9) for k in expected
    )


@st.composite
def timings(draw: st.DrawFn) -> RequestTiming:
    """A request as the client reports it: failed or not, one token or many, its gaps its own
    (so that the per-request TPOT and the pooled ITLs differ)."""
    tokens = draw(st.integers(1, 6))
    gaps = tuple(draw(st.lists(st.floats(0.01, 1.0), min_size=tokens - 1, max_size=tokens - 1)))
    ttft = draw(st.sampled_from([0.5, 1.0, 1.5]) | st.floats(0.001, 3.0))
    ok = draw(st.booleans())
    return RequestTiming(ok, draw(st.integers(1, 50)), tokens, ttft, ttft + sum(gaps), gaps)


@given(
    st.lists(timings(), max_size=12),
    st.sampled_from([0.0, 2.5]) | st.floats(0.01, 100.0),
    st.sampled_from([0.5, 4.0, 20.0]),
)
def test_every_figure_of_a_rate_is_its_definition(requests, duration, token_rate):
    """Each field of a rate's summary, against the figure computed here by definition: failed
    requests count in the SLA's denominator and nowhere else, TPOT is per request (one-token
    requests have none), ITL pools every gap, a zero duration gives no throughput."""
    sla = Sla(ttft_s=1.0, token_rate=token_rate, attainment=0.9)
    found = summarise_rate(7.5, requests, duration, sla)
    done = [r for r in requests if r.success]
    failed = len(requests) - len(done)
    assert (found.rate, found.requests, found.completed, found.duration_s) == (
        7.5,
        len(requests),
        len(done),
        duration,
    )
    assert found.outcome == ("ok" if done else "error")
    assert found.message == (f"{failed} of {len(requests)} requests failed" if failed else "")
    if duration > 0:
        assert math.isclose(found.request_throughput, len(done) / duration)
        tokens = sum(r.output_tokens for r in done)
        assert math.isclose(found.output_throughput, tokens / duration)
    else:
        assert math.isnan(found.request_throughput) and math.isnan(found.output_throughput)
    ttfts = [r.ttft_s for r in done]
    tpots = [(r.latency_s - r.ttft_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    gaps = [g for r in done for g in r.itls_s]
    assert close(found.ttft_ms, percentiles_by_hand(ttfts) if ttfts else {})
    assert close(found.tpot_ms, percentiles_by_hand(tpots) if tpots else {})
    assert close(found.itl_ms, percentiles_by_hand(gaps) if gaps else {})
    means = {k: sum(v) / len(v) * 1000 for k, v in (("ttft", ttfts), ("itl", gaps)) if v}
    assert close(found.mean_ms, means)
    met = sum(met_by_hand(r, sla) for r in requests)
    assert found.sla_met == (met / len(requests) if requests else 0.0)
    assert (found.server_mean_ms, found.issued_rps) == ({}, None)


def test_a_request_at_either_limit_of_the_sla_meets_it():
    """Within means at most: a first token at exactly the TTFT limit and a TPOT of exactly
    1 / token rate both meet the SLA (0.25 s per token is exact in binary)."""
    sla = Sla(ttft_s=0.5, token_rate=4.0)
    assert meets_sla(RequestTiming(True, 5, 2, 0.5, 0.75, (0.25,)), sla)
    assert not meets_sla(RequestTiming(True, 5, 2, 0.5, 0.76, (0.26,)), sla)
    assert not meets_sla(RequestTiming(True, 5, 2, 0.51, 0.76, (0.25,)), sla)


def test_a_failed_rate_has_no_figure_at_all():
    assert failed_rate(2.5, "timeout", "slow") == RateSummary(
        rate=2.5,
        outcome="timeout",
        message="slow",
        requests=0,
        completed=0,
        duration_s=0.0,
        request_throughput=0.0,
        output_throughput=0.0,
        ttft_ms={},
        tpot_ms={},
        itl_ms={},
        sla_met=0.0,
        mean_ms={},
        server_mean_ms={},
        issued_rps=None,
    )


@given(st.lists(st.floats(0.0, 100.0), max_size=8), st.randoms())
def test_the_issue_rate_is_sends_per_second_between_the_first_and_the_last(starts, rng):
    shuffled = list(starts)
    rng.shuffle(shuffled)
    found = issue_rate(shuffled)
    if len(starts) < 2 or max(starts) == min(starts):
        assert found is None
    else:
        assert found is not None
        assert math.isclose(found, (len(starts) - 1) / (max(starts) - min(starts)))


def test_bisection_stops_at_exactly_its_resolution():
    """A bracket whose width is exactly the resolution (1 to 2 at 0.5) is narrow enough; a hair
    wider is not."""
    assert next_bisection_rate([summary_at(1, 1.0), summary_at(2, 0.0)], SLA, 0.5) is None
    assert next_bisection_rate([summary_at(1, 1.0), summary_at(2, 0.0)], SLA, 0.499) == 1.5
