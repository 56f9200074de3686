"""Paired A/B statistics: how much slower is B than A, from cycles measured in pairs.

``bloomperf ab`` measures one cycle of arm A and one of arm B back to back, many times. Each pair
gives one ratio ``B / A``; both cycles of a pair saw the same state of the machine, so slow drift
(another job starting, thermal throttling) cancels in the ratio instead of widening the interval.
The statistics work on ``log(B / A)``:

* the estimate is the Hodges-Lehmann estimator (the median of all pairwise means of the
  log-ratios): as robust as a median (a few disturbed cycles do not move it), but about as
  efficient as a mean on well-behaved data;
* its confidence interval comes from the Wilcoxon signed-rank distribution (exact up to
  ``EXACT_UP_TO`` pairs, the normal approximation above): no resampling, so it is cheap enough
  to recompute while the pairs are being measured.

Both assume only that the log-ratios are independent and symmetric about their centre, which
pairing makes plausible (the two arms' noise is alike). Pure functions: no I/O here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bloomperf.core.errors import BloomperfError

SLOWER = "slower"
FASTER = "faster"
SAME = "same"
INCONCLUSIVE = "inconclusive"

# Above this many pairs the signed-rank distribution is replaced by its normal approximation.
# Its critical rank is never above the exact one (the interval is never narrower): at 61-200
# pairs it is 0-1 ranks below at alpha 0.05, and within 1.4 % of the Walsh averages' count
# down to alpha 1e-5 (tests/test_paired_rules.py).
EXACT_UP_TO = 60


@dataclass(frozen=True)
class PairedEstimate:
    """``B / A`` (``ratio``), its confidence interval ``[low, high]``, from ``pairs`` pairs."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


def log_ratios(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """``log(b_i / a_i)`` for each pair; both sides must be positive finite numbers."""
    first = np.asarray(a, dtype=np.float64).reshape(-1)
    second = np.asarray(b, dtype=np.float64).reshape(-1)
    if first.size != second.size:
        raise BloomperfError(f"paired samples: {first.size} A values but {second.size} B values")
    if first.size == 0:
        raise BloomperfError("paired samples: no pairs to compare")
    for values in (first, second):
        if not np.all(np.isfinite(values)) or np.any(values <= 0.0):
            raise BloomperfError("paired samples: every value must be a positive finite number")
    result: np.ndarray = np.log(second) - np.log(first)
    return result


def estimate_paired(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.99
) -> PairedEstimate:
    """The Hodges-Lehmann ratio ``B / A`` with its signed-rank confidence interval."""
    if not 0.5 <= confidence < 1.0:
        raise BloomperfError(f"confidence: must be in [0.5, 1), found {confidence}")
    values = log_ratios(a, b)
    n = values.size
    walsh = walsh_averages(values)
    rank = critical_rank(n, 1.0 - confidence)
    # The interval runs from the rank-th smallest to the rank-th largest Walsh average.
    low, high = np.partition(walsh, [rank - 1, walsh.size - rank])[[rank - 1, walsh.size - rank]]
    centre = float(np.median(walsh))
    return PairedEstimate(
        ratio=math.exp(centre),
        low=math.exp(min(float(low), centre)),
        high=math.exp(max(float(high), centre)),
        pairs=int(n),
        confidence=confidence,
    )


def walsh_averages(values: np.ndarray) -> np.ndarray:
    """``(x_i + x_j) / 2`` for every ``i <= j``: the n(n+1)/2 values Hodges-Lehmann works on."""
    upper = np.triu_indices(values.size)
    result: np.ndarray = (values[upper[0]] + values[upper[1]]) / 2.0
    return result


def critical_rank(n: int, alpha: float) -> int:
    """The 1-based rank k such that [k-th smallest, k-th largest Walsh average] covers the
    centre with probability at least ``1 - alpha`` (at least 1: with very few pairs the
    interval is the whole range, and no verdict can come from it)."""
    if n <= EXACT_UP_TO:
        cdf = np.cumsum(signed_rank_distribution(n))
        # Largest t with P(T <= t) <= alpha / 2; the interval starts one rank above it.
        below = np.nonzero(cdf <= alpha / 2.0)[0]
        return int(below[-1]) + 1 if below.size else 1
    z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)
    mean = n * (n + 1) / 4.0
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    return max(1, math.floor(mean - z * sd + 0.5))


def signed_rank_distribution(n: int) -> np.ndarray:
    """P(T = t) for t = 0 … n(n+1)/2, T the Wilcoxon signed-rank statistic of n pairs."""
    probabilities = np.ones(1)
    for i in range(1, n + 1):
        grown = np.zeros(probabilities.size + i)
        grown[: probabilities.size] += probabilities
        grown[i:] += probabilities
        probabilities = grown / 2.0
    return probabilities


def decide(estimate: PairedEstimate, tolerance: float) -> str | None:
    """The verdict the interval already supports, or None while more pairs are needed.

    * ``slower``: the interval lies above 1 (B really is slower) and the estimate exceeds
      ``1 + tolerance`` (by enough to matter);
    * ``faster``: the mirror image;
    * ``same``: the whole interval lies within ``1 ± tolerance``: whatever the difference is,
      it is smaller than the tolerance.

    Requiring significance *and* size for slower keeps a tiny but real change (0.5 % from a new
    driver) from failing; requiring the whole interval inside the band for "same" keeps a
    too-short run from passing a change it could not see.
    """
    if not (math.isfinite(tolerance) and 0.0 < tolerance < 1.0):
        raise BloomperfError(f"tolerance: must be in (0, 1), found {tolerance}")
    if estimate.pairs < fewest_pairs(estimate.confidence):
        return None
    if estimate.low > 1.0 and estimate.ratio > 1.0 + tolerance:
        return SLOWER
    if estimate.high < 1.0 and estimate.ratio < 1.0 - tolerance:
        return FASTER
    if estimate.low > 1.0 - tolerance and estimate.high < 1.0 + tolerance:
        return SAME
    return None


def as_cost(estimate: PairedEstimate | None, higher_is_better: bool) -> PairedEstimate | None:
    """The estimate oriented so that above 1 is worse, for ``decide``'s rules written for a
    cost: for a metric where higher is better (a throughput) that is A/B, so ``slower`` (B
    worse) means B/A below 1 / (1 + tolerance); the interval's ends swap."""
    if estimate is None or not higher_is_better:
        return estimate
    return PairedEstimate(
        ratio=1.0 / estimate.ratio,
        low=1.0 / estimate.high,
        high=1.0 / estimate.low,
        pairs=estimate.pairs,
        confidence=estimate.confidence,
    )


def fewest_pairs(confidence: float) -> int:
    """Below this many pairs no interval reaches ``confidence`` (even [min, max] covers only
    ``1 - 2 / 2**n``): 6 pairs at 95 %, 8 at 99 %."""
    return math.ceil(math.log2(2.0 / (1.0 - confidence)) - 1e-9)


def final_verdict(estimate: PairedEstimate | None, tolerance: float) -> str:
    """``decide``, with "inconclusive" when the budget ran out before a decision."""
    if estimate is None:
        return INCONCLUSIVE
    return decide(estimate, tolerance) or INCONCLUSIVE


def first_look(min_pairs: int) -> int:
    """The pairs at the first look: ``min_pairs``, and never fewer than two (one pair has no
    spread to make an interval of)."""
    return max(min_pairs, 2)


def looks(min_pairs: int, max_pairs: int) -> int:
    """How many intervals one cell's comparison computes at most: one at each point of
    ``next_look``'s schedule up to ``max_pairs``, and a final one when the budget runs out
    between two points (the schedule ends on ``max_pairs`` itself, or it does not)."""
    points = []
    pairs = first_look(min_pairs)
    while pairs <= max_pairs:
        points.append(pairs)
        pairs = next_look(pairs)
    return len(points) + (0 if points and points[-1] == max_pairs else 1)


def look_confidence(confidence: float, min_pairs: int, max_pairs: int) -> float:
    """The confidence of each look's interval so that all looks together keep ``confidence``.

    Stopping as soon as an interval excludes 1 tests the same hypothesis at every look; with 25
    looks at 99 % each, an unchanged arm would be called different far more often than 1 % of
    the time. Splitting the error rate evenly over the scheduled looks (Bonferroni) bounds the
    overall rate by ``1 - confidence``, at the price of intervals about a third wider.
    """
    return 1.0 - (1.0 - confidence) / looks(min_pairs, max_pairs)


def next_look(pairs: int) -> int:
    """When to look at the interval again: after a quarter more pairs (at least one more).

    Looking after every pair would test the same hypothesis hundreds of times and inflate the
    false alarms; a geometric schedule keeps the looks to a few dozen over any run length.
    """
    return pairs + max(1, pairs // 4)
