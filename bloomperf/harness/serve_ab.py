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

What else used the machine is read around every rate (``load_probes``: the arm's server's
run-queue wait, as ``bloomperf.analysis.contention`` needs it), so that a burst of load that
lands on one arm's sweep sets that pair aside instead of deciding the verdict.
"""

from __future__ import annotations

import os
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
from bloomperf.harness.server import READY_POLL_S, Server
from bloomperf.harness.sweep import Managed, SweepSpec, Target, measure_rate, repeat_spec
from bloomperf.measure.contention import LoadProbe, Snapshot
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.serving import RateSummary, Sla, Sweep, sweep_cell, sweep_figures

# A sweep that met the SLA at no rate has no effective throughput (FastGen's 0): the paired
# statistics need a positive ratio, so against the other arm's figure it counts as this many
# times lower, beyond any change measured. Only the ranks of the pairs decide the verdict.
MISSING_FACTOR = 1000.0

RateSeen = Callable[[str, RateSummary, str], None]  # arm, its rate, "warm-up" or ""
PairSeen = Callable[[int, dict[str, PairLog], float], None]


@dataclass(frozen=True)
class ServingArms:
    """What the comparison needs of each arm: its server, and its sweep settings to record."""

    targets: dict[str, Target]
    settings: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class PairSweeps:
    """One pair's sweeps: each arm's rates, and what else used the machine at each of them."""

    rates: dict[str, list[RateSummary]]
    loads: dict[str, list[CycleLoad | None]]


def sweep_pair(
    spec: SweepSpec,
    targets: dict[str, Target],
    order: tuple[str, ...],
    workdir: Path,
    on_rate: RateSeen,
    probes: dict[str, LoadProbe] | None = None,
) -> PairSweeps:
    """One sweep of each arm, interleaved rate by rate (the order reversed at every other);
    each rate's load read by its arm's probe (``load_probes``) around it, when given."""
    words = single_token_words(spec.tokenizer / "tokenizer.json")
    models = {arm: (targets[arm].models() or [""])[0] for arm in ARMS}
    done = PairSweeps({arm: [] for arm in ARMS}, {arm: [] for arm in ARMS})

    def measure(arm: str, rate: float, index: int) -> None:
        folder = workdir / arm
        watch = LoadWatch(probes[arm]) if probes else None
        summary = measure_rate(spec, targets[arm], models[arm], words, folder, rate, index, watch)
        done.rates[arm].append(summary)
        done.loads[arm].append(watch.load if watch else None)
        on_rate(arm, summary, "")

    for index, rate in enumerate(spec.rates):
        for arm in turn(order, index):
            measure(arm, rate, index)
    for step in range(spec.refine_steps):
        index = len(spec.rates) + step
        between = {
            arm: next_bisection_rate(done.rates[arm], spec.sla, spec.resolution) for arm in ARMS
        }
        if all(rate is None for rate in between.values()):
            break
        for arm in turn(order, index):
            halfway = between[arm]
            if halfway is not None:
                measure(arm, round(halfway, 3), index)
    return done


class LoadWatch:
    """What else used the machine while one client's timed requests ran: the arm's server and
    the client itself are the measured worker (``load_probes``), read when the client's log
    says its run starts and again when it says it ended. Its start-up (seconds of imports) and
    its test request lie outside: the machine's state then says nothing of the run."""

    def __init__(self, probe: LoadProbe) -> None:
        self.probe = probe
        self.before: Snapshot | None = None
        self.load: CycleLoad | None = None

    def started(self, pid: int) -> None:
        self.before = self.probe.snapshot(extra=(pid,))

    def ended(self, pid: int) -> None:
        if self.before is not None:
            self.load = self.probe.between(self.before, self.probe.snapshot(extra=(pid,)))


def load_probes(targets: dict[str, Target]) -> dict[str, LoadProbe]:
    """Each arm's probe: its server's process tree (keeper, API server, engine core) and the
    client (``LoadWatch``) are the measured worker, the other arm's server is bloomperf's too.
    They share the CPUs this process may use (``cpus``: the others' share of them is judged);
    their width, for the wait reported, is the engine's threads (``--threads``, else every
    CPU: vLLM's choice) and the client's one."""

    def roots(arm: str) -> Callable[[], list[int]]:
        return lambda: server_roots(targets[arm])

    cpus = len(os.sched_getaffinity(0))
    return {
        arm: LoadProbe(
            roots(arm), roots(other), width=server_width(targets[arm], cpus) + 1, cpus=cpus
        )
        for arm, other in (("a", "b"), ("b", "a"))
    }


def server_roots(target: Target) -> list[int]:
    process = target.server.process if isinstance(target, Managed) else None
    return [process.pid] if process is not None else []


def server_width(target: Target, cpus: int) -> int:
    threads = target.server.spec.threads if isinstance(target, Managed) else None
    return threads or cpus


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
    warm_up(spec, arms.targets, settings, workdir / "warm-up", on_rate)
    rng = random.Random(settings.seed)
    probes = load_probes(arms.targets)
    sweeps: dict[str, list[Sweep]] = {arm: [] for arm in ARMS}
    logs: dict[str, PairLog] = {}
    stopped = "max-pairs"
    for pair in range(settings.max_pairs):
        order = tuple(rng.sample(ARMS, 2))
        pair_spec = repeat_spec(spec, pair)
        done = sweep_pair(pair_spec, arms.targets, order, workdir / f"pair-{pair}", on_rate, probes)
        rates = done.rates
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
            log.add_pair(values, order, loads={arm: tuple(done.loads[arm]) for arm in ARMS})
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


def warm_up(
    spec: SweepSpec,
    targets: dict[str, Target],
    settings: Settings,
    workdir: Path,
    on_rate: RateSeen,
) -> None:
    """``settings.warmup`` runs of the first rate on each server, not judged. A server's first
    runs are slower (its first batches, the client's first reads of the model's files), and
    without this they would all fall on the first pair, on whichever arm it draws first: a
    bias towards one arm, not noise. Their requests are apart from every pair's (seeds past
    ``max_pairs`` repeats)."""

    def seen(arm: str, summary: RateSummary, _: str) -> None:
        on_rate(arm, summary, "warm-up")

    for round_ in range(settings.warmup):
        warm = repeat_spec(spec, settings.max_pairs + round_)
        first = replace(warm, rates=spec.rates[:1], refine_steps=0)
        sweep_pair(first, targets, ARMS, workdir / f"{round_}", seen)


def start_servers(servers: dict[str, Server], cell: Cell) -> Comparison | None:
    """Start both servers at once (their loads overlap) and wait for both: None when both
    answer, else the failed comparison naming the first arm whose server did not. Both are
    looked at in turn, so that arm B refusing its engine arguments is said as soon as its
    server exits, not after arm A's load (a minute or more)."""
    started = time.monotonic()
    for server in servers.values():
        server.start()
    waiting = dict(servers)
    while waiting:
        for arm, server in list(waiting.items()):
            try:
                if server.answers(started):
                    del waiting[arm]
            except WorkerFailure as failure:
                return failed(cell, arm, failure.outcome, str(failure), {}, started)
            except BloomperfError as exc:  # vLLM refused an engine argument: name the arm's
                named = str(exc).replace("--engine-args", f"--{arm}-engine-args", 1)
                raise BloomperfError(named, exc.exit_code) from None
        if waiting:
            time.sleep(READY_POLL_S)
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
