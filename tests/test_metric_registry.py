"""The metric registry's rules, by property: direction decides which way is worse everywhere a
ratio is judged (swapping it swaps regressed and improved, in a verdict and in the history), and
a figure is never given a unit its metric does not have (no "85 s" for an unknown metric)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.changes import Change
from bloomperf.analysis.compare import compare_metric
from bloomperf.analysis.stats import IMPROVED, REGRESSED, RatioEstimate, classify_ratio
from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import (
    BUILT_INS,
    DIRECTIONS,
    HIGHER,
    LOWER,
    Metric,
    format_value,
    metric,
    metric_names,
)

SWAP = {REGRESSED: IMPROVED, IMPROVED: REGRESSED}
OTHER = {LOWER: HIGHER, HIGHER: LOWER}
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False)
tolerances = st.sampled_from((0.0, 0.01, 0.05, 0.1, 0.5, 0.9))


@given(
    ratio=st.floats(min_value=0.01, max_value=100),
    spread=st.floats(min_value=0.0, max_value=0.5),
    tolerance=tolerances,
    direction=st.sampled_from(DIRECTIONS),
)
def test_swapping_the_direction_swaps_regressed_and_improved(
    ratio: float, spread: float, tolerance: float, direction: str
) -> None:
    estimate = RatioEstimate(ratio, ratio * (1 - spread), ratio * (1 + spread))
    one = classify_ratio(estimate, tolerance, direction=direction)
    other = classify_ratio(estimate, tolerance, direction=OTHER[direction])
    assert other == SWAP.get(one, one)


@settings(max_examples=60, deadline=None)
@given(
    known=st.sampled_from(BUILT_INS),
    measured=st.lists(positive, min_size=1, max_size=8),
    expected=positive,
    tolerance=tolerances,
)
def test_a_registered_metric_judged_the_other_way_swaps_its_verdict(
    known: Metric, measured: list[float], expected: float, tolerance: float
) -> None:
    flipped = replace(known, direction=OTHER[known.direction])
    one = compare_metric(known, measured, expected, tolerance)
    other = compare_metric(flipped, measured, expected, tolerance)
    assert other.status == SWAP.get(one.status, one.status)
    assert (other.measured, other.expected, other.estimate) == (
        one.measured,
        one.expected,
        one.estimate,
    )


def test_a_higher_is_better_metric_regresses_when_it_falls() -> None:
    throughput = Metric("tokens_per_s_test", "tokens/s", "tokens/s", direction=HIGHER)
    assert compare_metric(throughput, [50.0] * 5, 100.0, 0.05).status == REGRESSED
    assert compare_metric(throughput, [200.0] * 5, 100.0, 0.05).status == IMPROVED
    assert compare_metric(metric("ms_per_token"), [200.0] * 5, 100.0, 0.05).status == REGRESSED


@given(before=positive, after=positive)
def test_a_history_change_is_worse_the_way_its_metric_says(before: float, after: float) -> None:
    """ms/token (lower is better) rising is worse; the registry's direction decides it."""
    change = Change("c", "ms_per_token", 1, "n", before, after, 3)
    assert change.worse == (after > before)


@given(
    name=st.text(st.characters(categories=("Ll", "Nd")), min_size=1, max_size=12).filter(
        lambda n: n not in metric_names() and not n.endswith("_ms")
    ),
    value=st.floats(min_value=0, max_value=1e12, allow_nan=False),
)
def test_a_figure_of_an_unknown_metric_gets_no_unit(name: str, value: float) -> None:
    text = format_value(name, value)
    assert not text.endswith(" s") and " " not in text
    assert float(text) == pytest.approx(value, rel=1e-3)


@given(
    unit=st.text(st.characters(categories=("Ll", "Lu", "P")), min_size=1, max_size=8).filter(
        lambda u: u not in ("s", "ms", "bytes")
    ),
    value=positive,
)
def test_a_metric_s_figure_carries_its_own_unit(unit: str, value: float) -> None:
    text = Metric("made_up", "made up", unit).format(value)
    assert text.endswith(f" {unit}") and not text.endswith(" s")


def test_a_metric_has_one_of_two_directions() -> None:
    with pytest.raises(BloomperfError, match="direction must be one of lower, higher"):
        Metric("sideways", "sideways", "x", direction="sideways")
