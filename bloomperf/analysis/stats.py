"""Verdict statistics: a confidence interval on measured / baseline, and the noise floor.

A ratio ``measured / baseline`` above 1 is worse for a lower-is-better metric (ms/token, bytes,
seconds) and better for a higher-is-better one (a throughput): ``classify_ratio`` takes the
metric's direction (``bloomperf.core.metrics``). A verdict uses every timed cycle, not one mean:
the ratio of medians gets a percentile-bootstrap confidence interval (medians, because one
disturbed cycle must not move the verdict), and ``classify_ratio`` turns the estimate into
"regressed", "improved" or "same".

The noise-floor helpers serve ``bloomperf calibrate``: run the same cell several times (A/A) and
see how much a median moves between runs when nothing changed; that says how large a tolerance
must be for a verdict to be trusted on this machine.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import LOWER

REGRESSED = "regressed"
IMPROVED = "improved"
SAME = "same"

# Enough resamples that the 2.5 % / 97.5 % percentiles are stable to well under a percent of
# the ratio, still only a few milliseconds for a few hundred samples.
DEFAULT_RESAMPLES = 4000
# Fixed so that the same files always give the same verdict (a flaky CI verdict is worse than a
# slightly unlucky but reproducible one).
DEFAULT_SEED = 20220910

# A one-sided false-alarm rate of 1 % on A/A: z = 2.326.
FALSE_ALARM_RATE = 0.01
# Below this a tolerance is smaller than what any timer or allocator can promise.
MIN_TOLERANCE = 0.01
# Tolerances are fractions below 1 (a baseline refuses more); a machine whose A/A runs differ by
# this much cannot judge a figure at all, and the noise table says so with the raw spread.
MAX_TOLERANCE = 0.95


@dataclass(frozen=True)
class RatioEstimate:
    """``measured / baseline`` (ratio of medians) and its confidence interval ``[low, high]``."""

    ratio: float
    low: float
    high: float


def estimate_ratio(
    samples: Sequence[float],
    baseline: float | Sequence[float],
    confidence: float = 0.95,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> RatioEstimate:
    """Ratio of the median of ``samples`` to the baseline, with a bootstrap interval.

    ``baseline`` is either the baseline run's samples (then both sides are resampled, since both
    medians are uncertain) or one stored value, such as a figure from the reference blog's tables
    (then only the measured side is uncertain and the interval comes from ``samples`` alone).
    With a single sample the interval collapses to the point: there is no spread to learn from,
    and ``classify_ratio`` then decides on the tolerance alone.
    """
    measured = _as_positive_array(samples, "measured samples")
    if not 0.0 < confidence < 1.0:
        raise BloomperfError(f"confidence: must be between 0 and 1, found {confidence}")
    if resamples < 1:
        raise BloomperfError(f"resamples: must be at least 1, found {resamples}")
    rng = np.random.default_rng(seed)
    measured_medians = _bootstrap_medians(measured, resamples, rng)
    if isinstance(baseline, (int, float)):
        reference = _as_positive_array([baseline], "baseline")
        point = float(np.median(measured)) / float(reference[0])
        ratios = measured_medians / float(reference[0])
    else:
        reference = _as_positive_array(baseline, "baseline samples")
        point = float(np.median(measured)) / float(np.median(reference))
        ratios = measured_medians / _bootstrap_medians(reference, resamples, rng)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    # The percentile of a finite bootstrap can sit a rounding error beside the point estimate
    # when all samples are equal; the interval must always contain the point.
    return RatioEstimate(ratio=point, low=min(float(low), point), high=max(float(high), point))


def classify_ratio(
    estimate: RatioEstimate, tolerance: float, min_effect: float = 0.0, direction: str = LOWER
) -> str:
    """Say "regressed", "improved" or "same"; as written here for a lower-is-better metric,
    and with the two words swapped for a higher-is-better ``direction`` (a throughput that
    fell beyond the tolerance regressed).

    A change is "regressed" only when both hold:

    * ``low > 1 + min_effect``: the whole confidence interval lies above a slowdown of
      ``min_effect``, so the change is *real* (not cycle-to-cycle noise) and at least that large.
      With ``min_effect = 0`` this is a plain significance test.
    * ``ratio > 1 + tolerance``: the best estimate of the change is *large enough to matter*.

    Why both: with many cycles the interval becomes narrow, and a real but tiny change (0.5 % from
    a new driver) would become "significant"; the tolerance keeps such changes "same". With few
    cycles, one unlucky run can put its median above the tolerance while its interval still
    contains 1; the interval keeps that noise "same". Cycles inside one run share the machine's
    state, so the interval under-states run-to-run noise; the tolerance is where that noise is
    absorbed, and ``bloomperf calibrate`` measures how large it must be (``suggest_tolerance``).
    "improved" is the mirror image (``high < 1 - min_effect`` and ``ratio < 1 - tolerance``),
    so a faster result is reported (and can be accepted into the baseline) but never fails.
    """
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):
        raise BloomperfError(f"tolerance: must be in [0, 1), found {tolerance}")
    if not (math.isfinite(min_effect) and 0.0 <= min_effect < 1.0):
        raise BloomperfError(f"min effect: must be in [0, 1), found {min_effect}")
    worse, better = (REGRESSED, IMPROVED) if direction == LOWER else (IMPROVED, REGRESSED)
    if estimate.low > 1.0 + min_effect and estimate.ratio > 1.0 + tolerance:
        return worse
    if estimate.high < 1.0 - min_effect and estimate.ratio < 1.0 - tolerance:
        return better
    return SAME


def _as_positive_array(values: float | Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise BloomperfError(f"{what}: no values to compare")
    if not np.all(np.isfinite(array)) or np.any(array <= 0.0):
        raise BloomperfError(f"{what}: every value must be a positive finite number")
    return array


def _bootstrap_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` resamples with replacement, in one vectorised step.

    The values are sorted once; then the median of a resample is the value at the median of its
    (sorted) indices, so only small integers are sorted: several times faster than
    ``np.median`` over the gathered floats.
    """
    ordered = np.sort(values)
    n = ordered.size
    picks = rng.integers(0, n, size=(resamples, n))
    picks.sort(axis=1)
    upper = ordered[picks[:, n // 2]]
    if n % 2:
        return upper
    result: np.ndarray = (ordered[picks[:, n // 2 - 1]] + upper) / 2.0
    return result


# ---- noise floor (bloomperf calibrate) -------------------------------------------------------


@dataclass(frozen=True)
class NoiseFloor:
    """How much one cell's figure moves on this machine when nothing changes (A/A).

    ``cycle_cv``: the typical coefficient of variation of the timed cycles inside one run (the
    median over runs). ``run_cv``: the coefficient of variation of the per-run medians.
    ``run_spread``: (largest - smallest) per-run median, relative to their median.
    ``suggested_tolerance``: see ``suggest_tolerance``.
    """

    runs: int
    cycle_cv: float
    run_cv: float
    run_spread: float
    suggested_tolerance: float


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation / mean; 0 for fewer than two values."""
    array = _as_positive_array(values, "samples")
    if array.size < 2:
        return 0.0
    return float(np.std(array, ddof=1) / np.mean(array))


def run_spread(medians: Sequence[float]) -> float:
    """(largest - smallest) of the per-run medians relative to their median."""
    array = _as_positive_array(medians, "run medians")
    return float((array.max() - array.min()) / np.median(array))


def suggest_tolerance(
    run_cv: float, spread: float, false_alarm_rate: float = FALSE_ALARM_RATE
) -> float:
    """The smallest tolerance that keeps A/A false alarms near ``false_alarm_rate``.

    Comparing two unchanged runs, ``log(ratio)`` has a spread of about ``sqrt(2) * run_cv``
    (both medians move), so a one-sided false-alarm rate ``a`` needs
    ``tolerance >= z(1 - a) * sqrt(2) * run_cv`` (3.3 x run_cv at 1 %). A few calibration runs
    estimate ``run_cv`` poorly, so the tolerance is never below the largest difference actually
    seen between those runs (``spread``), nor below 1 %; it is rounded up to half a percent so the
    number is easy to write into a baseline, and capped at ``MAX_TOLERANCE``.
    """
    z = statistics.NormalDist().inv_cdf(1.0 - false_alarm_rate)
    needed = max(z * math.sqrt(2.0) * run_cv, spread, MIN_TOLERANCE)
    return min(math.ceil(needed * 200.0 - 1e-9) / 200.0, MAX_TOLERANCE)


def measure_noise(runs: Sequence[Sequence[float]]) -> NoiseFloor:
    """The noise floor of one cell from the cycle samples of several unchanged runs."""
    if len(runs) < 2:
        raise BloomperfError(f"calibration: needs at least 2 runs of a cell, found {len(runs)}")
    medians = [float(np.median(_as_positive_array(r, "samples"))) for r in runs]
    cycle_cv = float(np.median([coefficient_of_variation(r) for r in runs]))
    run_cv = coefficient_of_variation(medians)
    spread = run_spread(medians)
    return NoiseFloor(
        runs=len(runs),
        cycle_cv=cycle_cv,
        run_cv=run_cv,
        run_spread=spread,
        suggested_tolerance=suggest_tolerance(run_cv, spread),
    )
