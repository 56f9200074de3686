"""Properties of the verdict statistics that mutmut's first run showed no test stated.

* The bootstrap's vectorised median of a resample is the plain median of that resample, for an
  odd and an even number of samples alike.
* The interval's tails each hold ``(1 - confidence) / 2`` of the bootstrap ratios.
* The interval lies within the ratios the samples themselves allow.
* ``classify_ratio``'s limits are strict: a ratio exactly at the tolerance, or an interval
  touching ``1 + min_effect``, is "same".
* For a higher-is-better metric (a throughput) the verdicts are mirrored: a fall beyond the
  tolerance regressed, a rise improved, and "same" stays "same".
* Each refusal names what it refuses (the one line a user sees).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis import stats
from bloomperf.analysis.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    IMPROVED,
    REGRESSED,
    SAME,
    RatioEstimate,
    classify_ratio,
    coefficient_of_variation,
    estimate_ratio,
    measure_noise,
    run_spread,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import HIGHER, LOWER

samples = st.lists(st.floats(0.5, 50.0), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(values=samples, seed=st.integers(0, 2**32 - 1))
def test_the_bootstrap_median_of_each_resample_is_its_plain_median(
    values: list[float], seed: int
) -> None:
    ordered = np.sort(np.asarray(values))
    fast = stats._bootstrap_medians(ordered, 50, np.random.default_rng(seed))
    picks = np.random.default_rng(seed).integers(0, ordered.size, size=(50, ordered.size))
    plain = np.median(ordered[picks], axis=1)
    assert np.allclose(fast, plain, rtol=1e-12, atol=0)


def plain_bootstrap(values: list[float], rng: np.random.Generator) -> np.ndarray:
    """The definition, not the production shortcut: ``DEFAULT_RESAMPLES`` resamples of the
    sorted values with replacement, each reduced by ``np.median``."""
    ordered = np.sort(np.asarray(values))
    picks = rng.integers(0, ordered.size, size=(DEFAULT_RESAMPLES, ordered.size))
    medians: np.ndarray = np.median(ordered[picks], axis=1)
    return medians


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.5, 50.0), min_size=1, max_size=12),
    baseline=st.one_of(
        st.floats(0.5, 50.0), st.lists(st.floats(0.5, 50.0), min_size=1, max_size=12)
    ),
    confidence=st.sampled_from((0.8, 0.9, 0.95, 0.99)),
)
def test_each_tail_of_the_interval_holds_its_share_of_the_bootstrap(
    values: list[float], baseline: float | list[float], confidence: float
) -> None:
    """Against a baseline figure only the samples are resampled; against baseline samples both
    sides are, the baseline's resamples drawn after the samples' from the one seeded generator."""
    estimate = estimate_ratio(values, baseline, confidence)
    rng = np.random.default_rng(DEFAULT_SEED)
    ratios = plain_bootstrap(values, rng)
    if isinstance(baseline, float):
        ratios = ratios / baseline
        point = float(np.median(values)) / baseline
    else:
        ratios = ratios / plain_bootstrap(baseline, rng)
        point = float(np.median(values) / np.median(baseline))
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    assert estimate.ratio == pytest.approx(point, rel=1e-12)
    assert estimate.low == pytest.approx(min(low, point), rel=1e-12)
    assert estimate.high == pytest.approx(max(high, point), rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(values=samples, reference=st.one_of(st.floats(0.5, 50.0), samples))
def test_the_interval_lies_within_what_the_samples_allow(
    values: list[float], reference: float | list[float]
) -> None:
    estimate = estimate_ratio(values, reference)
    ref = [reference] if isinstance(reference, float) else reference
    lowest, highest = min(values) / max(ref), max(values) / min(ref)
    assert lowest * (1 - 1e-12) <= estimate.low <= estimate.ratio <= estimate.high
    assert estimate.high <= highest * (1 + 1e-12)
    assert estimate.ratio == pytest.approx(float(np.median(values) / np.median(ref)))


@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.1])
@pytest.mark.parametrize("min_effect", [0.0, 0.02])
def test_the_limits_of_classify_ratio_are_strict(tolerance: float, min_effect: float) -> None:
    up, down = 1.0 + tolerance, 1.0 - tolerance
    sure_up, sure_down = max(up, 1.0 + min_effect) + 0.01, min(down, 1.0 - min_effect) - 0.01
    # Exactly at the tolerance: same; just past it, with a sure interval: a verdict.
    assert classify_ratio(RatioEstimate(up, sure_up, sure_up + 1), tolerance, min_effect) == SAME
    assert classify_ratio(RatioEstimate(down, 0.1, sure_down), tolerance, min_effect) == SAME
    assert classify_ratio(RatioEstimate(up + 0.02, sure_up, 9), tolerance, min_effect) == REGRESSED
    assert classify_ratio(RatioEstimate(down - 0.02, 0.1, sure_down), tolerance, min_effect) == (
        IMPROVED
    )
    # The interval touching 1 + min_effect (or 1 - min_effect) is not sure: same.
    far_up, far_down = up + 0.5, max(down - 0.5, 0.01)
    edge_up, edge_down = 1.0 + min_effect, 1.0 - min_effect
    assert classify_ratio(RatioEstimate(far_up, edge_up, 9), tolerance, min_effect) == SAME
    assert classify_ratio(RatioEstimate(far_down, 0.01, edge_down), tolerance, min_effect) == SAME


MIRROR = {REGRESSED: IMPROVED, IMPROVED: REGRESSED, SAME: SAME}


@given(
    ratio=st.floats(0.05, 20.0),
    spread=st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 0.5)),
    tolerance=st.floats(0.0, 0.5),
    min_effect=st.floats(0.0, 0.2),
)
def test_a_higher_is_better_metric_reads_each_verdict_the_other_way(
    ratio: float, spread: tuple[float, float], tolerance: float, min_effect: float
) -> None:
    estimate = RatioEstimate(ratio, ratio * (1 - spread[0]), ratio * (1 + spread[1]))
    lower = classify_ratio(estimate, tolerance, min_effect, direction=LOWER)
    assert classify_ratio(estimate, tolerance, min_effect) == lower  # lower is the default
    assert classify_ratio(estimate, tolerance, min_effect, direction=HIGHER) == MIRROR[lower]


@given(factor=st.floats(1.5, 5.0), tolerance=st.sampled_from((0.0, 0.05, 0.15, 0.25)))
def test_a_throughput_that_fell_regressed_and_one_that_rose_improved(
    factor: float, tolerance: float
) -> None:
    """Samples a factor apart, five cycles each, as ``compare`` hands them to the verdict."""
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    fell = estimate_ratio([v / factor for v in base], base)
    rose = estimate_ratio([v * factor for v in base], base)
    assert classify_ratio(fell, tolerance, direction=HIGHER) == REGRESSED
    assert classify_ratio(rose, tolerance, direction=HIGHER) == IMPROVED
    same = estimate_ratio(base[::-1], base)
    assert classify_ratio(same, tolerance, direction=HIGHER) == SAME


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: estimate_ratio([], 1.0), "measured samples: no values"),
        (lambda: estimate_ratio([1.0], 0.0), "baseline: every value"),
        (lambda: estimate_ratio([1.0], [1.0, -2.0]), "baseline samples: every value"),
        (lambda: estimate_ratio([1.0], 1.0, 0.0), "confidence: must be between 0 and 1"),
        (lambda: estimate_ratio([1.0], 1.0, 1.0), "confidence: must be between 0 and 1"),
        (lambda: estimate_ratio([1.0], 1.0, 1.5), "confidence"),
        (lambda: estimate_ratio([1.0], 1.0, resamples=0), "resamples: must be at least 1"),
        (lambda: classify_ratio(RatioEstimate(1, 1, 1), 0.05, 1.0), "min effect: must be in"),
        (lambda: classify_ratio(RatioEstimate(1, 1, 1), 0.05, float("nan")), "min effect"),
        (lambda: classify_ratio(RatioEstimate(1, 1, 1), 0.05, 1.5), "min effect"),
        (lambda: classify_ratio(RatioEstimate(1, 1, 1), 1.0), "tolerance: must be in"),
        (lambda: coefficient_of_variation([]), "samples: no values"),
        (lambda: run_spread([0.0]), "run medians: every value"),
        (lambda: measure_noise([[1.0], []]), "samples: no values"),
    ],
)
def test_each_refusal_names_what_it_refuses(call: object, names: str) -> None:
    with pytest.raises(BloomperfError, match=f"^{names}"):
        call()  # type: ignore[operator]


def test_one_resample_and_one_value_are_enough() -> None:
    assert estimate_ratio([2.0], 1.0, resamples=1).ratio == 2.0
    assert coefficient_of_variation([3.0]) == 0.0
    noise = measure_noise([[1.0, 1.1], [1.0, 1.2], [1.1, 1.0]])
    assert noise.runs == 3
