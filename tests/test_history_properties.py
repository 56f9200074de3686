"""Properties of the history over several nights, wherever a change lies.

* A step placed at any night, the first detectable one and the last included, is dated that
  night: by the shift test, by the change it reports (its night and label, the levels either
  side), and it is "new" on exactly one night, the first that confirms it.
* The report's "since the previous night" compares with the night before the run's (the newest
  night for a run not yet in the history), never the oldest or another one.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.changes import (
    DEFAULT_CONFIRM,
    DEFAULT_WINDOW,
    detect_changes,
    find_shifts,
    new_changes,
)
from bloomperf.render.history.changes import changed_at, history_section, render_changes
from bloomperf.render.report.changes import previous_night, what_changed_since
from bloomperf.store.history.nights import Night
from bloomperf.store.results import RunResult
from tests.builders import add_night, night, night_run, ok_cell

CONFIRM = DEFAULT_CONFIRM


def levels(n: int, step: int, factor: float, seed: int) -> list[float]:
    """``n`` nights of ms/token: 10 ms with ±0.5 % noise, times ``factor`` from night ``step``."""
    rng = random.Random(seed)
    return [
        10.0 * (factor if i >= step else 1.0) * (1 + rng.uniform(-0.005, 0.005)) for i in range(n)
    ]


def nights_of(
    values: list[float], environments: list[dict[str, object]] | None = None
) -> list[Night]:
    nights = []
    for i, value in enumerate(values):
        run = night_run(night(i), [ok_cell(value)])
        if environments is not None:
            run = replace(run, environment=environments[i])
        nights.append(Night(str(night(i)), Path(f"{night(i)}.json"), run))
    return nights


# The first detectable night: two nights before it (one would make the step the majority of
# the first nights); the last: CONFIRM nights at the new level after it.
FIRST_DETECTABLE = 2
steps = st.integers(2 * CONFIRM, 3 * DEFAULT_WINDOW).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(FIRST_DETECTABLE, n - CONFIRM))
)
factors = st.one_of(st.floats(1.15, 2.0), st.floats(0.5, 0.87))


@settings(max_examples=150, deadline=None)
@given(where=steps, factor=factors, seed=st.integers(0, 10**6))
def test_a_step_at_any_detectable_night_is_found_at_that_night(
    where: tuple[int, int], factor: float, seed: int
) -> None:
    n, step = where
    values = levels(n, step, factor, seed)
    assert find_shifts([math.log(v) for v in values]) == [step]


@settings(max_examples=40, deadline=None)
@given(where=steps, factor=factors, seed=st.integers(0, 10**6))
def test_a_change_is_dated_the_night_it_began_and_new_on_the_night_it_is_confirmed(
    where: tuple[int, int], factor: float, seed: int
) -> None:
    n, step = where
    values = levels(n, step, factor, seed)
    nights = nights_of(values)
    (change,) = [c for c in detect_changes(nights) if c.metric == "ms_per_token"]
    assert change.night == step and change.night_label == str(night(step))
    assert change.worse == (factor > 1)
    assert isinstance(change.after, float) and isinstance(change.before, float)
    assert abs(change.after / change.before / factor - 1) < 0.02
    assert change.nights_after == min(DEFAULT_WINDOW, n - step)
    # New on one night only, the first that confirms it (CONFIRM nights at the new level; one
    # more for a step at the first detectable night), and dated the night it began.
    new_on = {
        k: c for k in range(1, n + 1) for c in new_changes(nights[:k]) if c.metric == "ms_per_token"
    }
    assert len(new_on) == 1
    ((k, first),) = new_on.items()
    assert k == step + CONFIRM + (step < CONFIRM)
    assert first.night == step


def test_a_step_after_a_single_night_is_not_detectable() -> None:
    """One night before the step: the new level is the majority of every early window."""
    assert find_shifts([math.log(v) for v in levels(12, 1, 1.5, 0)]) == []


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2 * CONFIRM - 1), step=st.integers(0, 10), seed=st.integers(0, 10**6))
def test_too_few_nights_never_report_a_step(n: int, step: int, seed: int) -> None:
    assert find_shifts([math.log(v) for v in levels(n, step, 1.5, seed)]) == []


def environments(n: int) -> list[dict[str, object]]:
    """Each night a different torch: what changed between two nights names both versions."""
    return [{"packages": {"torch": f"2.{i}.0"}} for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 9), data=st.data())
def test_the_report_compares_with_the_previous_night_not_another(
    n: int, data: st.DataObject
) -> None:
    nights = nights_of([10.0] * n, environments(n))
    i = data.draw(st.integers(1, n - 1))
    run = nights[i].run
    assert previous_night(nights, run) is nights[i - 1]
    (found,) = what_changed_since(run, nights, None)
    assert found.against == f"the previous night, {nights[i - 1].label}"
    assert found.lines == (f"torch 2.{i - 1}.0 → 2.{i}.0",)
    # The first night has no night before it.
    assert previous_night(nights, nights[0].run) is None


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 9))
def test_a_run_not_yet_in_the_history_compares_with_the_newest_night(n: int) -> None:
    nights = nights_of([10.0] * n, environments(n))
    tonight: RunResult = replace(
        night_run(night(n), [ok_cell(10.0)]), environment={"packages": {"torch": "3.0.0"}}
    )
    (found,) = what_changed_since(tonight, nights, None)
    assert found.against == f"the previous night, {nights[-1].label}"
    assert found.lines == (f"torch 2.{n - 1}.0 → 3.0.0",)


@settings(max_examples=40, deadline=None)
@given(where=steps, factor=factors, seed=st.integers(0, 10**6))
def test_a_changes_levels_are_the_medians_either_side_of_its_night(
    where: tuple[int, int], factor: float, seed: int
) -> None:
    n, step = where
    values = levels(n, step, factor, seed)
    (change,) = [c for c in detect_changes(nights_of(values)) if c.metric == "ms_per_token"]
    assert change.before == statistics.median(values[max(0, step - DEFAULT_WINDOW) : step])
    assert change.after == statistics.median(values[step : step + DEFAULT_WINDOW])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 9), data=st.data())
def test_what_changed_at_a_night_is_against_the_night_before(n: int, data: st.DataObject) -> None:
    nights = nights_of([10.0] * n, environments(n))
    k = data.draw(st.integers(1, n - 1))
    assert changed_at(nights, k) == [f"torch 2.{k - 1}.0 → 2.{k}.0"]
    assert changed_at(nights, 0) == [] and changed_at(nights, n) == []


@settings(max_examples=20, deadline=None)
@given(factor=st.sampled_from((1.3, 0.7)), confirm=st.integers(2, 4))
def test_the_detection_settings_reach_every_step_of_the_test(factor: float, confirm: int) -> None:
    """--confirm and --change-tolerance given to the history section are the ones it uses."""
    step, n = 4, 4 + confirm
    values = levels(n, step, factor, 1)
    nights = nights_of(values, environments(n))
    found = [c for c in new_changes(nights, confirm=confirm) if c.metric == "ms_per_token"]
    assert [c.night for c in found] == [step]
    assert new_changes(nights[:-1], confirm=confirm) == []
    assert new_changes(nights, confirm=confirm, tolerance=0.5) == []
    text = render_changes(detect_changes(nights, confirm=confirm), nights, "text", found)
    assert ("new, worse" if factor > 1 else "new, better") in text
    assert f"what changed: torch 2.{step - 1}.0 → 2.{step}.0" in text
    assert f"{confirm} nights since" in text


def test_the_history_section_judges_tonight_with_the_settings_it_is_given(tmp_path: Path) -> None:
    """`diff --history --confirm 4`: the step of night 4 is confirmed tonight (night 7)."""
    folder, scratch = tmp_path / "history", tmp_path / "scratch"
    folder.mkdir()
    scratch.mkdir()
    for i, value in enumerate(levels(8, 4, 1.3, 1)):
        add_night(folder, night_run(night(i), [ok_cell(value)]), scratch)
    text, worse = history_section(folder, "text", confirm=4)
    assert worse and "new, worse" in text
    assert history_section(folder, "text", confirm=3)[1] is False  # confirmed a night ago
