"""The loops of ``bloomperf ab`` in process: which cycles run in which order, which of them
become pairs, when a comparison stops, and what it hands back, with both arms' cycles read from
a script instead of a worker.

``ScriptedRunner`` takes a ``GroupRunner``'s place in the controller: its ``run_cell`` hands
``measure`` a cycle that returns the script's seconds and records the call. What a real worker
adds (loads, memory, the worker protocol) is proven by ``test_ab.py``'s runs on the tiny model;
here every expected value is worked out from the script and the seed, not from bloomperf."""

from __future__ import annotations

import io
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.paired import INCONCLUSIVE, SLOWER
from bloomperf.config.run import LaunchOptions
from bloomperf.harness import interleave
from bloomperf.harness.interleave import (
    ARMS,
    GROUPS,
    PairLog,
    Settings,
    arm_spec,
    compare_cell_by_cycles,
    compare_group,
    failure,
    print_progress,
    shared_cpus,
)
from bloomperf.harness.launch import GroupSpec
from bloomperf.harness.matrix import Cell, Group
from bloomperf.harness.overlay import Arm
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.serving import EFFECTIVE

NEW_TOKENS = 10
Script = Callable[[int], float]  # a cycle's seconds, by the arm's cycle count so far


class ScriptedRunner:
    """A ``GroupRunner``'s part in the controller, with the cycles' seconds from a script."""

    def __init__(
        self,
        arm: str,
        script: Script,
        events: list[tuple[str, ...]],
        outcome: Outcome = Outcome.OK,
        warmup: int = 1,
        cycles: int = 5,
        loads: Callable[[int], CycleLoad | None] = lambda i: None,
    ) -> None:
        self.arm, self.script, self.events, self.outcome = arm, script, events, outcome
        self.warmup, self.cycles, self.loads = warmup, cycles, loads
        self.cycle_loads: list[CycleLoad | None] = []
        self.spec = GroupSpec("accelerate", "fp32", Path("/model"), "cpu", NEW_TOKENS)
        self.ran = 0
        self.last_load: CycleLoad | None = None
        self.also_ours: Callable[[], list[int]] = list

    def run_cell(self, batch_size: int, measure: Any = None) -> CellResult:
        self.events.append((self.arm, "begin", str(batch_size)))
        if self.outcome is not Outcome.OK:
            return CellResult("accelerate", "fp32", batch_size, self.outcome, message="scripted")
        if measure is None:  # groups mode: the runner's own warm-up and timed cycles
            for _ in range(self.warmup):
                self.cycle()
            seconds = [self.cycle() for _ in range(self.cycles)]
        else:
            seconds = measure(self.cycle, self.warmup, self.cycles)
        self.events.append((self.arm, "end", str(batch_size)))
        samples = tuple(s * 1000.0 / (batch_size * NEW_TOKENS) for s in seconds)
        timed = tuple(load for load in self.cycle_loads[-len(seconds) :] if load is not None)
        return CellResult("accelerate", "fp32", batch_size, Outcome.OK, samples, loads=timed)

    def cycle(self) -> float:
        seconds = self.script(self.ran)
        self.last_load = self.loads(self.ran)
        self.cycle_loads.append(self.last_load)
        self.ran += 1
        self.events.append((self.arm, "cycle"))
        return seconds

    def tree_roots(self) -> list[int]:
        return [{"a": 101, "b": 202}[self.arm]]

    def stop(self) -> None:
        self.events.append((self.arm, "stop"))


def wobble(seed: int, spread: float = 0.02) -> Script:
    """Seconds around 0.1, a few per cent apart from cycle to cycle, the same for a seed."""
    return lambda i: 0.1 * (1 + spread * random.Random(seed * 7919 + i).uniform(-1, 1))


def pairs_of(comparison: interleave.Comparison) -> dict[int, list[interleave.Sample]]:
    found: dict[int, list[interleave.Sample]] = {}
    for sample in comparison.samples:
        found.setdefault(sample.pair, []).append(sample)
    return found


def schedule(min_pairs: int, upto: int) -> list[int]:
    """The pair counts at which the interval is looked at: the first look, then a quarter more."""
    points, pairs = [], max(min_pairs, 2)
    while pairs <= upto:
        points.append(pairs)
        pairs += max(1, pairs // 4)
    return points


def stops_at(script_a: Script, script_b: Script, s: Settings, batch: int) -> int:
    """The first pair count at which the paired rule decides, or ``max_pairs``."""
    log = PairLog(Cell("accelerate", "fp32", batch), s)
    for pair in range(s.max_pairs):
        index = s.warmup + pair
        values = {arm: f(index) * 1000.0 / (batch * NEW_TOKENS)
                  for arm, f in (("a", script_a), ("b", script_b))}  # fmt: skip
        log.add_pair(values, ("a", "b"))
        if log.decided():
            return pair + 1
    return s.max_pairs


@settings(max_examples=25, deadline=None)
@given(
    warmup=st.integers(0, 2),
    ratio=st.sampled_from([1.0, 1.02, 1.5, 0.6]),
    seed=st.integers(0, 50),
    batch=st.sampled_from([1, 4]),
    min_pairs=st.integers(2, 6),
)
def test_cycles_alternate_in_pairs_drawn_from_the_seed_after_each_arms_warm_up(
    warmup: int, ratio: float, seed: int, batch: int, min_pairs: int
) -> None:
    s = Settings(
        tolerance=0.05, confidence=0.9, min_pairs=min_pairs, max_pairs=30, warmup=warmup, seed=seed
    )
    events: list[tuple[str, ...]] = []
    scripts = {"a": wobble(seed), "b": lambda i: wobble(seed + 1)(i) * ratio}
    runners = {arm: ScriptedRunner(arm, scripts[arm], events, warmup=warmup) for arm in ARMS}
    looked: list[int] = []
    cell = Cell("accelerate", "fp32", batch)
    comparison = compare_cell_by_cycles(
        runners,  # type: ignore[arg-type]
        cell,
        s,
        random.Random(seed),
        lambda log, elapsed: looked.append(log.pairs),
    )
    pairs = pairs_of(comparison)
    # The order of every warm-up round and pair, replayed from the seed.
    rng = random.Random(seed)
    warm = [arm for _ in range(warmup) for arm in rng.sample(ARMS, 2)]
    orders = [tuple(rng.sample(ARMS, 2)) for _ in pairs]
    cycles = [e[0] for e in events if e[1] == "cycle"]
    assert cycles == warm + [arm for order in orders for arm in order]
    # A begins, then B (A's measure starts B's cell), B ends, then A: one cell each.
    assert [e for e in events if e[1] != "cycle"] == [
        ("a", "begin", str(batch)),
        ("b", "begin", str(batch)),
        ("b", "end", str(batch)),
        ("a", "end", str(batch)),
    ]
    assert [s.sequence for s in comparison.samples] == list(range(2 * len(pairs)))
    for pair, (samples, order) in enumerate(zip(pairs.values(), orders, strict=True)):
        assert tuple(x.arm for x in samples) == order
        assert [x.position for x in samples] == [0, 1]
        for x in samples:  # the arm's cycle after its warm-ups, as ms per token
            seconds = scripts[x.arm](warmup + pair)
            assert x.ms_per_token == pytest.approx(seconds * 1000.0 / (batch * NEW_TOKENS))
    # Each arm's cell holds exactly its timed cycles.
    for arm in ARMS:
        timed = [x.ms_per_token for x in comparison.samples if x.arm == arm]
        assert comparison.arms[arm].samples_ms_per_token == pytest.approx(timed)
        assert comparison.median(arm) == pytest.approx(statistics.median(timed))
    # It stops at the first look that decides, else when the pairs run out.
    expected = stops_at(scripts["a"], scripts["b"], s, batch)
    assert len(pairs) == expected
    decided = comparison.verdict is not None and comparison.stopped == "decided"
    assert comparison.stopped == ("decided" if decided else "max-pairs")
    if not decided:
        assert comparison.verdict == INCONCLUSIVE and len(pairs) == s.max_pairs
    if ratio == 1.5:
        assert comparison.verdict == SLOWER
    # Progress on the looks' schedule, and once more when it decides.
    due = set(schedule(min_pairs, len(pairs)))
    assert looked == sorted(due | ({len(pairs)} if decided else set()))


@pytest.mark.parametrize(
    ("max_pairs", "max_time_s", "stopped", "pairs"),
    [(1, 0.0, "max-pairs", 1), (5, 0.0, "max-time", 1), (3, 3600.0, "max-pairs", 3)],
)
def test_a_comparison_that_cannot_decide_stops_at_its_pair_or_time_budget(
    max_pairs: int, max_time_s: float, stopped: str, pairs: int
) -> None:
    s = Settings(min_pairs=10, max_pairs=max_pairs, max_time_s=max_time_s, warmup=0)
    events: list[tuple[str, ...]] = []
    runners = {arm: ScriptedRunner(arm, wobble(3 + i), events, warmup=0)
               for i, arm in enumerate(ARMS)}  # fmt: skip
    comparison = compare_cell_by_cycles(
        runners,  # type: ignore[arg-type]
        Cell("accelerate", "fp32", 1),
        s,
        random.Random(0),
        lambda log, elapsed: None,
    )
    assert (comparison.stopped, len(pairs_of(comparison))) == (stopped, pairs)
    assert comparison.verdict == INCONCLUSIVE and comparison.outcome is Outcome.OK


@pytest.mark.parametrize(
    ("failing", "outcome"),
    [("a", Outcome.OOM), ("b", Outcome.ERROR), ("ab", Outcome.TIMEOUT)],
)
def test_an_arm_that_did_not_run_fails_the_comparison_naming_the_first_one(
    failing: str, outcome: Outcome
) -> None:
    events: list[tuple[str, ...]] = []
    runners = {
        arm: ScriptedRunner(arm, wobble(1), events, outcome if arm in failing else Outcome.OK)
        for arm in ARMS
    }
    comparison = compare_cell_by_cycles(
        runners,  # type: ignore[arg-type]
        Cell("accelerate", "fp32", 2),
        Settings(min_pairs=2, max_pairs=4),
        random.Random(0),
        lambda log, elapsed: None,
    )
    first = failing[0]
    assert comparison.outcome is outcome and comparison.verdict is None
    assert comparison.message == f"arm {first.upper()}: {outcome.value}: scripted"
    assert (comparison.stopped, comparison.samples, comparison.estimate) == ("failed", (), None)
    assert comparison.cell == Cell("accelerate", "fp32", 2)
    assert not any(e[1] == "cycle" for e in events)  # nothing timed
    # A's failure stops before B begins; B's comes back to A, whose cell then ends.
    assert [e[0] for e in events if e[1] == "begin"] == (["a"] if first == "a" else ["a", "b"])


def spec(arm: str, **extra: Any) -> GroupSpec:
    return GroupSpec("accelerate", "fp32", Path("/model"), "cpu", NEW_TOKENS, env={"ARM": arm},
                     **extra)  # fmt: skip


def scripted_runners(
    monkeypatch: pytest.MonkeyPatch,
    scripts: dict[str, Script],
    events: list[tuple[str, ...]],
    failing: dict[str, Outcome] | None = None,
    per_round: Callable[[str, int], Script] | None = None,
    loads: Callable[[int], CycleLoad | None] = lambda i: None,
) -> list[ScriptedRunner]:
    """``interleave.GroupRunner`` made a scripted one per arm (``per_round(arm, round)``'s
    script, the round counted per arm, else the arm's script); the runners made, in order."""
    made: list[ScriptedRunner] = []

    def make(group_spec: GroupSpec, *, warmup: int = 1, cycles: int = 5) -> ScriptedRunner:
        arm = group_spec.env["ARM"]
        outcome = (failing or {}).get(arm, Outcome.OK)
        rounds = sum(r.arm == arm for r in made)
        script = per_round(arm, rounds) if per_round else scripts[arm]
        runner = ScriptedRunner(arm, script, events, outcome, warmup, cycles, loads)
        made.append(runner)
        return runner

    monkeypatch.setattr(interleave, "GroupRunner", make)
    return made


def test_cycles_mode_compares_every_cell_of_the_group_then_stops_both_runners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, ...]] = []
    made = scripted_runners(monkeypatch, {"a": wobble(1), "b": wobble(2)}, events)
    group = Group("accelerate", "fp32", (1, 4))
    s = Settings(min_pairs=2, max_pairs=3, warmup=2, seed=7)
    found = list(compare_group({arm: spec(arm) for arm in ARMS}, group, s, lambda *_: None))
    assert [c.cell.batch_size for c in found] == [1, 4]
    assert len(made) == 2 and all(r.warmup == 2 for r in made)  # one live runner per arm
    # One generator from the seed for the whole group: the cells' orders follow on.
    rng = random.Random(7)
    expected = []
    for comparison in found:
        expected += [arm for _ in range(2) for arm in rng.sample(ARMS, 2)]  # warm-ups
        expected += [arm for _ in pairs_of(comparison) for arm in rng.sample(ARMS, 2)]
    assert [e[0] for e in events if e[1] == "cycle"] == expected
    # Each arm's worker is the other's own: its CPU time is no neighbour's.
    assert made[0].also_ours() == [202] and made[1].also_ours() == [101]
    assert events[-2:] == [("a", "stop"), ("b", "stop")]


def test_groups_mode_pairs_each_rounds_medians_and_loads_each_arm_anew_per_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, ...]] = []
    scripts = {"a": wobble(1, 0.3), "b": lambda i: 2 * wobble(2, 0.3)(i)}
    made = scripted_runners(monkeypatch, scripts, events, loads=lambda i: CycleLoad(0.1 + i))
    group = Group("accelerate", "fp32", (1, 2))
    s = Settings(
        mode=GROUPS, confidence=0.75, min_pairs=3, max_pairs=3, warmup=2, cycles_per_round=3, seed=4
    )
    looked: list[tuple[int, int, float]] = []
    started = time.monotonic()
    found = list(
        compare_group(
            {arm: spec(arm) for arm in ARMS},
            group,
            s,
            lambda log, at: looked.append((log.cell.batch_size, log.pairs, at)),
        )
    )
    wall = time.monotonic() - started
    assert [c.cell.batch_size for c in found] == [1, 2]
    rng = random.Random(4)
    orders = [tuple(rng.sample(ARMS, 2)) for _ in range(3)]
    assert [r.arm for r in made] == [arm for order in orders for arm in order]
    assert all((r.warmup, r.cycles) == (2, 3) for r in made)
    # After each round, each batch size's progress, with the time since the start.
    assert [(b, n) for b, n, _ in looked] == [(b, n) for n in (1, 2, 3) for b in (1, 2)]
    times = [at for _, _, at in looked]
    assert times == sorted(times) and times[0] >= 0 and times[-1] <= wall
    last = {arm: next(r for r in reversed(made) if r.arm == arm) for arm in ARMS}
    # Each round's runner loads, runs both batch sizes and stops before the other arm's starts.
    kinds = [(e[0], e[1]) for e in events if e[1] != "cycle"]
    per_runner = [("begin",), ("end",), ("begin",), ("end",), ("stop",)]
    assert kinds == [(arm, *k) for r in made for arm in [r.arm] for k in per_runner]
    for comparison in found:
        batch = comparison.cell.batch_size
        assert len(comparison.samples) == 2 * 3 * 3  # every timed cycle of every round kept
        for round_, order in enumerate(orders):
            kept = [x for x in comparison.samples if x.pair == round_]
            assert [x.arm for x in kept] == [order[0]] * 3 + [order[1]] * 3
        # Each round's pair is each arm's median cycle of that round, of this batch size.
        # A fresh runner per round: before this batch size's cell it ran the smaller one's
        # warm-up and 3 timed cycles, then this cell's warm-up.
        first = (2 + 3) * (batch - 1) + 2
        for arm in ARMS:
            cycles = [scripts[arm](first + k) * 1000 / (batch * NEW_TOKENS) for k in range(3)]
            for round_ in range(3):
                kept = [x for x in comparison.samples if x.pair == round_ and x.arm == arm]
                assert [x.ms_per_token for x in kept] == pytest.approx(cycles)
                assert [x.load for x in kept] == [CycleLoad(0.1 + first + k) for k in range(3)]
            # The arms' cells are the last round's.
            assert comparison.arms[arm].samples_ms_per_token == pytest.approx(cycles)
            assert comparison.arms[arm] is not None and last[arm].ran == 10
        assert comparison.verdict == SLOWER and comparison.stopped == "decided"
        assert times[-1] <= comparison.elapsed_s <= wall


@pytest.mark.parametrize(("max_time_s", "rounds"), [(3600.0, 3), (0.0, 1)])
def test_groups_mode_says_why_each_cell_stopped(
    monkeypatch: pytest.MonkeyPatch, max_time_s: float, rounds: int
) -> None:
    def per_round(arm: str, round_: int) -> Script:
        def seconds(i: int) -> float:
            if i < 4:  # the first batch size (a warm-up, 3 cycles): B twice as slow
                return 0.1 * (2.0 if arm == "b" else 1.0)
            # The second: B now faster, now slower than A, round by round.
            return 0.1 * ((0.8, 1.25, 1.0)[round_] if arm == "b" else 1.0)

        return seconds

    events: list[tuple[str, ...]] = []
    made = scripted_runners(monkeypatch, {}, events, per_round=per_round)
    s = Settings(
        mode=GROUPS, confidence=0.75, min_pairs=3, max_pairs=3, max_time_s=max_time_s,
        cycles_per_round=3,
    )  # fmt: skip
    group = Group("accelerate", "fp32", (1, 2))
    first, second = compare_group({arm: spec(arm) for arm in ARMS}, group, s, lambda *_: None)
    assert len(made) == 2 * rounds
    if rounds == 3:
        assert (first.stopped, first.verdict) == ("decided", SLOWER)
        assert (second.stopped, second.verdict) == ("max-pairs", INCONCLUSIVE)
    else:  # out of time after the first round: too few pairs for either
        assert [c.stopped for c in (first, second)] == ["max-time", "max-time"]
        assert [c.verdict for c in (first, second)] == [INCONCLUSIVE, INCONCLUSIVE]


def test_groups_mode_stops_at_a_failed_cell_with_that_cells_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[str, ...]] = []
    scripted_runners(monkeypatch, {"a": wobble(1), "b": wobble(2)}, events, {"b": Outcome.OOM})
    s = Settings(mode=GROUPS, min_pairs=2, max_pairs=5, cycles_per_round=2)
    group = Group("accelerate", "fp32", (1, 2))
    (found,) = list(compare_group({arm: spec(arm) for arm in ARMS}, group, s, lambda *_: None))
    assert found.outcome is Outcome.OOM and found.message == "arm B: oom: scripted"
    assert found.cell.batch_size == 1
    # B's runner stopped at its first failed cell and never began the next batch size.
    assert [e for e in events if e[0] == "b" and e[1] == "begin"] == [("b", "begin", "1")]


def test_print_progress_writes_the_cells_pairs_interval_and_time_when_called() -> None:
    import io

    out = io.StringIO()
    log = PairLog(Cell("accelerate", "fp32", 1), Settings(min_pairs=2, max_pairs=9))
    show = print_progress(out)
    show(log, 3.4)
    for a, b in [(1.0, 1.1), (1.0, 1.2), (1.0, 1.15)]:
        log.add_pair({"a": a, "b": b}, ("a", "b"))
    log.decided()
    show(log, 12.6)
    first, second = out.getvalue().splitlines()
    assert first.split() == ["accelerate-fp32-bs1", "0", "pairs", "no", "interval", "yet", "3", "s"]
    assert log.estimate is not None
    figures = f"B/A {log.estimate.ratio:.3f} [{log.estimate.low:.3f}, {log.estimate.high:.3f}]"
    assert second == f"  {'accelerate-fp32-bs1':<28} {3:>5} pairs  {figures}  13 s"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux's affinity calls")
def test_both_arms_start_on_the_last_cores_the_hungrier_arm_needs_and_the_rest_come_back() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    one = spec("a", launch=LaunchOptions(threads=1))
    wide = GroupSpec("accelerate", "fp32", Path("/m"), "cpu", 1, env={"OMP_NUM_THREADS": "2"})
    with shared_cpus([one, wide]):
        assert sorted(os.sched_getaffinity(0)) == allowed[-2:]
    assert sorted(os.sched_getaffinity(0)) == allowed
    with shared_cpus([one, one]):
        assert sorted(os.sched_getaffinity(0)) == allowed[-1:]
    gpu = GroupSpec("accelerate", "fp32", Path("/m"), "cuda", 1)
    with shared_cpus([one, gpu]):  # the GPU's arms are not pinned
        assert sorted(os.sched_getaffinity(0)) == allowed
    with pytest.raises(KeyError), shared_cpus([one, one]):
        raise KeyError("inside")
    assert sorted(os.sched_getaffinity(0)) == allowed


BUSY = CycleLoad(0.1, gpu_others=1)  # another process on the GPU: the pair is set aside
QUIET = CycleLoad(0.1, wait_s=0.0, gpu_others=0)


def test_each_sample_carries_its_cycles_load_and_a_pair_with_a_busy_cycle_is_set_aside() -> None:
    events: list[tuple[str, ...]] = []
    # Arm B's fourth cycle (the third pair, after one warm-up) had a neighbour on the GPU.
    loads = {"a": lambda i: QUIET, "b": lambda i: BUSY if i == 3 else QUIET}
    runners = {
        arm: ScriptedRunner(arm, wobble(i), events, warmup=1, loads=loads[arm])
        for i, arm in enumerate(ARMS)
    }
    s = Settings(min_pairs=4, max_pairs=6, confidence=0.9)
    started = time.monotonic()
    elapsed: list[float] = []
    comparison = compare_cell_by_cycles(
        runners,  # type: ignore[arg-type]
        Cell("accelerate", "fp32", 1),
        s,
        random.Random(2),
        lambda log, at: elapsed.append(at),
    )
    wall = time.monotonic() - started
    for sample in comparison.samples:
        busy = sample.arm == "b" and sample.pair == 2
        assert sample.load == (BUSY if busy else QUIET)
        assert sample.set_aside is (sample.pair == 2)
    assert comparison.busy is not None and comparison.busy.set_aside == 1
    assert comparison.busy.pairs == len(pairs_of(comparison))
    assert comparison.busy.gpu_neighbours == 1
    # The clock: from the cell's start, never past the call's own wall time.
    assert elapsed and all(0 <= at <= wall for at in elapsed) and elapsed == sorted(elapsed)
    assert elapsed[-1] <= comparison.elapsed_s <= wall


def test_a_log_whose_pairs_are_all_set_aside_never_decides_and_says_the_machine_was_busy() -> None:
    log = PairLog(Cell("accelerate", "fp32", 1), Settings(min_pairs=2, max_pairs=5))
    for _ in range(5):
        log.add_pair({"a": 1.0, "b": 2.0}, ("a", "b"), loads={"a": (BUSY,), "b": (QUIET,)})
        assert not log.decided() and log.verdict is None
    comparison = log.comparison("max-pairs", 1.0, {})
    assert comparison.verdict == INCONCLUSIVE and comparison.busy_verdict
    assert comparison.estimate is None and log.clean_pairs == 0


def test_a_higher_is_better_figure_half_as_high_in_b_is_judged_slower() -> None:
    s = Settings(confidence=0.9, min_pairs=6, max_pairs=6)
    log = PairLog(Cell("vllm", "fp32", 1), s, metric=EFFECTIVE)
    decided = False
    for a in (10.0, 11.0, 9.0, 10.5, 9.5, 10.2):
        log.add_pair({"a": a, "b": a / 2}, ("a", "b"))
        decided = decided or log.decided()
    assert decided and log.verdict == SLOWER  # B gives half the requests/s: worse
    assert log.comparison("decided", 1.0, {}).verdict == SLOWER


def test_an_arm_spec_runs_the_arms_interpreter_with_its_environment() -> None:
    arm = Arm("b", "/venvs/b/bin/python", {"X": "1"}, ("pkg==2",), "/o", env={"PATH": "/p"})
    base = spec("a", launch=LaunchOptions(threads=2))
    made = arm_spec(base, arm)
    assert (made.python, made.env) == ("/venvs/b/bin/python", {"PATH": "/p"})
    assert made.env is not arm.env  # the arm's own settings are never shared with the spec
    assert replace(made, python=base.python, env=base.env) == base


def test_a_failed_arms_comparison_holds_both_cells_and_no_time() -> None:
    cells = {
        "a": CellResult("accelerate", "fp32", 2, Outcome.OK, (1.0,)),
        "b": CellResult("accelerate", "fp32", 2, Outcome.OOM, message="CUDA out of memory"),
    }
    found = failure(cells)
    assert found is not None
    assert (found.elapsed_s, found.arms, found.stopped) == (0.0, cells, "failed")
    assert found.median("a") is None and found.median("b") is None  # no pairs: no medians
    assert failure({"a": cells["a"]}) is None


class Flushed(io.StringIO):
    """A stream that counts its flushes: a progress line reaches a pipe when it is printed."""

    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_progress_counts_the_pairs_set_aside_and_each_line_is_flushed() -> None:
    out = Flushed()
    log = PairLog(Cell("accelerate", "fp32", 1), Settings(min_pairs=2, max_pairs=9))
    log.add_pair({"a": 1.0, "b": 1.0}, ("a", "b"), loads={"a": (BUSY,), "b": (QUIET,)})
    log.add_pair({"a": 1.0, "b": 1.1}, ("b", "a"))
    print_progress(out)(log, 0.4)
    assert "    2 pairs (1 set aside)  no interval yet  0 s" in out.getvalue()
    assert out.flushes == 1
