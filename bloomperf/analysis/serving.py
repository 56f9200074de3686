"""Serving under load, judged as DeepSpeed-FastGen judges it: per-rate figures, the SLA, and the
effective throughput (the highest request rate whose requests still meet the SLA). No I/O.

A request meets the SLA when it succeeded, its first token came within ``ttft_s`` and the token
rate its user saw afterwards (``1 / TPOT``) was at least ``token_rate``. A rate meets the SLA
when at least ``attainment`` of the requests sent at that rate did (failures count against it).
Why the defaults are what they are: docs/serving.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from bloomperf.store.serving import RateSummary, RequestTiming, Sla

PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentiles_ms(values: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99 of ``values`` (seconds) in milliseconds; empty when there are none."""
    if not values:
        return {}
    return {f"p{p}": float(np.percentile(values, p)) * 1000.0 for p in PERCENTILES}


def meets_sla(request: RequestTiming, sla: Sla) -> bool:
    if not request.success or request.ttft_s > sla.ttft_s:
        return False
    tpot = request.tpot_s
    return tpot is None or tpot <= sla.tpot_s


def summarise_rate(
    rate: float, requests: Sequence[RequestTiming], duration_s: float, sla: Sla
) -> RateSummary:
    """The figures of one rate from its requests (``duration_s``: first send to last reply)."""
    done = [r for r in requests if r.success]
    span = duration_s if duration_s > 0 else math.nan
    itls = [gap for r in done for gap in r.itls_s]
    tpots = [t for r in done if (t := r.tpot_s) is not None]
    met = sum(meets_sla(r, sla) for r in requests)
    failed = len(requests) - len(done)
    return RateSummary(
        rate=rate,
        outcome="ok" if done else "error",
        message=f"{failed} of {len(requests)} requests failed" if failed else "",
        requests=len(requests),
        completed=len(done),
        duration_s=duration_s,
        request_throughput=len(done) / span,
        output_throughput=sum(r.output_tokens for r in done) / span,
        ttft_ms=percentiles_ms([r.ttft_s for r in done]),
        tpot_ms=percentiles_ms(tpots),
        itl_ms=percentiles_ms(itls),
        sla_met=met / len(requests) if requests else 0.0,
        mean_ms=means_ms({"ttft": [r.ttft_s for r in done], "itl": itls}),
    )


def issue_rate(start_times: Sequence[float]) -> float | None:
    """Requests per second the client actually sent (None under two requests): at rate inf,
    the most it can send on this machine, its headroom."""
    if len(start_times) < 2 or max(start_times) <= min(start_times):
        return None
    return (len(start_times) - 1) / (max(start_times) - min(start_times))


def means_ms(values: dict[str, list[float]]) -> dict[str, float]:
    return {key: float(np.mean(v)) * 1000.0 for key, v in values.items() if v}


def failed_rate(rate: float, outcome: str, message: str) -> RateSummary:
    """A rate that yielded no figures (the server died, the client timed out)."""
    return RateSummary(rate, outcome, message, 0, 0, 0.0, 0.0, 0.0, {}, {}, {}, 0.0)


def effective_throughput(summaries: Sequence[RateSummary], sla: Sla) -> float:
    """The highest offered rate that met the SLA with every lower rate met too (FastGen's
    effective throughput); 0.0 when even the lowest failed. A rate above a failing one that
    passes again is noise or a recovered server, not capacity, so it does not count."""
    best = 0.0
    for summary in sorted(summaries, key=lambda s: s.rate):
        if not summary.meets(sla):
            break
        best = summary.rate
    return best


def next_bisection_rate(
    summaries: Sequence[RateSummary], sla: Sla, resolution: float
) -> float | None:
    """The rate halfway between the highest passing and the lowest failing rate of the sweep
    so far, or None when they are within ``resolution`` (relative) or there is no such pair."""
    ordered = sorted(summaries, key=lambda s: s.rate)
    passing = effective_throughput(ordered, sla)
    # The first rate above the passing run failed: had it passed, the run would reach it.
    above = [s.rate for s in ordered if s.rate > passing]
    if not above or passing <= 0 or math.isinf(above[0]):
        return None
    low, high = passing, above[0]
    if (high - low) / high <= resolution:
        return None
    return (low + high) / 2.0
