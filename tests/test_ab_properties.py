"""Properties of `ab` and `bisect`, over the whole space of their inputs (no process started).

* Scaling every sample of arm B by ``r`` makes `ab` report ``r``: the estimate, each arm's
  median, the results JSON and the table; and the verdict follows ``r`` against the tolerance.
* `ab` fails (exit 1) when either arm did not run: out of memory, an error or a timeout, in any
  cell of the comparison.
* A bisect step of several cells is slower when ANY cell is slower (the evidence is the worst
  slower cell), and the search names the first slower version wherever it lies.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from bloomperf.analysis import paired
from bloomperf.analysis.paired import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    PairedEstimate,
    decide,
    estimate_paired,
)
from bloomperf.cli.ab import comparison_json, exit_code, render_table
from bloomperf.cli.bisect import SKIPPED, Step, search, step_from
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.interleave import (
    ARMS,
    Comparison,
    PairLog,
    Settings,
    failure,
)
from bloomperf.harness.matrix import Cell
from bloomperf.store.results import CellResult, Outcome

TOLERANCE = 0.05
SETTINGS = Settings(tolerance=TOLERANCE, confidence=0.95, min_pairs=8, max_pairs=200)

arm_a = st.lists(st.floats(1.0, 50.0), min_size=12, max_size=40)
ratios = st.one_of(st.floats(0.3, 0.9), st.floats(1.1, 3.0), st.just(1.0))


def noisy(values: list[float], seed: int) -> list[float]:
    """``values`` with a few percent of symmetric cycle noise."""
    rng = random.Random(seed)
    return [v * (1.0 + rng.uniform(-0.02, 0.02)) for v in values]


def compared(a: list[float], r: float, cell: Cell) -> Comparison:
    """The pairs of one cell through the engine's own log, B every A cycle times ``r``."""
    log = PairLog(cell, SETTINGS)
    arms = {arm: CellResult(cell.backend, cell.dtype, cell.batch_size, Outcome.OK) for arm in ARMS}
    for value in a:
        log.add_pair({"a": value, "b": value * r}, ("a", "b"))
        log.decided()
    return log.comparison("decided", 1.0, arms)


@settings(max_examples=80, deadline=None)
@given(a=arm_a, r=ratios, seed=st.integers(0, 10**6))
def test_scaling_every_sample_of_arm_b_makes_ab_report_the_factor(
    a: list[float], r: float, seed: int
) -> None:
    values = noisy(a, seed)
    estimate = estimate_paired(values, [v * r for v in values], 0.99)
    assert abs(estimate.ratio / r - 1.0) < 1e-9
    assert estimate.low <= r * (1 + 1e-9) and estimate.high >= r * (1 - 1e-9)
    comparison = compared(values, r, Cell("accelerate", "bf16", 4))
    assert comparison.estimate is not None
    assert abs(comparison.estimate.ratio / r - 1.0) < 1e-9
    median_a, median_b = comparison.median("a"), comparison.median("b")
    assert median_a is not None and median_b is not None
    assert abs(median_b / median_a / r - 1.0) < 1e-9
    document = comparison_json(comparison)
    assert abs(document["ratio"] / r - 1.0) < 1e-9
    assert document["low"] <= r * (1 + 1e-9) and document["high"] >= r * (1 - 1e-9)
    assert f"{r:.3f}" in render_table([comparison], SETTINGS)
    expected = SLOWER if r > 1 + TOLERANCE else FASTER if r < 1 - TOLERANCE else SAME
    assert comparison.verdict == expected
    assert exit_code([comparison], fail_inconclusive=True) == (1 if expected == SLOWER else 0)


@settings(max_examples=40, deadline=None)
@given(a=arm_a, r=st.floats(0.3, 3.0), scale=st.floats(0.01, 100.0))
def test_the_ratio_does_not_depend_on_the_units_of_both_arms(
    a: list[float], r: float, scale: float
) -> None:
    b = noisy([v * r for v in a], 1)
    one = estimate_paired(a, b, 0.99)
    other = estimate_paired([v * scale for v in a], [v * scale for v in b], 0.99)
    assert abs(one.ratio - other.ratio) < 1e-9 * one.ratio
    swapped = estimate_paired(b, a, 0.99)
    assert abs(swapped.ratio * one.ratio - 1.0) < 1e-9


FAILURES = (Outcome.OOM, Outcome.ERROR, Outcome.TIMEOUT)


@settings(max_examples=60, deadline=None)
@given(
    arm=st.sampled_from(ARMS),
    outcome=st.sampled_from(FAILURES),
    r=ratios,
    position=st.integers(0, 3),
    cells=st.integers(1, 4),
)
def test_ab_fails_when_either_arm_did_not_run(
    arm: str, outcome: Outcome, r: float, position: int, cells: int
) -> None:
    batch = 2 ** min(position, cells - 1)
    results = {
        name: CellResult("accelerate", "bf16", batch, outcome if name == arm else Outcome.OK)
        for name in ARMS
    }
    failed = failure(results)
    assert failed is not None
    assert failed.outcome is outcome and f"arm {arm.upper()}" in failed.message
    others = [compared([10.0] * 12, 1.0, Cell("accelerate", "bf16", 2**i)) for i in range(cells)]
    others[min(position, cells - 1)] = failed
    for inconclusive in (False, True):
        assert exit_code(others, fail_inconclusive=inconclusive) == 1
    # A failure is skipped, never a verdict, in a bisect step.
    assert step_from("1.1", others, None).verdict == SKIPPED


def test_every_arm_that_ran_passes_no_failure() -> None:
    results = {name: CellResult("accelerate", "bf16", 1, Outcome.OK) for name in ARMS}
    assert failure(results) is None


@settings(max_examples=80, deadline=None)
@given(
    factors=st.lists(st.sampled_from((0.5, 1.0, 1.5, 2.5)), min_size=1, max_size=5),
)
def test_a_bisect_step_is_slower_when_any_cell_is_slower(factors: list[float]) -> None:
    comparisons = [
        compared([10.0 + i for i in range(12)], f, Cell("accelerate", "bf16", 2**i))
        for i, f in enumerate(factors)
    ]
    step = step_from("1.1", comparisons, None)
    if any(f > 1 + TOLERANCE for f in factors):
        assert step.verdict == SLOWER
        worst = max(range(len(factors)), key=lambda i: factors[i])
        assert step.message == comparisons[worst].cell.id
        assert step.ratio is not None and abs(step.ratio - factors[worst]) < 1e-9
    elif all(f < 1 - TOLERANCE for f in factors):
        assert step.verdict == FASTER
    else:
        assert step.verdict == SAME


def test_an_inconclusive_cell_keeps_the_step_from_passing() -> None:
    sure = compared([10.0] * 12, 1.0, Cell("accelerate", "bf16", 1))
    unsure = compared([10.0, 30.0, 10.0, 30.0], 1.0, Cell("accelerate", "bf16", 2))
    assert unsure.verdict == INCONCLUSIVE
    assert step_from("1.1", [sure, unsure], None).verdict == INCONCLUSIVE


def oracle(versions: list[str], first: int, skipped: set[int]) -> Callable[[str], Step]:
    """Each version's verdict from where it lies; a version tested twice fails the test (a
    step is minutes of measurement: the search must never spend one on a known answer)."""
    tested: set[str] = set()

    def test(version: str) -> Step:
        assert version not in tested, f"{version} tested twice"
        tested.add(version)
        index = versions.index(version)
        if index in skipped:
            return Step(version, SKIPPED)
        return Step(version, SLOWER if index >= first else SAME, 1.0, 1.0, 1.0, 10)

    return test


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(3, 30))
def test_bisect_names_the_first_slower_version_wherever_it_lies(
    data: st.DataObject, n: int
) -> None:
    versions = [f"1.{i}" for i in range(n)]
    first = data.draw(st.integers(1, n - 1))
    skipped = data.draw(st.sets(st.integers(1, n - 2), max_size=n // 3)) - {first, first - 1}
    finding, steps = search(versions, oracle(versions, first, skipped))
    assert steps[0].version == versions[-1]
    assert finding.first_bad == versions[first]
    assert finding.last_good == versions[first - 1]
    assert finding.ambiguous == ()
    # A binary search: BAD, then at most ceil(log2(n - 1)) judged steps over the n - 2
    # versions between (one more where a skipped version moved a midpoint aside); each
    # skipped version costs its own step once (the oracle refuses a second).
    judged = [s for s in steps if s.verdict != SKIPPED]
    assert len(judged) <= 1 + math.ceil(math.log2(n - 1)) + bool(skipped)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(3, 20))
def test_skipped_neighbours_leave_the_candidates_between_them(data: st.DataObject, n: int) -> None:
    versions = [f"1.{i}" for i in range(n)]
    first = data.draw(st.integers(1, n - 1))
    skipped = data.draw(st.sets(st.integers(1, n - 2), min_size=1))
    finding, _ = search(versions, oracle(versions, first, skipped))
    assert finding.first_bad is not None
    bad, good = versions.index(finding.first_bad), versions.index(finding.last_good)
    # The truth lies in the interval the search leaves, and only skipped versions lie inside it.
    assert good < first <= bad
    assert all(i in skipped for i in range(good + 1, bad))
    assert finding.ambiguous == tuple(versions[i] for i in range(good + 1, bad))


def brute_walsh(values: list[float]) -> list[float]:
    """Every ``(x_i + x_j) / 2`` with ``i <= j``, by two plain loops, sorted."""
    n = len(values)
    return sorted((values[i] + values[j]) / 2 for i in range(n) for j in range(i, n))


def scipy_cdf(n: int, t: int) -> float:
    """``P(T+ <= t)`` for the signed-rank statistic of ``n`` pairs, from scipy's exact test:
    signed ranks ``±1 … ±n`` whose positive ranks sum to ``t`` (taken greedily from the top)."""
    signs, left = [], t
    for rank in range(n, 0, -1):
        signs.append(rank if rank <= left else -rank)
        left -= rank if rank <= left else 0
    result = scipy_stats.wilcoxon(signs, alternative="less", method="exact")
    return float(result.pvalue)


def scipy_critical_rank(n: int, alpha: float) -> int:
    """One above the largest ``t`` with ``P(T+ <= t) <= alpha / 2`` (1 when there is none), by
    bisection over scipy's exact distribution."""
    if scipy_cdf(n, 0) > alpha / 2:
        return 1
    low, high = 0, n * (n + 1) // 2  # cdf(low) <= alpha / 2 < cdf(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if scipy_cdf(n, middle) <= alpha / 2 else (low, middle)
    return low + 1


def wilcoxon_rejects(values: list[float], shift: float, alpha: float) -> bool:
    """scipy's exact two-sided signed-rank test of ``values - shift`` rejects at ``alpha``."""
    moved = [v - shift for v in values]
    return float(scipy_stats.wilcoxon(moved, method="exact").pvalue) <= alpha


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(st.floats(1.0, 50.0), min_size=6, max_size=paired.EXACT_UP_TO),
    r=st.floats(0.5, 2.0),
    confidence=st.sampled_from((0.9, 0.95, 0.99)),
    seed=st.integers(0, 10**6),
)
def test_the_interval_is_the_set_of_shifts_wilcoxon_does_not_reject(
    a: list[float], r: float, confidence: float, seed: int
) -> None:
    """The oracle is scipy's exact Wilcoxon test and Walsh averages by brute force: the
    Hodges-Lehmann ratio is the median Walsh average; a shift just inside either end of the
    interval is not rejected at 1 - confidence, one just outside is (where a gap allows it)."""
    b = noisy([v * r for v in a], seed)
    estimate = estimate_paired(a, b, confidence)
    logs = [math.log(y) - math.log(x) for x, y in zip(a, b, strict=True)]
    walsh = brute_walsh(logs)
    alpha = 1.0 - confidence
    assert estimate.ratio == pytest.approx(math.exp(statistics.median(walsh)), rel=1e-12)
    rank = scipy_critical_rank(len(a), alpha)
    assert estimate.low == pytest.approx(math.exp(walsh[rank - 1]), rel=1e-12)
    assert estimate.high == pytest.approx(math.exp(walsh[-rank]), rel=1e-12)
    # Inverting the test: a shift in the gap just inside the low end is accepted, one in the gap
    # just below it is rejected (a gap too narrow to hold a shift apart from both ends is skipped).
    inside = (walsh[rank - 1], walsh[rank])
    outside = (walsh[rank - 2], walsh[rank - 1]) if rank >= 2 else None
    if inside[1] - inside[0] > 1e-9:
        assert not wilcoxon_rejects(logs, sum(inside) / 2, alpha)
    if outside is not None and outside[1] - outside[0] > 1e-9:
        assert wilcoxon_rejects(logs, sum(outside) / 2, alpha)
    assert estimate.pairs == len(a) and estimate.confidence == confidence


@pytest.mark.parametrize("n", [4, 6, 7, 10, 25, 59, 60])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1, 0.25])
def test_the_critical_rank_is_the_exact_signed_rank_quantile(n: int, alpha: float) -> None:
    """Up to EXACT_UP_TO pairs: scipy's exact signed-rank distribution gives the same rank."""
    assert paired.critical_rank(n, alpha) == scipy_critical_rank(n, alpha)


@pytest.mark.parametrize("n", [61, 80, 150])
@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_above_the_exact_range_the_normal_rank_is_near_the_exact(n: int, alpha: float) -> None:
    """Within 0.2 % of the n(n+1)/2 Walsh averages of scipy's exact rank (no continuity
    correction: 3 ranks of 1891 at 61 pairs and 1 %, 5 of 11325 at 150)."""
    exact = scipy_critical_rank(n, alpha)
    assert abs(paired.critical_rank(n, alpha) - exact) <= 0.002 * n * (n + 1) / 2


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-5.0, 5.0, allow_subnormal=False), min_size=1, max_size=30))
def test_walsh_averages_are_every_pair_mean_once(values: list[float]) -> None:
    produced = sorted(paired.walsh_averages(np.asarray(values)).tolist())
    assert produced == pytest.approx(brute_walsh(values), rel=1e-12, abs=1e-300)


def test_too_few_pairs_for_any_critical_value_give_the_whole_range() -> None:
    assert paired.critical_rank(3, 0.01) == 1


@pytest.mark.parametrize(
    ("confidence", "pairs"), [(0.5, 2), (0.75, 3), (0.875, 4), (0.95, 6), (0.99, 8)]
)
def test_the_fewest_pairs_whose_range_reaches_the_confidence(confidence: float, pairs: int) -> None:
    assert paired.fewest_pairs(confidence) == pairs
    assert 1 - 2 / 2**pairs >= confidence - 1e-12 > 1 - 2 / 2 ** (pairs - 1)


def sure(ratio: float, low: float, high: float) -> PairedEstimate:
    return PairedEstimate(ratio, low, high, 50, 0.95)


@pytest.mark.parametrize("tolerance", [0.02, 0.05, 0.2])
def test_the_limits_of_decide_are_strict(tolerance: float) -> None:
    up, down = 1.0 + tolerance, 1.0 - tolerance
    assert decide(sure(up, 1.001, up + 1), tolerance) is None  # exactly at the tolerance
    assert decide(sure(up + 0.01, 1.0, up + 1), tolerance) is None  # interval touches 1
    assert decide(sure(up + 0.01, 1.001, up + 1), tolerance) == SLOWER
    assert decide(sure(down, down - 0.5, 0.999), tolerance) is None
    assert decide(sure(down - 0.01, down - 0.5, 1.0), tolerance) is None
    assert decide(sure(down - 0.01, down - 0.5, 0.999), tolerance) == FASTER
    # Faster needs both a sure interval and a large enough change.
    assert decide(sure(0.999, down - 0.5, 0.9995), tolerance) is None
    assert decide(sure(down - 0.01, down - 0.5, 1.5), tolerance) is None
    # Same: the whole interval strictly inside 1 ± tolerance.
    assert decide(sure(1.0, down + 1e-6, up - 1e-6), tolerance) == SAME
    assert decide(sure(1.0, down, up - 1e-6), tolerance) is None
    assert decide(sure(1.0, down + 1e-6, up), tolerance) is None


@pytest.mark.parametrize("tolerance", [0.0, 1.0, 1.5, float("nan"), float("inf")])
def test_decide_refuses_a_tolerance_outside_zero_to_one(tolerance: float) -> None:
    with pytest.raises(BloomperfError, match=r"^tolerance: must be in \(0, 1\)"):
        decide(sure(1.0, 0.9, 1.1), tolerance)


@pytest.mark.parametrize("confidence", [0.49, 1.0, 1.5])
def test_estimate_paired_refuses_a_confidence_outside_its_range(confidence: float) -> None:
    with pytest.raises(BloomperfError, match=r"^confidence: must be in \[0\.5, 1\)"):
        estimate_paired([1.0] * 8, [1.0] * 8, confidence)
    assert estimate_paired([1.0] * 8, [2.0] * 8, 0.5).ratio == pytest.approx(2.0)


def test_a_slower_step_is_told_by_its_slower_cell_not_a_wilder_inconclusive_one() -> None:
    """Beside a surely slower cell, an inconclusive cell whose estimate is larger still: the step
    is slower, and its ratio and cell are the slower cell's (the one that decided it)."""
    slower = compared([10.0 + i for i in range(12)], 1.5, Cell("accelerate", "bf16", 1))
    wild = PairLog(Cell("accelerate", "bf16", 2), SETTINGS)
    for b in (40.0, 8.0, 40.0, 9.0, 45.0):
        wild.add_pair({"a": 10.0, "b": b}, ("a", "b"))
    unsure = wild.comparison("max-pairs", 1.0, {})
    assert slower.verdict == SLOWER and unsure.verdict == INCONCLUSIVE
    assert unsure.estimate is not None and slower.estimate is not None
    assert unsure.estimate.ratio > slower.estimate.ratio
    for order in ([slower, unsure], [unsure, slower]):
        step = step_from("1.1", order, None)
        assert step.verdict == SLOWER
        assert step.message == slower.cell.id
        assert step.ratio == slower.estimate.ratio


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(st.floats(5.0, 50.0), min_size=3, max_size=12),
    outlier=st.floats(1e3, 1e6),
    position=st.integers(0, 11),
)
def test_an_arms_figure_and_a_rounds_figure_are_medians(
    a: list[float], outlier: float, position: int
) -> None:
    """What ``ab`` shows per arm, and the value one round of groups mode pairs, are medians:
    one disturbed cycle leaves them within the other cycles."""
    log = PairLog(Cell("accelerate", "bf16", 1), SETTINGS)
    for value in a:
        log.add_pair({"a": value, "b": value * 1.1}, ("a", "b"))
    calm = log.comparison("max-pairs", 1.0, {})
    assert calm.median("a") == statistics.median(a)
    assert calm.median("b") == pytest.approx(statistics.median(a) * 1.1)
    disturbed = [*a[:position], outlier, *a[position:]]
    noisy = PairLog(Cell("accelerate", "bf16", 1), SETTINGS)
    for value in disturbed:
        noisy.add_pair({"a": value, "b": value}, ("a", "b"))
    shown = noisy.comparison("max-pairs", 1.0, {}).median("a")
    assert shown is not None and min(a) <= shown <= max(a)
    # A round of groups mode: each arm's cell of the round, one of its cycles disturbed.
    rounds = PairLog(Cell("accelerate", "bf16", 1), SETTINGS)
    cells = {
        arm: CellResult("accelerate", "bf16", 1, Outcome.OK, tuple(values))
        for arm, values in (("a", disturbed), ("b", a))
    }
    rounds.add_round(cells, ("b", "a"))
    assert rounds.ratios["a"] == [statistics.median(disturbed)]
    assert min(a) <= rounds.ratios["a"][0] <= max(a)
    assert rounds.ratios["b"] == [statistics.median(a)]
    assert len(rounds.samples) == len(disturbed) + len(a)


@settings(max_examples=80, deadline=None)
@given(
    tolerance=st.floats(0.001, 0.9),
    delta=st.floats(1e-9, 1e-3),
    sure_low=st.floats(1e-9, 0.5),
)
def test_decide_at_the_tolerance_edge_just_inside_and_just_outside(
    tolerance: float, delta: float, sure_low: float
) -> None:
    """A sure interval (wholly above or below 1): just past the tolerance is a verdict, just
    inside it is none; a band just inside 1 ± tolerance is "same", one touching it is not."""
    up, down = 1.0 + tolerance, 1.0 - tolerance
    above, below = 1.0 + sure_low * tolerance, 1.0 - sure_low * tolerance
    assert decide(sure(up + delta, above, up + 1), tolerance) == SLOWER
    assert decide(sure(up - delta, above, up + 1), tolerance) is None
    assert decide(sure(down - delta, down / 2, below), tolerance) == FASTER
    assert decide(sure(down + delta, down / 2, below), tolerance) is None
    assert decide(sure(1.0, down + delta, up - delta), tolerance) == SAME
    assert decide(sure(1.0, down - delta, up - delta), tolerance) is None


bad_values = st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -1.0])


@settings(max_examples=60, deadline=None)
@given(a=arm_a, bad=bad_values, where=st.integers(0, 100), arm=st.sampled_from("ab"))
def test_a_nan_inf_or_non_positive_cycle_in_either_arm_is_refused(
    a: list[float], bad: float, where: int, arm: str
) -> None:
    b = list(a)
    spoilt = a if arm == "a" else b
    spoilt[where % len(spoilt)] = bad
    with pytest.raises(BloomperfError, match=r"^paired samples: every value"):
        estimate_paired(a, b, 0.95)


def test_no_pairs_are_refused_and_one_pair_decides_nothing() -> None:
    with pytest.raises(BloomperfError, match=r"^paired samples: no pairs"):
        estimate_paired([], [], 0.95)
    one = estimate_paired([2.0], [3.0], 0.95)
    assert one.ratio == pytest.approx(1.5) and one.pairs == 1
    assert decide(one, TOLERANCE) is None


@settings(max_examples=40, deadline=None)
@given(value=st.floats(1.0, 50.0), n=st.integers(8, 40), r=st.floats(0.5, 2.0))
def test_tied_pairs_give_exactly_their_common_ratio(value: float, n: int, r: float) -> None:
    estimate = estimate_paired([value] * n, [value * r] * n, 0.95)
    assert estimate.ratio == pytest.approx(r, rel=1e-12)
    assert estimate.low == pytest.approx(r, rel=1e-12) == estimate.high
