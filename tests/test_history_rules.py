"""The history's change test, by property (rules mutmut's first full run found unstated):

* the noise estimate recovers the night-to-night sigma of Gaussian noise, trend or not;
* the shift threshold is NOISE_FACTOR standard errors of a difference of two medians (checked
  by simulation), symmetric in the two windows, and never below the tolerance;
* a shift exactly at the threshold is not a shift; an empty side never is;
* an outcome change needs tonight and a strict majority of the following nights, is found on
  the last night it can be confirmed, counts the first night among "before", and a second
  change after the first is found too;
* ``--window`` reaches the test through ``detect_changes``;
* the settings are refused at their exact limits, with the line that names the option.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.changes import (
    NOISE_FACTOR,
    Change,
    check_test_settings,
    detect_changes,
    find_outcome_shifts,
    find_shifts,
    is_shifted,
    most_common,
    new_changes,
    noise_sigma,
    shift_threshold,
)
from bloomperf.cli.arguments import add_detection_options, detection_settings
from bloomperf.core.errors import BloomperfError
from bloomperf.render.history.changes import describe_change, history_section, render_changes
from bloomperf.store.history.nights import METRIC_OUTCOME, Night
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from tests.builders import night, night_run, ok_cell


@settings(max_examples=20, deadline=None)
@given(sigma=st.floats(0.002, 0.05), drift=st.floats(-0.1, 0.1), seed=st.integers(0, 10**6))
def test_the_noise_estimate_recovers_the_nightly_sigma(
    sigma: float, drift: float, seed: int
) -> None:
    """Gaussian noise of ``sigma`` per night, on a slow drift (up to a tenth of sigma a night)."""
    rng = random.Random(seed)
    logs = [drift * sigma * i + rng.gauss(0.0, sigma) for i in range(600)]
    assert noise_sigma(logs) == pytest.approx(sigma, rel=0.15)


@given(drift=st.floats(0.001, 0.1), start=st.floats(-1.0, 1.0))
def test_a_steady_drift_is_not_noise(drift: float, start: float) -> None:
    assert noise_sigma([start + drift * i for i in range(30)]) == pytest.approx(0.0, abs=1e-12)


def test_too_few_nights_have_no_noise_estimate() -> None:
    assert noise_sigma([]) == 0.0 == noise_sigma([1.0]) == noise_sigma([1.0, 2.0])
    assert noise_sigma([1.0, 2.0, 1.5]) > 0.0  # three nights: three differences


@pytest.mark.parametrize(("n_before", "n_after"), [(25, 25), (15, 35)])
def test_the_threshold_is_noise_factor_standard_errors_of_a_median_difference(
    n_before: int, n_after: int
) -> None:
    rng = random.Random(7)
    differences = [
        statistics.median(rng.gauss(0, 1) for _ in range(n_after))
        - statistics.median(rng.gauss(0, 1) for _ in range(n_before))
        for _ in range(4000)
    ]
    standard_error = statistics.stdev(differences)
    threshold = shift_threshold(1.0, n_before, n_after, 0.0)
    assert threshold / NOISE_FACTOR == pytest.approx(standard_error, rel=0.08)


@given(
    sigma=st.floats(0.0, 0.1),
    a=st.integers(1, 30),
    b=st.integers(1, 30),
    tolerance=st.floats(0.0, 0.5),
)
def test_the_threshold_is_symmetric_and_never_below_the_tolerance(
    sigma: float, a: int, b: int, tolerance: float
) -> None:
    threshold = shift_threshold(sigma, a, b, tolerance)
    assert threshold == shift_threshold(sigma, b, a, tolerance)
    assert threshold >= math.log1p(tolerance)
    if sigma == 0.0:
        assert threshold == math.log1p(tolerance)


def test_a_step_exactly_at_the_threshold_is_not_a_shift() -> None:
    step = math.log1p(0.05)
    assert not is_shifted([0.0], [step], 0.0, 0.05)
    assert is_shifted([0.0], [step * 1.001], 0.0, 0.05)
    assert not is_shifted([], [1.0], 0.0, 0.05)
    assert not is_shifted([0.0], [], 0.0, 0.05)


def test_ties_go_to_the_earlier_outcome_and_counts_decide_first() -> None:
    assert most_common(["ok", "oom"]) == "ok"
    assert most_common(["oom", "ok", "ok", "oom"]) == "oom"
    assert most_common(["ok", "oom", "oom"]) == "oom"


def test_an_outcome_change_is_found_on_the_last_night_that_confirms_it() -> None:
    assert find_outcome_shifts(["ok"] * 6 + ["oom"] * 3, window=6, confirm=3) == [6]
    assert find_outcome_shifts(["ok"] * 6 + ["oom"] * 2, window=6, confirm=3) == []


def test_an_outcome_change_needs_a_strict_majority_after_it() -> None:
    half = ["ok"] * 6 + ["oom", "oom", "oom", "ok", "ok", "ok"]
    assert find_outcome_shifts(half, window=6, confirm=3) == []
    most = ["ok"] * 6 + ["oom", "oom", "oom", "oom", "ok", "ok"]
    assert find_outcome_shifts(most, window=6, confirm=3) == [6]


def test_the_first_night_counts_among_the_nights_before() -> None:
    """OOM on two of the first three nights, then OK for good: a change at night 3."""
    outcomes = ["oom", "ok", "oom"] + ["ok"] * 6
    assert find_outcome_shifts(outcomes, window=6, confirm=3) == [3]


def test_a_second_change_after_the_first_is_found() -> None:
    outcomes = ["ok"] * 6 + ["oom"] * 6 + ["ok"] * 6
    assert find_outcome_shifts(outcomes, window=6, confirm=3) == [6, 12]
    logs = [0.0] * 6 + [0.3] * 6 + [0.0] * 6
    assert find_shifts(logs, window=6, confirm=3) == [6, 12]


def nights_of(ms: list[float], outcomes: list[Outcome] | None = None) -> list[Night]:
    nights = []
    for i, value in enumerate(ms):
        cell: CellResult = ok_cell(value)
        if outcomes is not None and outcomes[i] is Outcome.OOM:
            cell = CellResult(cell.backend, cell.dtype, cell.batch_size, Outcome.OOM)
        nights.append(Night(str(night(i)), Path(f"{night(i)}.json"), night_run(night(i), [cell])))
    return nights


@pytest.mark.parametrize("window", [3, 10])
def test_the_window_reaches_the_test(window: int) -> None:
    """Four slow nights between two long normal stretches: a change and its return with a
    window of three nights; a blip the ten-night window's medians never see."""
    ms = [10.0] * 6 + [15.0] * 4 + [10.0] * 8
    found = [c.night for c in detect_changes(nights_of(ms), window=window, confirm=3)]
    logs = [math.log(v) for v in ms]
    assert found == find_shifts(logs, window=window, confirm=3)
    assert found == ([6, 10] if window == 3 else [])


def test_an_outcome_change_says_what_it_was_and_for_how_long() -> None:
    outcomes = [Outcome.OK] * 6 + [Outcome.OOM] * 4
    nights = nights_of([10.0] * 10, outcomes)
    [change] = [
        c for c in detect_changes(nights, window=6, confirm=3) if c.metric == METRIC_OUTCOME
    ]
    assert (change.night, change.night_label) == (6, str(night(6)))
    assert (change.before, change.after, change.nights_after) == ("ok", "oom", 4)


@pytest.mark.parametrize(
    ("tolerance", "window", "confirm", "refused"),
    [
        (0.0, 3, 3, None),
        (0.99, 2, 2, None),
        (1.0, 6, 3, "--change-tolerance: must be a fraction below 1, found 1.0"),
        (-0.01, 6, 3, "--change-tolerance: must be a fraction below 1, found -0.01"),
        (0.05, 6, 1, "--confirm: must be at least 2 nights, found 1"),
        (0.05, 2, 3, "--window: must be at least --confirm (3), found 2"),
    ],
)
def test_the_settings_are_refused_at_their_exact_limits(
    tolerance: float, window: int, confirm: int, refused: str | None
) -> None:
    if refused is None:
        check_test_settings(tolerance, window, confirm)
        return
    with pytest.raises(BloomperfError) as error:
        check_test_settings(tolerance, window, confirm)
    assert str(error.value) == refused


def rendered_history() -> tuple[list[Night], list[Change], list[Change]]:
    """Fifteen nights: 10 ms, 12.5 ms from night 6 (torch 2.4 → 2.5 that night), 11 ms from
    night 12, confirmed on the newest night."""
    values = [10.0] * 6 + [12.5] * 6 + [11.0] * 3
    nights = []
    for i, value in enumerate(values):
        run = night_run(night(i), [ok_cell(value)])
        packages = {"torch": "2.4.0", "deepspeed": "0.14.4"}
        if i >= 6:
            packages = {"torch": "2.5.0", "deepspeed": "0.15.0"}
        run = replace(run, environment={"packages": packages})
        nights.append(Night(str(night(i)), Path(f"{night(i)}.json"), run))
    return nights, list(detect_changes(nights)), list(new_changes(nights))


def test_the_history_section_says_each_change_whole() -> None:
    nights, changes, new = rendered_history()
    assert [c.night for c in new] == [12]
    assert render_changes(changes, nights, "text", new) == (
        "History: 15 nights (2026-10-01 … 2026-10-15), 2 change(s)\n"
        "  2026-10-07  ds-inference-fp16-bs1  ms_per_token [worse]\n"
        "      10.00 ms → 12.50 ms (+25.0 %), 6 nights since\n"
        "      what changed: deepspeed 0.14.4 → 0.15.0; torch 2.4.0 → 2.5.0\n"
        "  2026-10-13  ds-inference-fp16-bs1  ms_per_token [new, better]\n"
        "      12.50 ms → 11.00 ms (-12.0 %), 3 nights since\n"
        "      what changed: nothing recorded\n"
    )
    assert render_changes(changes, nights, "markdown", new) == (
        "### History: 15 nights (2026-10-01 … 2026-10-15), 2 change(s)\n\n"
        "| Night | Cell | Metric | Change | Kind | What changed that night |\n"
        "|---|---|---|---|---|---|\n"
        "| 2026-10-07 | ds-inference-fp16-bs1 | ms_per_token | 10.00 ms → 12.50 ms (+25.0 %), "
        "6 nights since | worse | deepspeed 0.14.4 → 0.15.0; torch 2.4.0 → 2.5.0 |\n"
        "| 2026-10-13 | ds-inference-fp16-bs1 | ms_per_token | 12.50 ms → 11.00 ms (-12.0 %), "
        "3 nights since | new, better | nothing recorded |\n"
    )
    assert render_changes([], nights[:1], "markdown") == (
        "### History: 1 night (2026-10-01 … 2026-10-01), 0 change(s)\n\n"
        "No persistent change in any cell.\n"
    )
    assert render_changes([], [], "text") == "History: 0 nights (no nights), 0 change(s)\n"
    one = replace(changes[0], nights_after=1)
    assert describe_change(one).endswith(", 1 night since")


def test_the_detection_options_parse_to_the_tests_settings() -> None:
    parser = argparse.ArgumentParser()
    add_detection_options(parser)
    defaults = detection_settings(parser.parse_args([]))
    assert defaults == {"tolerance": 0.05, "window": 6, "confirm": 3}
    given_ = parser.parse_args(["--change-tolerance", "0.1", "--window", "8", "--confirm", "4"])
    assert detection_settings(given_) == {"tolerance": 0.1, "window": 8, "confirm": 4}
    for action in parser._actions[1:]:
        assert f"[{action.default}]" in (action.help or ""), action.dest
    with pytest.raises(BloomperfError, match="--window: must be at least --confirm"):
        detection_settings(parser.parse_args(["--window", "2"]))


def test_an_outcome_change_reads_without_a_relative_shift() -> None:
    outcomes = [Outcome.OK] * 6 + [Outcome.OOM] * 4
    nights = nights_of([10.0] * 10, outcomes)
    [change] = [c for c in detect_changes(nights) if c.metric == METRIC_OUTCOME]
    assert describe_change(change) == "ok → oom, 4 nights since"


def test_the_window_reaches_the_outcome_test() -> None:
    """Three OOM nights among OK ones: a change and its return with a three-night window, a
    blip the ten-night window's majority never sees."""
    outcomes = [Outcome.OK] * 6 + [Outcome.OOM] * 3 + [Outcome.OK] * 8
    nights = nights_of([10.0] * len(outcomes), outcomes)
    short = [c.night for c in detect_changes(nights, window=3, confirm=3)]
    assert short == [6, 9]
    assert [c.night for c in detect_changes(nights, window=10, confirm=3)] == []


def test_the_history_section_uses_the_settings_it_is_given(tmp_path: Path) -> None:
    ms = [10.0] * 6 + [15.0] * 4 + [10.0] * 8
    for i, value in enumerate(ms):
        save_run(night_run(night(i), [ok_cell(value)]), tmp_path / f"{night(i)}.json")
    short, _ = history_section(tmp_path, "text", window=3, confirm=3)
    long, _ = history_section(tmp_path, "text", window=10, confirm=3)
    assert "2 change(s)" in short and "0 change(s)" in long


@pytest.mark.parametrize(
    ("logs", "window", "confirm", "shifts"),
    [
        # A step at the second night: one night of the old level is enough before it.
        ([0.0] + [0.5] * 4, 6, 2, [1]),
        ([0.3, 0.0, 0.0, 0.01, 0.0, 0.3], 4, 2, [1]),
        # A level that moves in two nights is one change, not a second one a night later.
        ([0.0] * 3 + [1.0] + [2.0] * 4, 6, 3, [3]),
        ([1.0, 0.3, 0.01, 0.0, 0.0, 0.0, 0.01, 0.0, -0.29, 0.0], 7, 3, [1]),
        # A drop seen only from the one scan position that has enough nights after it.
        ([-0.29, -0.3, 0.0, 1.2, 0.5, 0.99, 1.2, -0.01, 0.0, 0.0, 0.0, 0.0], 5, 4, [7]),
    ],
)
def test_shifts_are_dated_where_the_new_level_starts(
    logs: list[float], window: int, confirm: int, shifts: list[int]
) -> None:
    assert find_shifts(logs, window=window, confirm=confirm) == shifts


def test_an_outcome_change_at_the_second_nights_confirm_says_what_it_left() -> None:
    """OK, then OOM for good, confirmed by two nights: before is the first nights' outcome
    (a tie goes to the earlier one), read with the --confirm given."""
    outcomes = [Outcome.OK, Outcome.OOM, Outcome.OOM, Outcome.OOM]
    nights = nights_of([10.0] * len(outcomes), outcomes)
    [change] = [
        c for c in detect_changes(nights, window=6, confirm=2) if c.metric == METRIC_OUTCOME
    ]
    assert (change.night, change.before, change.after) == (2, "ok", "oom")


def test_only_the_metrics_asked_for_are_watched() -> None:
    ms = [10.0] * 6 + [15.0] * 6
    assert [c.metric for c in detect_changes(nights_of(ms))] == ["ms_per_token"]
    assert detect_changes(nights_of(ms), metrics=()) == []
