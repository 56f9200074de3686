"""Measuring two environments interleaved on the same machine (the engine of ``bloomperf ab``).

Two modes, chosen by where the model runs:

* ``cycles`` (CPU): each arm's (backend, dtype) group is loaded once and both stay alive; cycles
  alternate between them in pairs (A B, B A, … the order of each pair drawn at random), so both
  arms see the same machine state and drift cancels in each pair's ratio.
* ``groups`` (GPU, where two copies of the model may not fit): the arms take turns holding the
  devices, one whole group load per arm per round in random order; each round gives one pair of
  per-round medians.

Each cell gets the paired statistics of ``bloomperf.analysis.paired`` and adaptive stopping: more
pairs until the interval decides (same / slower / faster), or the pair or time budget runs out
(inconclusive). The worker groups are the same ``GroupRunner`` → worker path as ``bloomperf
run``, started with the arm's interpreter and environment.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TextIO

from bloomperf.analysis.contention import Busy, busy_figures, clean_estimate, contended
from bloomperf.analysis.paired import (
    INCONCLUSIVE,
    PairedEstimate,
    as_cost,
    decide,
    final_verdict,
    first_look,
    look_confidence,
    next_look,
)
from bloomperf.catalog.workload import ms_per_token
from bloomperf.core.metrics import HEADLINE, HIGHER, metric
from bloomperf.harness.launch import GroupSpec
from bloomperf.harness.matrix import Cell, Group
from bloomperf.harness.overlay import Arm
from bloomperf.harness.runner import GroupRunner, threads_of
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import CellResult, Outcome

CYCLES = "cycles"
GROUPS = "groups"
ARMS = ("a", "b")


@dataclass(frozen=True)
class Settings:
    """How long and how hard to compare (all from the command line)."""

    tolerance: float = 0.05
    confidence: float = 0.99
    min_pairs: int = 10
    max_pairs: int = 2000
    max_time_s: float = 600.0  # per cell (cycles mode) or per group (groups mode)
    warmup: int = 1
    cycles_per_round: int = 5  # groups mode: timed cycles per arm per load
    mode: str = CYCLES
    seed: int = 0

    @property
    def look_confidence(self) -> float:
        """Each look's interval level, so that all the looks together keep ``confidence``."""
        return look_confidence(self.confidence, self.min_pairs, self.max_pairs)


@dataclass(frozen=True)
class Sample:
    """One timed cycle: its arm, its pair (round), its position in the pair, its order overall,
    what else used the machine meanwhile, and whether its pair was set aside for that."""

    arm: str
    pair: int
    position: int
    sequence: int
    ms_per_token: float
    load: CycleLoad | None = None
    set_aside: bool = False


@dataclass(frozen=True)
class Comparison:
    """One cell compared: the verdict, the estimate, every sample, and each arm's cell."""

    cell: Cell
    outcome: Outcome
    verdict: str | None
    estimate: PairedEstimate | None
    samples: tuple[Sample, ...]
    elapsed_s: float
    stopped: str  # decided | max-pairs | max-time | failed
    arms: dict[str, CellResult] = field(default_factory=dict)
    message: str = ""
    busy: Busy | None = None  # how busy the machine was; set whenever pairs were measured
    metric: str = HEADLINE  # the registered metric judged: ms/token, or a serving figure

    @property
    def busy_verdict(self) -> bool:
        """Inconclusive because pairs had to be set aside: the machine was busy."""
        return self.verdict == INCONCLUSIVE and self.busy is not None and self.busy.set_aside > 0

    def median(self, arm: str) -> float | None:
        values = [s.ms_per_token for s in self.samples if s.arm == arm]
        return statistics.median(values) if values else None


@dataclass
class PairLog:
    """Pairs measured so far for one cell, and when to look at the interval again."""

    cell: Cell
    settings: Settings
    metric: str = HEADLINE  # what the pairs' values are (Sample.ms_per_token holds them)
    samples: list[Sample] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=lambda: {"a": [], "b": []})
    # Per pair: whether it is set aside, and each arm's cycles' loads behind it.
    set_aside: list[bool] = field(default_factory=list)
    loads: list[tuple[tuple[CycleLoad | None, ...], ...]] = field(default_factory=list)
    look: int = 0
    report_at: int = 0  # the measured pairs at which progress is reported next
    estimate: PairedEstimate | None = None
    verdict: str | None = None

    @property
    def pairs(self) -> int:
        return len(self.ratios["b"])

    @property
    def clean_pairs(self) -> int:
        """The pairs the verdict rests on: those not set aside for contention."""
        return self.pairs - sum(self.set_aside)

    def add_pair(
        self,
        values: dict[str, float],
        order: tuple[str, ...],
        cycles: dict[str, tuple[float, ...]] | None = None,
        loads: dict[str, tuple[CycleLoad | None, ...]] | None = None,
    ) -> None:
        """One pair of values; ``cycles`` (groups mode) are every cycle behind each value,
        ``loads`` each cycle's contention (in the same order), which may set the pair aside."""
        pair = self.pairs
        arm_loads = {arm: (loads or {}).get(arm, ()) for arm in ARMS}
        aside = contended(arm_loads["a"], arm_loads["b"], self.settings.tolerance)
        for position, arm in enumerate(order):
            for i, value in enumerate(cycles[arm] if cycles else (values[arm],)):
                load = arm_loads[arm][i] if i < len(arm_loads[arm]) else None
                sample = Sample(arm, pair, position, len(self.samples), value, load, aside)
                self.samples.append(sample)
        for arm in ARMS:
            self.ratios[arm].append(values[arm])
        self.set_aside.append(aside)
        self.loads.append((arm_loads["a"], arm_loads["b"]))

    def add_round(self, arms: dict[str, CellResult], order: tuple[str, ...]) -> None:
        """One round of groups mode: each arm's cell, paired by its figure (the median of its
        timed cycles, ``CellResult.ms_per_token``), with every cycle behind it kept."""
        values = {arm: float(arms[arm].ms_per_token or 0.0) for arm in ARMS}
        cycles = {arm: arms[arm].samples_ms_per_token for arm in ARMS}
        self.add_pair(values, order, cycles, {arm: arms[arm].loads for arm in ARMS})

    def decided(self) -> bool:
        """Look at the interval when the schedule says so; True once it supports a verdict.
        The schedule counts clean pairs: a pair set aside is as if it had not been measured."""
        if self.clean_pairs < max(self.look, first_look(self.settings.min_pairs)):
            return False
        self.look = next_look(self.clean_pairs)
        self.estimate = self.clean_estimate()
        worse = as_cost(self.estimate, self.higher_is_better)  # "slower": B worse
        self.verdict = decide(worse, self.settings.tolerance) if worse else None
        return self.verdict is not None

    @property
    def higher_is_better(self) -> bool:
        return metric(self.metric).direction == HIGHER

    def report_due(self) -> bool:
        """Whether to report (and save) progress now: on the looks' schedule, counted in
        measured pairs, so a machine too busy for any look still shows and keeps its pairs."""
        if self.pairs < max(self.report_at, first_look(self.settings.min_pairs)):
            return False
        self.report_at = next_look(self.pairs)
        return True

    def clean_estimate(self) -> PairedEstimate | None:
        """The paired estimate over the clean pairs; None while there is none."""
        return clean_estimate(
            self.ratios["a"], self.ratios["b"], self.set_aside, self.settings.look_confidence
        )

    def comparison(self, stopped: str, elapsed: float, arms: dict[str, CellResult]) -> Comparison:
        if self.estimate is None or self.estimate.pairs != self.clean_pairs:
            self.estimate = self.clean_estimate()
        return Comparison(
            cell=self.cell,
            outcome=Outcome.OK,
            verdict=final_verdict(
                as_cost(self.estimate, self.higher_is_better), self.settings.tolerance
            ),
            estimate=self.estimate,
            samples=tuple(self.samples),
            elapsed_s=elapsed,
            stopped=stopped,
            arms=arms,
            busy=busy_figures(self.loads, self.set_aside) if self.pairs else None,
            metric=self.metric,
        )


Progress = Callable[[PairLog, float], None]


def arm_spec(spec: GroupSpec, arm: Arm) -> GroupSpec:
    return replace(spec, python=arm.python, env=dict(arm.env))


def compare_group(
    specs: dict[str, GroupSpec],
    group: Group,
    settings: Settings,
    progress: Progress,
) -> Iterator[Comparison]:
    """Compare every cell of one (backend, dtype) group in the settings' mode."""
    if settings.mode == GROUPS:
        yield from compare_by_groups(specs, group, settings, progress)
        return
    rng = random.Random(settings.seed)
    runners = {arm: GroupRunner(specs[arm], warmup=settings.warmup) for arm in ARMS}
    # Each arm's worker is bloomperf's own to the other: its CPU time is not a neighbour's.
    runners["a"].also_ours = runners["b"].tree_roots
    runners["b"].also_ours = runners["a"].tree_roots
    try:
        with shared_cpus(list(specs.values())):
            for cell in group.cells():
                yield compare_cell_by_cycles(runners, cell, settings, rng, progress)
    finally:
        for runner in runners.values():
            runner.stop()


@contextlib.contextmanager
def shared_cpus(specs: list[GroupSpec]) -> Iterator[None]:
    """Start both arms' CPU workers on the same cores (they inherit this process's affinity).

    Left to the scheduler, the two live workers settle on different cores, and on a shared
    machine one core can stay busier than the other for minutes: a bias no interleaving
    cancels (seen here: an A/A pair reading 1.27 after 40 pairs). On the same cores, whatever
    else runs there slows both arms alike. The cores are the last ones this process may use,
    as many as the hungrier arm's ranks × threads (an arm's own ``OMP_NUM_THREADS`` counts:
    comparing thread counts must not squeeze the larger one onto fewer cores).
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if any(spec.device != "cpu" for spec in specs) or not allowed:
        yield
        return
    needed = max(spec.world_size * threads_of(spec) for spec in specs)
    os.sched_setaffinity(0, allowed[-needed:])
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def compare_cell_by_cycles(
    runners: dict[str, GroupRunner],
    cell: Cell,
    settings: Settings,
    rng: random.Random,
    progress: Progress,
) -> Comparison:
    """Alternate single cycles of two live groups, through each runner's own ``run_cell``.

    ``run_cell`` hands its cycle function to a ``measure`` callback; A's callback starts B's
    ``run_cell``, whose callback then holds both cycle functions and measures the pairs. Each
    arm's cell thus goes through the usual begin / cycles / end protocol and memory marks.
    """
    log = PairLog(cell, settings)
    cycle: dict[str, Callable[[], float]] = {}
    new_tokens = runners["a"].spec.new_tokens
    started = time.monotonic()
    stopped = "failed"
    results: dict[str, CellResult] = {}

    def measure_pairs() -> None:
        nonlocal stopped
        for _ in range(settings.warmup):
            for arm in rng.sample(ARMS, 2):
                cycle[arm]()
        while True:
            order = tuple(rng.sample(ARMS, 2))
            values: dict[str, float] = {}
            loads: dict[str, tuple[CycleLoad | None, ...]] = {}
            for arm in order:
                values[arm] = ms_per_token(cycle[arm](), cell.batch_size, new_tokens)
                loads[arm] = (runners[arm].last_load,)
            log.add_pair(values, order, loads=loads)
            decided = log.decided()
            if log.report_due() or decided:
                progress(log, time.monotonic() - started)  # as often as the looks would be
            if decided:
                stopped = "decided"
            elif log.pairs >= settings.max_pairs:
                stopped = "max-pairs"
            elif time.monotonic() - started >= settings.max_time_s:
                stopped = "max-time"
            else:
                continue
            return

    def measure_arm(arm: str) -> Callable[[Callable[[], float], int, int], list[float]]:
        def measure(one_cycle: Callable[[], float], warmup: int, cycles: int) -> list[float]:
            cycle[arm] = one_cycle
            if arm == "a":
                results["b"] = runners["b"].run_cell(cell.batch_size, measure_arm("b"))
            else:
                measure_pairs()
            # Seconds are what run_cell expects back; ms/token times batch × tokens is that.
            return [v * cell.batch_size * new_tokens / 1000.0 for v in log.ratios[arm]]

        return measure

    results["a"] = runners["a"].run_cell(cell.batch_size, measure_arm("a"))
    elapsed = time.monotonic() - started
    failed = failure(results)
    if failed is not None:
        return failed
    return log.comparison(stopped, elapsed, results)


def failure(results: dict[str, CellResult]) -> Comparison | None:
    """The failed comparison when either arm's cell did not run (the first failure wins)."""
    for arm in ARMS:
        result = results.get(arm)
        if result is not None and result.outcome is not Outcome.OK:
            cell = Cell(result.backend, result.dtype, result.batch_size)
            message = f"arm {arm.upper()}: {result.outcome.value}: {result.message}"
            return Comparison(cell, result.outcome, None, None, (), 0.0, "failed", results, message)
    return None


def compare_by_groups(
    specs: dict[str, GroupSpec],
    group: Group,
    settings: Settings,
    progress: Progress,
) -> Iterator[Comparison]:
    """Rounds in which each arm in turn loads its group alone and runs every batch size.

    A pair is the two arms' median ms/token of one cell in one round. Cells are decided
    together: rounds continue while any cell is undecided and the budget lasts.
    """
    rng = random.Random(settings.seed)
    logs = {cell.batch_size: PairLog(cell, settings) for cell in group.cells()}
    started = time.monotonic()
    last: dict[int, dict[str, CellResult]] = {}
    stopped = "max-pairs"
    for _ in range(settings.max_pairs):
        order = tuple(rng.sample(ARMS, 2))
        measured: dict[int, dict[str, CellResult]] = {b: {} for b in logs}
        for arm in order:
            runner = GroupRunner(
                specs[arm], warmup=settings.warmup, cycles=settings.cycles_per_round
            )
            try:
                for batch_size in logs:
                    result = runner.run_cell(batch_size)
                    last.setdefault(batch_size, {})[arm] = result
                    if result.outcome is not Outcome.OK:
                        break
                    measured[batch_size][arm] = result
            finally:
                runner.stop()
        for batch_size, log in logs.items():
            failed = failure(last.get(batch_size, {}))
            if failed is not None:
                yield failed
                return
            log.add_round(measured[batch_size], order)
        undecided = [log for log in logs.values() if log.verdict is None and not log.decided()]
        for log in logs.values():
            progress(log, time.monotonic() - started)
        if not undecided:  # each log has its verdict: each says "decided" below
            break
        if time.monotonic() - started >= settings.max_time_s:
            stopped = "max-time"
            break
    elapsed = time.monotonic() - started
    for batch_size, log in logs.items():
        how = "decided" if log.verdict is not None else stopped
        yield log.comparison(how, elapsed, last.get(batch_size, {}))


def print_progress(err: TextIO | None = None) -> Progress:
    def show(log: PairLog, elapsed: float) -> None:
        estimate = log.estimate
        figures = (
            f"B/A {estimate.ratio:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]"
            if estimate is not None
            else "no interval yet"
        )
        aside = log.pairs - log.clean_pairs
        pairs = f"{log.pairs:>5} pairs" + (f" ({aside} set aside)" if aside else "")
        print(
            f"  {log.cell.id:<28} {pairs}  {figures}  {elapsed:.0f} s",
            file=err or sys.stderr,  # read when printed: a default bound at import outlives it
            flush=True,
        )

    return show
