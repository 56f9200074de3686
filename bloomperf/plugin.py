"""The pytest plugin: options, markers, the parametrised matrix, pytest-benchmark, the summary.

Only hooks and fixtures live here; measuring is ``bloomperf.harness.session.Session``'s job,
verdicts are ``bloomperf.analysis.compare``'s. A test asks for ``bloomperf_cell`` (parametrised
backend × dtype × batch with ids like ``accelerate-bf16-bs32``), ``bloomperf`` and ``benchmark``,
and calls ``bloomperf.check(bloomperf_cell, benchmark)``. Tests marked ``gpu`` get the GPU matrix,
tests marked ``cpu`` the tiny-model CPU matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bloomperf.analysis.compare import judge_cell
from bloomperf.analysis.verdicts import Comparison
from bloomperf.catalog.fingerprint import environment_fingerprint
from bloomperf.catalog.topology import Topology, detect_topology
from bloomperf.catalog.workload import PROMPTS
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import plain, utc_now
from bloomperf.core.interrupt import sigterm_as_interrupt
from bloomperf.core.jsonfile import refuse_overwriting_inputs
from bloomperf.core.progress import emit, set_sink
from bloomperf.harness.finish import Finished, finish_run, judge_run
from bloomperf.harness.matrix import Cell, plan_groups
from bloomperf.harness.options import OPTIONS, add_pytest_options, input_files, resolve_options
from bloomperf.harness.session import DEFAULT_MODEL, Session, lock_key
from bloomperf.harness.sinks import RunContext, open_sinks
from bloomperf.render.comparison import render_comparison
from bloomperf.render.table import render_run_table
from bloomperf.store.baseline.search import refuse_output_among_baselines
from bloomperf.store.results import CellResult, ModelInfo, Outcome, RunResult, WorkloadInfo
from bloomperf.store.results.codec import cell_to_dict, run_to_dict, save_run
from bloomperf.store.results.output import results_path

MATRIX_FIXTURE = "bloomperf_cell"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_pytest_options(
        parser.getgroup("bloomperf", "bloomperf: BLOOM inference benchmarks"), parser
    )


class SinkHooks:
    """A conftest's sink: it implements either hook (``bloomperf.harness.sinks.Sink``)."""

    @pytest.hookspec
    def pytest_bloomperf_cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        """A cell was measured (or skipped); ``run`` holds every cell so far."""

    @pytest.hookspec
    def pytest_bloomperf_run_finished(
        self, run: RunResult, verdicts: Comparison, context: RunContext
    ) -> None:
        """The run finished (not interrupted), judged against its baseline."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(SinkHooks)


class ConftestSink:
    """The session's sink that calls the conftest hooks above."""

    name = "conftest"

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        self.hook.pytest_bloomperf_cell_recorded(cell=cell, run=run)

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        self.hook.pytest_bloomperf_run_finished(run=run, verdicts=verdicts, context=context)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpu: the GPU matrix (skipped with NVML's reason without GPU)"
    )
    config.addinivalue_line("markers", "cpu: the tiny-model matrix on CPU")
    config.pluginmanager.register(BloomperfController(config), "bloomperf-controller")


def cell_of(item: pytest.Item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    cell = callspec.params.get(MATRIX_FIXTURE) if callspec is not None else None
    return cell if isinstance(cell, Cell) else None


def controller_of(config: pytest.Config) -> BloomperfController:
    controller = config.pluginmanager.get_plugin("bloomperf-controller")
    assert isinstance(controller, BloomperfController)
    return controller


def device_of(marked: Callable[[str], Any]) -> str:
    return "cuda" if marked("gpu") else "cpu"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if MATRIX_FIXTURE not in metafunc.fixturenames:
        return
    controller = controller_of(metafunc.config)
    device = device_of(metafunc.definition.get_closest_marker)
    cells = [c for g in plan_groups(controller.options, device) for c in g.cells()]
    metafunc.parametrize(MATRIX_FIXTURE, cells, ids=[c.id for c in cells])


class VirtualClock:
    """pytest-benchmark's timer, advanced by the worker's synchronised generate times.

    The worker times each cycle next to the device; the controller's own clock would add the
    round trip to the worker. Feeding pytest-benchmark this clock makes its statistics exactly
    the worker's measurements.
    """

    __name__ = "bloomperf-worker-clock"

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pedantic_measure(benchmark: Any) -> Callable[[Callable[[], float], int, int], list[float]]:
    def measure(one_cycle: Callable[[], float], warmup: int, cycles: int) -> list[float]:
        clock = VirtualClock()
        seconds: list[float] = []

        def target() -> None:
            elapsed = one_cycle()
            clock.now += elapsed
            seconds.append(elapsed)

        if benchmark.disabled:  # --benchmark-disable: run the cycles ourselves
            for _ in range(warmup):
                one_cycle()
            return [one_cycle() for _ in range(cycles)]
        benchmark._timer = clock
        benchmark.pedantic(target, rounds=cycles, warmup_rounds=warmup, iterations=1)
        return seconds[warmup:]

    return measure


def run_context(run: RunResult) -> dict[str, Any]:
    """The run as stored in a benchmark's extra_info: every cell that timed nothing included."""
    context = run_to_dict(run)
    context["cells"] = [c for c in context["cells"] if c["outcome"] != Outcome.OK.value]
    return context


def live_writer(config: pytest.Config) -> Callable[[str], None] | None:
    """Progress lines to the terminal while a test runs, without ``-s``: pytest captures the
    test's output (file descriptor 1 included), so each line suspends the capture, as pytest's
    own live logging does; None (stderr) without a terminal reporter."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return None

    def write(line: str) -> None:
        if capture is None:
            reporter.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return write


class BloomperfController:
    """Session-wide state: resolved options, one measuring Session per device."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cli = {o.name: config.getoption("bloomperf_" + o.name) for o in OPTIONS}
        self.ini = {o.name: (config.getini(o.ini_key) or None) for o in OPTIONS}
        try:
            self.options = resolve_options(self.cli, self.ini, flag_style="pytest")
        except BloomperfError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.sessions: dict[str, Session] = {}
        self.topology: Topology | None = None
        self._locks: list[Any] = []
        self._started = 0  # matrix cells started (of _total collected), for the progress lines
        self._total = 0
        self._devices: set[str] = set()  # the devices of the matrix items collected
        self.empty_output: Path | None = None
        self.finished: dict[str, Finished] = {}
        # The run context stored in each benchmark's extra_info, marked complete at the end.
        self._contexts: dict[str, list[dict[str, Any]]] = {}

    def detected(self) -> Topology:
        if self.topology is None:
            self.topology = detect_topology()
        return self.topology

    def session(self, device: str) -> Session:
        if device not in self.sessions:
            from bloomperf.harness.lock import hold_device_lock, hold_output_lock

            topology = self.detected()
            # From the first measured cell on, SIGTERM (a CI cancel) stops the run as Ctrl-C
            # does: pytest reports it interrupted, sessionfinish stops the worker groups.
            sigterm = sigterm_as_interrupt()
            sigterm.__enter__()
            self._locks.append(sigterm)
            lock = hold_device_lock(
                lock_key(topology, self.options), enabled=not self.options.no_lock
            )
            lock.__enter__()
            self._locks.append(lock)
            options = replace(self.options, device=device)
            set_sink(live_writer(self.config))
            # Always keep a complete results file: pytest-benchmark's JSON leaves out cells
            # that timed nothing (OOM, error, timeout).
            output = results_path(options.output, self.cli.get("output"), f"pytest-{device}")
            options = replace(options, output=output)
            inputs = input_files(self.cli, self.ini)
            refuse_overwriting_inputs([output], inputs, "--bloomperf-output")
            claim = hold_output_lock(output)  # --no-lock too: one writer per file
            claim.__enter__()
            self._locks.append(claim)
            sinks = [*open_sinks(options), ConftestSink(self.config.hook)]
            self.sessions[device] = Session.prepare(options, topology, sinks=sinks)
        return self.sessions[device]

    def check(self, cell: Cell, benchmark: Any, device: str) -> CellResult:
        """Measure the cell, attach it to pytest-benchmark, and assert its verdict."""
        if device == "cuda" and self.detected().device != "cuda":
            pytest.skip(f"no GPU: {self.detected().nvml_reason or 'NVML found none'}")
        try:
            session = self.session(device)
        except BloomperfError as exc:
            pytest.fail(str(exc), pytrace=False)
        self._started += 1
        emit(f"cell {self._started}/{self._total}: {cell.id}")
        result = session.measure_cell(cell, pedantic_measure(benchmark))
        benchmark.extra_info["bloomperf"] = cell_to_dict(result)
        # pytest-benchmark drops benchmarks that timed nothing (OOM, error, timeout): keep those
        # cells in the run context of every benchmark so `bloomperf diff` still sees them.
        context = run_context(session.run)
        benchmark.extra_info["bloomperf_run"] = context
        self._contexts.setdefault(device, []).append(context)
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(result.message)
        verdict = judge_cell(session.run, session.baseline, result, strict=self.options.strict)
        failure = verdict.fails()
        if failure:
            pytest.fail(plain(failure), pytrace=False)
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Keep each (backend, dtype) group's cells together, batch sizes ascending, so one
        worker group serves them all; matrix items run after the ordinary tests."""

        # A stable sort: parametrisation order is already group-major, batch sizes ascending.
        items.sort(key=lambda item: cell_of(item) is not None)
        self._total = sum(cell_of(item) is not None for item in items)
        self._devices = {
            device_of(item.get_closest_marker) for item in items if cell_of(item) is not None
        }

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Stop a group's workers after its last cell, before the next model is loaded."""
        cell = cell_of(item)
        if cell is None:
            return
        following = cell_of(nextitem) if nextitem is not None else None
        if following is None or following.group != cell.group:
            device = device_of(item.get_closest_marker)
            if device in self.sessions:
                self.sessions[device].stop()

    def verdict(self, device: str) -> Comparison:
        """The same whole-run verdict as `bloomperf run` and `bloomperf diff` give."""
        if device in self.finished:
            return self.finished[device].verdicts
        session = self.sessions[device]  # interrupted: judged as it stands
        return judge_run(session.run, session.baseline, session.options)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(
        self, session: pytest.Session, exitstatus: int
    ) -> Generator[None, None, None]:
        """Finish the runs before pytest-benchmark writes its JSON, so the run context stored
        with each benchmark says whether the session ran to its end."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        for device, measuring in self.sessions.items():
            if interrupted:
                measuring.abort()  # the results file keeps "complete": false
                continue
            self.finished[device] = finish_run(measuring, "pytest")
            finished = run_context(self.finished[device].run)
            for context in self._contexts.get(device, []):
                context.update(finished)  # before pytest-benchmark writes it out
        for lock in reversed(self._locks):
            lock.__exit__(None, None, None)
        self._locks.clear()
        if self.sessions:
            set_sink(None)
        elif not interrupted:
            self.write_empty_run()
        # Cells fail their own tests; a run that measured or judged nothing fails the session.
        verdicts = [self.verdict(device) for device in self.sessions]
        nothing = any(v.incomplete or v.unjudged for v in verdicts)
        if nothing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        # A sink that failed (a dashboard down) fails a passing session as an internal error;
        # a failed one stays failed: the verdict is never masked.
        failed_sinks = any(f.sink_failures for f in self.finished.values())
        if failed_sinks and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        return (yield)

    def write_empty_run(self) -> None:
        """``--bloomperf-output FILE`` names a file the next command reads: when every matrix
        item skipped (no GPU), write the explicit empty run, which ``diff`` judges "nothing
        measured", rather than no file at all."""
        output = self.options.output
        if output is None or not self._devices:
            return
        device = "cuda" if "cuda" in self._devices else "cpu"
        now = utc_now()
        workload = WorkloadInfo(
            self.options.new_tokens, self.options.cycles, self.options.warmup, PROMPTS
        )
        run = RunResult(
            model=ModelInfo(self.options.model or DEFAULT_MODEL[device], "", 0, 0),
            workload=workload,
            topology=self.detected().id,
            environment=environment_fingerprint(self.detected()),
            started_at=now,
            finished_at=now,
            complete=True,
        )
        refuse_output_among_baselines(output, self.options.baselines)
        save_run(run, output)
        self.empty_output = output

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.empty_output is not None:
            terminalreporter.write_line(
                f"bloomperf: nothing measured (every matrix item skipped); "
                f"empty run written to {self.empty_output}"
            )
        for device, session in self.sessions.items():
            if not session.run.cells:
                continue
            terminalreporter.section(f"bloomperf ({device})")
            terminalreporter.write_line(render_run_table(session.run))
            comparison = self.verdict(device)
            if session.baseline is not None:
                terminalreporter.write_line("")
                terminalreporter.write_line("verdicts:")  # the baseline is named below
                terminalreporter.write_line(render_comparison(comparison, "text"))
            else:
                for line in (comparison.incomplete, comparison.unjudged):
                    if line:
                        terminalreporter.write_line(f"bloomperf: FAILED: {line}")
            if session.output is not None:
                terminalreporter.write_line(f"results: {session.output}")
            for line in self.finished[device].sink_failures if device in self.finished else ():
                terminalreporter.write_line(
                    f"bloomperf: {plain(line)}; results safe in {session.output}"
                )


@pytest.fixture
def bloomperf(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Measure a matrix cell: ``bloomperf.check(bloomperf_cell, benchmark)``."""
    controller = controller_of(request.config)
    device = device_of(request.node.get_closest_marker)

    class Checker:
        def check(self, cell: Cell, benchmark: Any) -> CellResult:
            return controller.check(cell, benchmark, device)

    yield Checker()
