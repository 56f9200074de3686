"""Running the cells of one (backend, dtype) on one worker group: load once, restart on failure.

Cells arrive in ascending batch size. The group is loaded on the first cell and reused; after an
OOM, an error or a timeout it is killed and the next cell starts a fresh one (a CUDA OOM or a
hung collective can poison a process, and a fresh process gives clean load and memory figures).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from bloomperf.catalog.workload import ms_per_token
from bloomperf.core.progress import heartbeat, last_line
from bloomperf.harness.launch import GroupSpec, LoadReport, WorkerFailure, WorkerGroup
from bloomperf.measure.contention import LoadProbe
from bloomperf.measure.energy import EnergyMeter, create_meter, total_energy
from bloomperf.measure.telemetry import TelemetrySampler, create_sampler
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import CellResult, EnergyReading, Outcome
from bloomperf.store.telemetry import Telemetry, TelemetrySample, summarize

LOG_TAIL_LINES = 15  # of a failed group's log, quoted in the cell's message

# (one_cycle, warmup, cycles) -> seconds of each timed cycle. The default is a plain loop; the
# pytest plugin passes one that runs the cycles inside pytest-benchmark's pedantic().
Measure = Callable[[Callable[[], float], int, int], list[float]]


def measure_plainly(one_cycle: Callable[[], float], warmup: int, cycles: int) -> list[float]:
    for _ in range(warmup):
        one_cycle()
    return [one_cycle() for _ in range(cycles)]


class GroupRunner:
    def __init__(
        self,
        spec: GroupSpec,
        *,
        warmup: int = 1,
        cycles: int = 5,
        energy_meter: EnergyMeter | None = None,
        telemetry: TelemetrySampler | str | None = None,
    ) -> None:
        self.spec = spec
        self.warmup = warmup
        self.cycles = cycles
        self.group: WorkerGroup | None = None
        self.loaded: LoadReport | None = None
        self.load_count = 0
        self.load_failure: WorkerFailure | None = None
        # The step times of every cycle the worker ran for the current cell, warm-up included:
        # the timed cycles are the last ones (``measure`` returns only theirs).
        self._cycle_steps: list[tuple[float, ...]] = []
        self._cycle_figures: list[dict[str, Any]] = []
        self._cycle_energy: list[EnergyReading] = []
        self._batch_size = 0
        self.energy_meter = energy_meter  # created on the first cell (NVML or RAPL)
        self.telemetry = telemetry  # a sampler, or why there is none; created on the first cell
        self._cycle_telemetry: list[list[TelemetrySample]] = []
        # Root pids of bloomperf's other worker trees (the other arm in ``ab``): their CPU
        # time is ours, not a neighbour's.
        self.also_ours: Callable[[], Iterable[int]] = tuple
        self._probe: LoadProbe | None = None
        self._cycle_loads: list[CycleLoad] = []

    def run_cell(self, batch_size: int, measure: Measure = measure_plainly) -> CellResult:
        base = CellResult(
            backend=self.spec.backend,
            dtype=self.spec.dtype,
            batch_size=batch_size,
            outcome=Outcome.OK,
        )
        if self.load_failure is not None:
            return replace(
                base,
                outcome=Outcome(self.load_failure.outcome),
                message=f"model failed to load: {self.load_failure.message}",
            )
        try:
            group, loaded = self._ensure_loaded()
        except WorkerFailure as failure:
            self.load_failure = failure
            return replace(
                base,
                outcome=Outcome(failure.outcome),
                message=f"model failed to load: {failure.message}",
            )
        base = replace(
            base,
            load_time_s=loaded.load_time_s,
            load_memory=loaded.memory,
            details={**loaded.details, "load_count": self.load_count},
        )
        try:
            # begin frees what the last cell left (gc, empty_cache), resets torch's peaks on
            # every device and checks the output; the cell's own phase starts after it, so
            # neither the time between cells nor the check counts in its peak.
            ready = group.request({"op": "begin", "batch_size": batch_size}, "ready")
            group.mark_memory()
            base = replace(
                base, details={**base.details, "backend_loads": ready.get("backend_loads")}
            )
            self._cycle_steps, self._cycle_energy, self._cycle_telemetry = [], [], []
            self._cycle_figures = []
            self._cycle_loads = []
            self._batch_size = batch_size
            seconds = measure(lambda: self._cycle(group), self.warmup, self.cycles)
            peaks = group.request({"op": "end"}, "ended")
        except WorkerFailure as failure:
            memory = group.mark_memory()
            self.stop()
            return replace(
                base,
                outcome=Outcome(failure.outcome),
                message=with_log(failure, group).message,
                generate_memory=memory,
            )
        memory = group.phase_memory(peaks.get("ranks"))
        if memory is not None:
            memory = replace(
                memory,
                torch_allocated_bytes=peaks.get("torch_allocated_bytes"),
                torch_reserved_bytes=peaks.get("torch_reserved_bytes"),
            )
        samples = tuple(ms_per_token(s, batch_size, self.spec.new_tokens) for s in seconds)
        timed = len(seconds)
        return replace(
            base,
            samples_ms_per_token=samples,
            samples_step_ms=tuple(self._cycle_steps[len(self._cycle_steps) - timed :]),
            energy=total_energy(self._cycle_energy[len(self._cycle_energy) - timed :]),
            telemetry=self._telemetry_of(timed),
            generate_memory=memory,
            figures=timed_figures(self._cycle_figures[len(self._cycle_figures) - timed :]),
            loads=tuple(self._cycle_loads[len(self._cycle_loads) - timed :]),
        )

    def _cycle(self, group: WorkerGroup) -> float:
        # The energy counters and the machine's load are read here, in the controller, around
        # the request: outside the worker's timed region, so they add nothing to what is timed.
        meter, sampler, probe = self._meter(), self._sampler(), self._load_probe()
        if isinstance(sampler, TelemetrySampler):
            sampler.samples = []
            sampler.start()
        load_before = probe.snapshot()
        before = meter.snapshot()
        try:
            reply = group.request({"op": "cycle"}, "sample")
        finally:
            if isinstance(sampler, TelemetrySampler):
                sampler.stop()
        after = meter.snapshot()
        self._cycle_loads.append(probe.between(load_before, probe.snapshot()))
        if isinstance(sampler, TelemetrySampler):
            self._cycle_telemetry.append(sampler.samples)
        tokens = self._batch_size * self.spec.new_tokens
        self._cycle_energy.append(meter.between(before, after, tokens))
        self._cycle_steps.append(tuple(float(ms) for ms in reply.get("step_ms", [])))
        self._cycle_figures.append(reply.get("figures") or {})
        return float(reply["seconds"])

    @property
    def last_load(self) -> CycleLoad | None:
        """What else used the machine during the latest cycle."""
        return self._cycle_loads[-1] if self._cycle_loads else None

    def tree_roots(self) -> list[int]:
        """The root pid of the live worker group (its launcher or its only rank), if any."""
        process = self.group.process if self.group is not None else None
        return [process.pid] if process is not None else []

    def _load_probe(self) -> LoadProbe:
        if self._probe is None:
            width = self.spec.world_size * threads_of(self.spec)
            gpus = [d.index for d in self.spec.devices] if self.spec.device != "cpu" else []
            self._probe = LoadProbe(self.tree_roots, lambda: self.also_ours(), width, gpus)
        return self._probe

    def _sampler(self) -> TelemetrySampler | str:
        if self.telemetry is None:
            self.telemetry = create_sampler(self.spec.device, [d.index for d in self.spec.devices])
        return self.telemetry

    def _telemetry_of(self, timed: int) -> Telemetry:
        sampler = self._sampler()
        if isinstance(sampler, str):
            return summarize([], sampler)
        cycles = self._cycle_telemetry[len(self._cycle_telemetry) - timed :]
        return summarize([s for cycle in cycles for s in cycle], sampler.error)

    def _meter(self) -> EnergyMeter:
        if self.energy_meter is None:
            indexes = [d.index for d in self.spec.devices]
            self.energy_meter = create_meter(self.spec.device, indexes)
        return self.energy_meter

    def _ensure_loaded(self) -> tuple[WorkerGroup, LoadReport]:
        if self.group is None or self.loaded is None:
            group = WorkerGroup(self.spec)
            self.group = group
            self.load_count += 1
            what = f"loading {self.spec.backend} {self.spec.dtype}"
            try:
                with heartbeat(what, lambda: last_line(group.log_path)):
                    self.loaded = group.start()
            except WorkerFailure as failure:
                self.stop()
                raise with_log(failure, group) from None
        return self.group, self.loaded

    def stop(self) -> None:
        if self.group is not None:
            self.group.close()
        self.group = None
        self.loaded = None

    def abort(self) -> None:
        """After a signal: kill the group at once (a busy worker is not waited for)."""
        if self.group is not None:
            self.group.abort()
        self.group = None
        self.loaded = None


def threads_of(spec: GroupSpec) -> int:
    """The threads per rank a group's workers will use: its OMP_NUM_THREADS, else --threads."""
    try:
        return max(1, int(spec.env.get("OMP_NUM_THREADS") or spec.launch.threads))
    except ValueError:
        return 1


def with_log(failure: WorkerFailure, group: WorkerGroup) -> WorkerFailure:
    """An error or timeout names the group's log and quotes its last lines (an OOM's message
    is the library's own and says enough)."""
    if failure.outcome not in (Outcome.ERROR.value, Outcome.TIMEOUT.value):
        return failure
    message = f"{failure.message}\nworker log: {group.log_path}"
    if "log tail:" not in failure.message:
        tail = group.log_tail().strip().splitlines()[-LOG_TAIL_LINES:]
        if tail:
            message += "\nlog tail:\n" + "\n".join(tail)
    return WorkerFailure(failure.outcome, message)


def timed_figures(cycles: list[dict[str, Any]]) -> dict[str, tuple[float, ...]]:
    """The timed cycles' figures of the metrics that measure their own, by metric; a cycle a
    meter could not read (None) is left out."""
    names = sorted({name for cycle in cycles for name in cycle})
    return {
        name: tuple(float(c[name]) for c in cycles if c.get(name) is not None) for name in names
    }
