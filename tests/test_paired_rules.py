"""The parts of ``ab``'s paired statistics that mutmut's first full run found unstated
(docs/testing.md): the Hodges-Lehmann estimate against its definition, the normal critical rank
against the exact one, the look schedule, and the error budget spread over the looks that
``ab`` really takes.
"""

from __future__ import annotations

import math
import statistics
from itertools import combinations_with_replacement

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.paired import (
    EXACT_UP_TO,
    PairedEstimate,
    as_cost,
    critical_rank,
    estimate_paired,
    first_look,
    log_ratios,
    look_confidence,
    looks,
    next_look,
    signed_rank_distribution,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.interleave import PairLog, Settings
from bloomperf.harness.matrix import Cell

# Ratios spread over a factor of e**2 either way, fixed: at up to 150 pairs every interval
# straddles 1 far beyond a 1 % tolerance, so a cell never decides and looks to its budget.
NOISE = np.exp(np.random.default_rng(0).normal(0.0, 2.0, 200))
ratios = st.lists(st.floats(0.5, 2.0), min_size=2, max_size=12)


@given(ratios)
def test_the_estimate_is_the_median_of_every_pairs_mean_log_ratio(values: list[float]) -> None:
    """Hodges-Lehmann by its definition: the median of (x_i + x_j) / 2 over i <= j."""
    logs = [math.log(v) for v in values]
    means = [(x + y) / 2 for x, y in combinations_with_replacement(logs, 2)]
    estimate = estimate_paired([1.0] * len(values), values, confidence=0.5)
    assert estimate.ratio == pytest.approx(math.exp(statistics.median(means)), rel=1e-9)


def exact_rank(n: int, alpha: float) -> int:
    cdf = np.cumsum(signed_rank_distribution(n))
    below = np.nonzero(cdf <= alpha / 2.0)[0]
    return int(below[-1]) + 1 if below.size else 1


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.001, 0.0004, 1e-5])
def test_the_normal_critical_rank_is_never_narrower_than_the_exact_one(alpha: float) -> None:
    """Above EXACT_UP_TO pairs the rank comes from the normal approximation: never above the
    exact distribution's rank (an interval never narrower than its level allows), and within
    1.5 % of the Walsh averages below it; at alpha 0.05 within one rank."""
    for n in [*range(EXACT_UP_TO + 1, EXACT_UP_TO + 41), 150, 200]:
        below = exact_rank(n, alpha) - critical_rank(n, alpha)
        assert 0 <= below <= 0.015 * n * (n + 1) / 2, (n, below)
        if alpha == 0.05:
            assert below <= 1, (n, below)


def test_a_vanishing_error_rate_widens_the_interval_to_the_whole_range() -> None:
    for n in (EXACT_UP_TO + 1, EXACT_UP_TO + 5):
        assert critical_rank(n, 1e-15) == 1


def test_one_pair_is_a_pair_and_none_is_refused() -> None:
    assert log_ratios([2.0], [3.0]).tolist() == pytest.approx([math.log(1.5)])
    with pytest.raises(BloomperfError, match=r"^paired samples: no pairs to compare$"):
        log_ratios([], [])
    with pytest.raises(BloomperfError, match=r"every value must be a positive finite number$"):
        log_ratios([1.0, 0.0], [1.0, 1.0])


def test_integer_readings_of_any_size_are_numbers() -> None:
    """Nanosecond counters arrive as Python ints, beyond int64: they are read as floats."""
    big = [10**20, 3 * 10**20]
    assert log_ratios(big, [2 * b for b in big]).tolist() == pytest.approx([math.log(2)] * 2)


@pytest.mark.parametrize("pairs", range(1, 300))
def test_the_next_look_is_a_quarter_more_pairs_and_at_least_one(pairs: int) -> None:
    step = next_look(pairs) - pairs
    assert isinstance(next_look(pairs), int)
    assert step == max(1, math.floor(pairs / 4))


def intervals_computed(min_pairs: int, max_pairs: int, stop_at: int) -> int:
    """How many intervals ``ab``'s own pair log computes for a cell that never decides, when
    the run stops after ``stop_at`` pairs (the budget, or its time)."""
    log = PairLog(
        Cell("accelerate", "fp32", 1),
        Settings(tolerance=0.01, min_pairs=min_pairs, max_pairs=max_pairs),
    )
    seen: list[object] = []
    for i in range(stop_at):
        log.add_pair({"a": 1.0, "b": float(NOISE[i])}, ("a", "b"))
        assert not log.decided()
        if log.estimate is not None and (not seen or seen[-1] is not log.estimate):
            seen.append(log.estimate)
    final = log.comparison("max-pairs", 0.0, {}).estimate
    if final is not None and (not seen or seen[-1] is not final):
        seen.append(final)
    return len(seen)


@settings(max_examples=60, deadline=None)
@given(min_pairs=st.integers(1, 30), extra=st.integers(0, 120), data=st.data())
def test_the_error_budget_is_spread_over_exactly_the_looks_ab_takes(
    min_pairs: int, extra: int, data: st.DataObject
) -> None:
    """``looks`` is the number of intervals a cell computes when it runs to its budget, and no
    cell that stops earlier computes more: each look's level keeps ``--confidence`` overall
    (Bonferroni) without widening the intervals for looks that never happen."""
    max_pairs = min_pairs + extra
    assert intervals_computed(min_pairs, max_pairs, max_pairs) == looks(min_pairs, max_pairs)
    stop_at = data.draw(st.integers(first_look(min_pairs), max(first_look(min_pairs), max_pairs)))
    assert intervals_computed(min_pairs, max_pairs, stop_at) <= looks(min_pairs, max_pairs)


@given(min_pairs=st.integers(1, 20))
def test_the_first_report_and_interval_come_at_min_pairs_or_two_at_least(min_pairs: int) -> None:
    """``--min-pairs 1`` or ``2``: progress is shown and the first interval computed at the
    second pair (one pair has no spread to make an interval of), not later; above two, at
    ``--min-pairs`` itself."""
    log = PairLog(
        Cell("accelerate", "fp32", 1), Settings(tolerance=0.01, min_pairs=min_pairs, max_pairs=400)
    )
    reported, looked = [], []
    for i in range(max(min_pairs, 2)):
        log.add_pair({"a": 1.0, "b": float(NOISE[i])}, ("a", "b"))
        reported.append(log.report_due())
        assert not log.decided()
        looked.append(log.estimate is not None)
    expected = [False] * (max(min_pairs, 2) - 1) + [True]
    assert reported == expected and looked == expected
    assert log.estimate is not None and log.estimate.pairs == max(min_pairs, 2)


@given(
    confidence=st.floats(0.5, 0.999),
    min_pairs=st.integers(1, 50),
    extra=st.integers(0, 3000),
)
def test_each_looks_level_splits_the_error_rate_evenly(
    confidence: float, min_pairs: int, extra: int
) -> None:
    level = look_confidence(confidence, min_pairs, min_pairs + extra)
    assert confidence <= level < 1.0
    assert (1.0 - level) * looks(min_pairs, min_pairs + extra) == pytest.approx(1.0 - confidence)


ends = st.floats(min_value=0.05, max_value=20.0, allow_nan=False)


@given(ends, ends, ends, st.integers(1, 500), st.floats(0.5, 0.999))
def test_a_throughputs_estimate_is_read_as_a_cost_by_inverting_it(
    x: float, y: float, z: float, pairs: int, confidence: float
) -> None:
    """For a higher-is-better figure, B/A becomes A/B: the ratio inverts and the interval's
    ends swap (1/high is the new low); a cost's estimate, and no estimate, pass unchanged."""
    low, ratio, high = sorted((x, y, z))
    estimate = PairedEstimate(ratio, low, high, pairs, confidence)
    cost = as_cost(estimate, higher_is_better=True)
    assert cost is not None
    assert cost.ratio * ratio == pytest.approx(1.0)
    assert cost.low * high == pytest.approx(1.0) and cost.high * low == pytest.approx(1.0)
    assert cost.low <= cost.ratio <= cost.high
    assert (cost.pairs, cost.confidence) == (pairs, confidence)
    assert as_cost(estimate, higher_is_better=False) is estimate
    assert as_cost(None, higher_is_better=True) is None
