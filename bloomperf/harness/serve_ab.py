"""Two serving arms compared interleaved (``bloomperf ab --serve``): both servers stay up, and
each pair is one sweep of each, run in lockstep, rate by rate.

At every rate of a pair both arms get the same requests (the same seed), one arm after the
other, the order drawn per pair and reversed at every other rate (A B, B A, …), so drift on
the machine lands on both; the bisection steps go the same way, each arm refining its own
bracket. A pair gives each registered metric a sweep yields (``store.serving.sweep_figures``:
effective throughput, p99 TTFT and ITL) one value per arm, judged by the paired statistics of
``bloomperf.analysis.paired`` in the metric's own direction, one ``PairLog`` per metric; pairs
continue until every metric's interval decides or the budget runs out, as for the blog's cells.
Each pair has requests of its own (``repeat_spec``): no server sees a prompt twice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bloomperf.analysis.serving import effective_throughput, next_bisection_rate
from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import HIGHER, metric
from bloomperf.harness.interleave import ARMS, Comparison, PairLog, Settings
from bloomperf.harness.launch import WorkerFailure
from bloomperf.harness.loadgen import single_token_words
from bloomperf.harness.matrix import Cell
from bloomperf.harness.server import Server
from bloomperf.harness.sweep import SweepSpec, Target, measure_rate, repeat_spec
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.serving import RateSummary, Sla, Sweep, sweep_cell, sweep_figures

# A sweep that met the SLA at no rate has no effective throughput (FastGen's 0): the paired
# statistics need a positive ratio, so against the other arm's figure it counts as this many
# times lower, beyond any change measured. Only the ranks of the pairs decide the verdict.
MISSING_FACTOR = 1000.0

RateSeen = Callable[[str, RateSummary], None]
PairSeen = Callable[[int, dict[str, PairLog], float], None]


@dataclass(frozen=True)
class ServingArms:
    """What the comparison needs of each arm: its server, and its sweep settings to record."""

    targets: dict[str, Target]
    settings: dict[str, dict[str, Any]]


def sweep_pair(
    spec: SweepSpec,
    targets: dict[str, Target],
    order: tuple[str, ...],
    workdir: Path,
    on_rate: RateSeen,
) -> dict[str, list[RateSummary]]:
    """One sweep of each arm, interleaved rate by rate (the order reversed at every other)."""
    words = single_token_words(spec.tokenizer / "tokenizer.json")
    models = {arm: (targets[arm].models() or [""])[0] for arm in ARMS}
    done: dict[str, list[RateSummary]] = {arm: [] for arm in ARMS}

    def measure(arm: str, rate: float, index: int) -> None:
        folder = workdir / arm
        summary = measure_rate(spec, targets[arm], models[arm], words, folder, rate, index)
        done[arm].append(summary)
        on_rate(arm, summary)

    for index, rate in enumerate(spec.rates):
        for arm in turn(order, index):
            measure(arm, rate, index)
    for step in range(spec.refine_steps):
        index = len(spec.rates) + step
        between = {arm: next_bisection_rate(done[arm], spec.sla, spec.resolution) for arm in ARMS}
        if all(rate is None for rate in between.values()):
            break
        for arm in turn(order, index):
            halfway = between[arm]
            if halfway is not None:
                measure(arm, round(halfway, 3), index)
    return done


def turn(order: tuple[str, ...], index: int) -> tuple[str, ...]:
    return order if index % 2 == 0 else tuple(reversed(order))


def pair_values(
    figures: dict[str, dict[str, tuple[float, ...]]],
) -> dict[str, dict[str, float]]:
    """Each metric's value per arm in one pair. A sweep keeps only positive figures: a
    higher-is-better one it lacks is 0 (no rate met the SLA), the worst, so it counts as
    ``MISSING_FACTOR`` times worse than the other arm's; a lower-is-better one it lacks was not
    measured (0 would be the best, not a measurement), so that metric has no pair."""
    values: dict[str, dict[str, float]] = {}
    for name in sorted(set(figures["a"]) | set(figures["b"])):
        have = {arm: figures[arm][name][0] for arm in ARMS if name in figures[arm]}
        if len(have) == 1 and metric(name).direction == HIGHER:
            ((_, value),), other = have.items(), "b" if "a" in have else "a"
            have[other] = value / MISSING_FACTOR
        if len(have) == 2:
            values[name] = have
    return values


def compare_servers(
    spec: SweepSpec,
    arms: ServingArms,
    cell: Cell,
    settings: Settings,
    tolerances: dict[str, float],
    workdir: Path,
    on_rate: RateSeen,
    on_pair: PairSeen,
) -> list[Comparison]:
    """Pairs of sweeps until every metric decides or the budget runs out; one comparison per
    metric (``tolerances``: each metric's), or one failed comparison when an arm's server or
    sweep failed (a sweep in which no rate ran)."""
    started = time.monotonic()
    try:
        for arm in ARMS:
            arms.targets[arm].ensure()
    except WorkerFailure as failure:
        return [failed(cell, arm, failure.outcome, str(failure), {}, started)]
    rng = random.Random(settings.seed)
    sweeps: dict[str, list[Sweep]] = {arm: [] for arm in ARMS}
    logs: dict[str, PairLog] = {}
    stopped = "max-pairs"
    for pair in range(settings.max_pairs):
        order = tuple(rng.sample(ARMS, 2))
        pair_spec = repeat_spec(spec, pair)
        rates = sweep_pair(pair_spec, arms.targets, order, workdir / f"pair-{pair}", on_rate)
        for arm in ARMS:
            sweeps[arm].append((rates[arm], effective_throughput(rates[arm], spec.sla)))
            if not any(r.outcome == "ok" for r in rates[arm]):
                first = rates[arm][0]
                cells = arm_cells(arms, sweeps, spec.sla)
                return [failed(cell, arm, first.outcome, first.message, cells, started)]
        figures = {arm: sweep_figures(rates[arm], sweeps[arm][-1][1]) for arm in ARMS}
        for name, values in pair_values(figures).items():
            log_settings = replace(settings, tolerance=tolerances.get(name, settings.tolerance))
            log = logs.setdefault(name, PairLog(cell, log_settings, metric=name))
            log.add_pair(values, order)
        undecided = [log for log in logs.values() if log.verdict is None and not log.decided()]
        on_pair(pair, logs, time.monotonic() - started)
        if logs and not undecided:
            stopped = "decided"
            break
        if time.monotonic() - started >= settings.max_time_s:
            stopped = "max-time"
            break
    elapsed = time.monotonic() - started
    cells = arm_cells(arms, sweeps, spec.sla)
    return [
        log.comparison("decided" if log.verdict is not None else stopped, elapsed, cells)
        for log in logs.values()
    ]


def start_servers(servers: dict[str, Server], cell: Cell) -> Comparison | None:
    """Start both servers at once (their loads overlap) and wait for each: None when both
    answer, else the failed comparison naming the arm whose server did not."""
    started = time.monotonic()
    for server in servers.values():
        server.start()
    for arm, server in servers.items():
        try:
            server.wait_ready()
        except WorkerFailure as failure:
            return failed(cell, arm, failure.outcome, str(failure), {}, started)
        except BloomperfError as exc:  # vLLM refused an engine argument: name the arm's option
            named = str(exc).replace("--engine-args", f"--{arm}-engine-args", 1)
            raise BloomperfError(named, exc.exit_code) from None
    return None


def arm_cells(arms: ServingArms, sweeps: dict[str, list[Sweep]], sla: Sla) -> dict[str, CellResult]:
    """Each arm's sweeps as the cell ``bloomperf serve --repeat`` would write: its curves,
    and a sample per sweep of each figure."""
    cells = {}
    for arm in ARMS:
        done = sweeps[arm]
        if done:
            first, effective = done[0]
            cells[arm] = sweep_cell(arms.settings[arm], sla, list(first), effective, done[1:])
    return cells


def failed(
    cell: Cell,
    arm: str,
    outcome: str,
    message: str,
    cells: dict[str, CellResult],
    started: float,
) -> Comparison:
    return Comparison(
        cell,
        Outcome(outcome),
        None,
        None,
        (),
        time.monotonic() - started,
        "failed",
        cells,
        f"arm {arm.upper()}: {outcome}: {message}",
    )
