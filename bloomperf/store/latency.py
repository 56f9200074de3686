"""Prefill and decode latency from per-step times (pure arithmetic, no I/O, no torch).

A cycle's steps are those ``bloomperf.measure.steptimer`` measured: the first is the prefill step
(time to first token, from the synchronised start of ``generate``), every later one a decode step
(time per output token). Medians, because one disturbed step or cycle must not move the figure;
percentiles by linear interpolation between order statistics (numpy's default), so p90 and p99
of a few hundred steps are stable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepSummary:
    ttft_ms: float  # median prefill step over cycles
    tpot_ms: float  # median decode step over every decode step of every cycle
    tpot_p90_ms: float
    tpot_p99_ms: float


def percentile(values: Sequence[float], percent: float) -> float:
    """The ``percent``-th percentile, linearly interpolated (numpy's ``linear`` method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * percent / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize_steps(cycles: Sequence[Sequence[float]]) -> StepSummary | None:
    """The summary of the cycles' step times, or None when a cycle has no decode step (one new
    token) or nothing was timed (an old results file, a failed cell)."""
    if not cycles or any(len(steps) < 2 for steps in cycles):
        return None
    decode = [ms for steps in cycles for ms in steps[1:]]
    return StepSummary(
        ttft_ms=statistics.median(steps[0] for steps in cycles),
        tpot_ms=statistics.median(decode),
        tpot_p90_ms=percentile(decode, 90.0),
        tpot_p99_ms=percentile(decode, 99.0),
    )


def per_cycle(cycles: Sequence[Sequence[float]]) -> dict[str, tuple[float, ...]]:
    """One figure per cycle for each judged metric: the statistics compare cycles, as they do
    for ms/token. Empty when the cycles have no decode step."""
    if not cycles or any(len(steps) < 2 for steps in cycles):
        return {}
    return {
        "ttft_ms": tuple(steps[0] for steps in cycles),
        "tpot_ms": tuple(statistics.median(steps[1:]) for steps in cycles),
        "tpot_p99_ms": tuple(percentile(steps[1:], 99.0) for steps in cycles),
    }


def tokens_per_s(ms_per_token: float | None) -> float | None:
    """Throughput: batch × new tokens ÷ cycle time, which is 1000 ÷ the blog's ms/token."""
    if not ms_per_token:
        return None
    return 1000.0 / ms_per_token
