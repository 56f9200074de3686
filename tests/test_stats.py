"""Verdict statistics on synthetic samples from known, seeded distributions."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bloomperf.analysis.stats import (
    IMPROVED,
    REGRESSED,
    SAME,
    RatioEstimate,
    classify_ratio,
    coefficient_of_variation,
    estimate_ratio,
    measure_noise,
    run_spread,
    suggest_tolerance,
)
from bloomperf.core.errors import BloomperfError


def cycles(rng: np.random.Generator, centre: float, noise: float, n: int = 5) -> list[float]:
    """n timed cycles around ``centre`` with relative (Gaussian) noise ``noise``."""
    values: list[float] = (centre * (1.0 + rng.normal(0.0, noise, n))).tolist()
    return values


def flag_rate(
    shift: float, tolerance: float, seeds: int, *, single_baseline: bool = False
) -> float:
    flagged = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        baseline = cycles(rng, 10.0, 0.02)
        measured = cycles(rng, 10.0 * (1.0 + shift), 0.02)
        reference: float | list[float] = 10.0 if single_baseline else baseline
        flagged += classify_ratio(estimate_ratio(measured, reference), tolerance) == REGRESSED
    return flagged / seeds


def test_ratio_is_ratio_of_medians_and_interval_contains_it() -> None:
    est = estimate_ratio([2.0, 2.2, 100.0, 2.1, 1.9], [1.0, 1.1, 0.9])
    assert est.ratio == pytest.approx(2.1 / 1.0)  # the 100 ms outlier does not move a median
    assert est.low <= est.ratio <= est.high


def test_ten_percent_shift_with_five_cycles_of_two_percent_noise_is_flagged() -> None:
    assert flag_rate(0.10, tolerance=0.05, seeds=300) >= 0.99
    assert flag_rate(0.10, tolerance=0.05, seeds=300, single_baseline=True) >= 0.99


def test_a_a_is_flagged_at_most_one_percent() -> None:
    assert flag_rate(0.0, tolerance=0.03, seeds=1000) <= 0.01
    assert flag_rate(0.0, tolerance=0.03, seeds=1000, single_baseline=True) <= 0.01


def test_interval_alone_is_not_enough_with_five_cycles() -> None:
    # Why the tolerance is part of the verdict: a percentile bootstrap on 5 cycles is
    # optimistic, and with no tolerance A/A alarms are well above the nominal 2.5 %.
    assert flag_rate(0.0, tolerance=0.0, seeds=300) > 0.01


def test_real_but_tiny_change_within_tolerance_is_same() -> None:
    rng = np.random.default_rng(7)
    baseline = cycles(rng, 10.0, 0.005, n=200)
    measured = cycles(rng, 10.1, 0.005, n=200)  # 1 % slower, very precisely measured
    est = estimate_ratio(measured, baseline)
    assert est.low > 1.0  # the change is real ...
    assert classify_ratio(est, tolerance=0.05) == SAME  # ... but below the tolerance
    assert classify_ratio(est, tolerance=0.005) == REGRESSED
    assert classify_ratio(est, tolerance=0.005, min_effect=0.02) == SAME


def test_noisy_large_median_whose_interval_contains_one_is_same() -> None:
    est = estimate_ratio([9.0, 11.0, 13.0], [10.0, 10.0, 10.0])
    assert est.ratio > 1.05 and est.low < 1.0
    assert classify_ratio(est, tolerance=0.05) == SAME


def test_improvement_is_symmetric() -> None:
    rng = np.random.default_rng(3)
    baseline = cycles(rng, 10.0, 0.02)
    measured = cycles(rng, 8.5, 0.02)
    est = estimate_ratio(measured, baseline)
    assert est.high < 1.0
    assert classify_ratio(est, tolerance=0.05) == IMPROVED
    assert classify_ratio(est, tolerance=0.20) == SAME


def test_single_value_baseline_interval_comes_from_measured_samples() -> None:
    est = estimate_ratio([10.0, 10.5, 11.0, 11.5, 12.0], 10.0)
    assert est.ratio == pytest.approx(1.1)
    assert est.low == pytest.approx(1.0) and est.high == pytest.approx(1.2)
    point = estimate_ratio([12.0], 10.0)
    assert (point.ratio, point.low, point.high) == pytest.approx((1.2, 1.2, 1.2))


def test_same_inputs_give_same_estimate() -> None:
    a, b = [1.0, 1.2, 0.9, 1.1, 1.05], [1.0, 0.95, 1.02]
    assert estimate_ratio(a, b) == estimate_ratio(a, b)


def test_bootstrap_is_fast() -> None:
    rng = np.random.default_rng(0)
    a, b = cycles(rng, 10, 0.02, 100), cycles(rng, 10, 0.02, 100)
    # Its own CPU time, not the wall's: the work it does, which other processes' load on the
    # machine does not lengthen (a wall bound failed a loaded machine, not the code).
    start = time.process_time()
    estimate_ratio(a, b)
    assert time.process_time() - start < 0.5


@pytest.mark.parametrize(
    ("samples", "baseline"),
    [([], 1.0), ([1.0], 0.0), ([1.0, float("nan")], 1.0), ([1.0], [-1.0]), ([1.0], [])],
)
def test_bad_values_are_refused(samples: list[float], baseline: float | list[float]) -> None:
    with pytest.raises(BloomperfError):
        estimate_ratio(samples, baseline)


def test_bad_tolerance_is_refused() -> None:
    est = RatioEstimate(1.0, 0.9, 1.1)
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(BloomperfError, match="tolerance"):
            classify_ratio(est, bad)


def test_noise_helpers() -> None:
    assert coefficient_of_variation([10.0, 10.0]) == 0.0
    assert coefficient_of_variation([9.0, 11.0]) == pytest.approx(np.std([9, 11], ddof=1) / 10)
    assert run_spread([9.0, 10.0, 11.0]) == pytest.approx(0.2)
    assert suggest_tolerance(0.0, 0.0) == 0.01
    assert suggest_tolerance(0.01, 0.0) == 0.035  # 2.33 * 1.41 * 1 % = 3.3 %, up to 3.5 %
    assert suggest_tolerance(0.001, 0.042) == 0.045
    assert suggest_tolerance(0.5, 1.6) == 0.95  # a baseline takes fractions below 1 only
    with pytest.raises(BloomperfError, match="at least 2 runs"):
        measure_noise([[1.0, 2.0]])


def test_suggested_tolerance_keeps_a_a_false_alarms_low_with_run_to_run_noise() -> None:
    """Runs differ by more than their cycles do (the machine's state moves between runs): the
    interval cannot see that, so the calibrated tolerance must absorb it."""

    def run(rng: np.random.Generator) -> list[float]:
        return cycles(rng, 10.0 * (1.0 + rng.normal(0.0, 0.015)), 0.01)

    calib_rng = np.random.default_rng(1234)
    floor = measure_noise([run(calib_rng) for _ in range(10)])
    assert 0.008 < floor.run_cv < 0.03
    assert floor.cycle_cv < 0.02
    tolerance = floor.suggested_tolerance
    alarms_calibrated = alarms_bare = 0
    trials = 600
    for seed in range(trials):
        rng = np.random.default_rng(10_000 + seed)
        est = estimate_ratio(run(rng), run(rng))
        alarms_calibrated += classify_ratio(est, tolerance) == REGRESSED
        alarms_bare += classify_ratio(est, 0.0) == REGRESSED
    assert alarms_calibrated / trials <= 0.015
    assert alarms_bare / trials > 0.1  # the interval alone would cry wolf
