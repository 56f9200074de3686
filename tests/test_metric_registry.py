"""The metric registry's rules, by property: direction decides which way is worse everywhere a
ratio is judged (swapping it swaps regressed and improved, in a verdict and in the history), and
a figure is never given a unit its metric does not have (no "85 s" for an unknown metric)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

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
    ENTRY_POINT_GROUP,
    HIGHER,
    LOWER,
    Metric,
    better,
    format_value,
    label_of,
    metric,
    metric_names,
    outside_metrics,
)
from tests.builders import ok_cell
from tests.outside_install import write_distribution

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


# ---- which way is better, each figure's text, and lookups ------------------------------------


@given(
    known=st.sampled_from(BUILT_INS),
    before=st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
    factor=st.sampled_from((0.5, 0.99, 1.0, 1.01, 2.0)),
)
def test_better_follows_the_metric_s_direction_and_equal_is_never_better(
    known: Metric, before: float, factor: float
) -> None:
    after = before * factor
    expected = after > before if known.direction == HIGHER else after < before
    assert better(known.name, before, after) is expected
    assert not better(known.name, before, before)


def test_better_reads_throughput_up_and_times_down_and_an_unknown_metric_as_a_time() -> None:
    assert better("serving_effective_rps", 40.0, 50.0)
    assert not better("serving_effective_rps", 50.0, 40.0)
    assert better("ms_per_token", 50.0, 40.0) and not better("ms_per_token", 40.0, 50.0)
    assert better("no_such_metric", 50.0, 40.0) and not better("no_such_metric", 40.0, 50.0)


@given(value=st.floats(min_value=0.1, max_value=1e6, allow_nan=False))
def test_each_unit_is_written_its_own_way(value: float) -> None:
    def made(unit: str) -> str:
        return Metric("made_up", "made up", unit).format(value)

    assert made("ms") == f"{value:.2f} ms"
    assert made("bytes") == f"{value / 2**30:.2f} GiB"
    assert made("s") == (f"{value:.3g} s" if value < 1000 else f"{value:.0f} s")
    assert made("") == f"{value:.4g}"  # no unit: no blank after the number
    assert made("req/s") == f"{value:.4g} req/s"


def test_format_value_of_nothing_a_text_a_known_and_an_unknown_latency() -> None:
    assert format_value("ms_per_token", None) == "nothing"
    assert format_value("ms_per_token", "OOM") == "OOM"
    assert format_value("ms_per_token", 12.345) == "12.35 ms"
    assert format_value("peak_memory", 3 * 2**30) == "3.00 GiB"
    # A latency percentile no record has is still a time in ms (shown, not judged) ...
    assert format_value("ttft_p90_ms", 12.345) == "12.35 ms"
    # ... and only a name that ends in "_ms" is.
    assert format_value("ttft_p90_msx", 12.345) == "12.35"


def test_a_label_is_the_record_s_or_the_name_itself() -> None:
    assert label_of("ms_per_token") == "ms/token"
    assert label_of("serving_effective_rps") == "effective throughput"
    assert label_of("no_such_metric") == "no_such_metric"


def test_an_unknown_metric_is_refused_naming_it_and_every_registered_one() -> None:
    with pytest.raises(BloomperfError) as refused:
        metric("no_such_metric")
    text = str(refused.value)
    assert text.startswith("unknown metric 'no_such_metric' (registered: ")
    assert text.endswith(", ".join(metric_names()) + ")")


def test_latency_metrics_read_each_cycle_s_steps_and_nothing_without_steps() -> None:
    steps = ((30.0, 10.0, 12.0, 11.0), (33.0, 9.0, 13.0, 10.0))
    cell = replace(ok_cell(10.0), samples_step_ms=steps)
    assert metric("ttft_ms").samples(cell) == (30.0, 33.0)  # the first step of each cycle
    assert metric("tpot_ms").samples(cell) == (11.0, 10.0)  # the median of the rest
    for name in ("ttft_ms", "tpot_ms", "tpot_p99_ms"):
        assert metric(name).samples(ok_cell(10.0)) == ()


# ---- metrics from an installed package (the entry-point group) -------------------------------


MODULE_NAME = "bloomperf_test_metrics"
MODULE = """
from bloomperf.core.metrics import Metric
ZEBRA = Metric("zebra_per_s", "zebras/s", "zebras/s", direction="higher")
APPLE = Metric("apple_ms", "apple", "ms")
CLASH = Metric("ms_per_token", "again", "ms")
NOT_A_METRIC = 3
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop(MODULE_NAME, None)


def test_installed_metrics_follow_the_built_ins_in_entry_point_name_order(site: Path) -> None:
    write_distribution(site, ENTRY_POINT_GROUP, {"zebra": "ZEBRA", "apple": "APPLE"}, MODULE)
    found = outside_metrics(BUILT_INS)
    assert [m.name for m in found] == ["apple_ms", "zebra_per_s"]
    assert found[1].direction == HIGHER
    assert outside_metrics(()) == found  # none of them clashes with another


@pytest.mark.parametrize(
    ("attr", "module", "said"),
    [
        ("CLASH", MODULE, "metric 'ms_per_token' is registered twice"),
        ("NOT_A_METRIC", MODULE, "names a int, not a Metric"),
        ("ZEBRA", "import no_such_module_here\n", "cannot load it: No module named"),
    ],
)
def test_an_installed_metric_that_cannot_be_one_is_refused_naming_its_entry_point(
    site: Path, attr: str, module: str, said: str
) -> None:
    write_distribution(site, ENTRY_POINT_GROUP, {"broken": attr}, module)
    with pytest.raises(BloomperfError) as refused:
        outside_metrics(BUILT_INS)
    where = f"entry point broken = bloomperf_test_metrics:{attr} ({ENTRY_POINT_GROUP}): "
    assert str(refused.value).startswith(where) and said in str(refused.value)


def test_two_installed_metrics_of_one_name_are_refused(site: Path) -> None:
    write_distribution(site, ENTRY_POINT_GROUP, {"first": "APPLE", "second": "APPLE"}, MODULE)
    with pytest.raises(BloomperfError, match=r"entry point second = .*registered twice"):
        outside_metrics(BUILT_INS)
