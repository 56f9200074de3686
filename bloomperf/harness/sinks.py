"""Where a run's results go: sinks told "a cell was recorded" and "the run finished".

The results file is the first sink and the source of truth: only its failure stops a run. Every
other sink (the options' built-ins, entry points of ``bloomperf.sinks``, a conftest's hooks) is
guarded: its failure becomes one line, reported after the verdict (docs/extending.md, A sink).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from bloomperf.analysis.verdicts import Comparison
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.render.github import job_outputs, write_job_outputs
from bloomperf.store.history.nights import add_to_history
from bloomperf.store.results import CellResult, RunResult
from bloomperf.store.results.codec import save_run

ENTRY_POINT_GROUP = "bloomperf.sinks"


@dataclass(frozen=True)
class RunContext:
    """What a finished run's sinks may need beside the run and its verdicts."""

    output: Path | None  # the results file (None only for a run that keeps none)
    options: RunConfig
    source: str  # "run" (the command) or "pytest" (the plugin)


class Sink(Protocol):
    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        """``cell`` was measured (or skipped); ``run`` holds it and every cell before it."""

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        """The run ended (not interrupted): complete, judged against its baseline."""


@dataclass(frozen=True)
class ResultsFile:
    """The results JSON, rewritten atomically after every cell: a crash loses nothing."""

    path: Path

    def save(self, run: RunResult) -> None:
        save_run(run, self.path)

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        self.save(run)

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        self.save(run)


class AtFinish:
    """A sink with nothing to do per cell."""

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        pass


class GitHubOutput(AtFinish):
    """The verdict and the counts as the step's outputs (``$GITHUB_OUTPUT``), as ``diff
    --format github`` writes them; nothing outside Actions."""

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        write_job_outputs(job_outputs(verdicts, verdicts.failed))


@dataclass(frozen=True)
class History(AtFinish):
    """The finished run's results file, added to a history folder as ``history add`` does."""

    folder: Path

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        if context.output is None:
            raise BloomperfError(f"--history {self.folder}: the run kept no results file")
        add_to_history(context.output, self.folder)


def sink_name(sink: object) -> str:
    return getattr(sink, "name", None) or type(sink).__name__


def installed_sinks() -> list[Sink]:
    """One sink from each entry point of ``bloomperf.sinks``; a broken one is a usage error
    naming it, before anything is measured."""
    found: list[Sink] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.append(point.load()())
        except Exception as exc:  # the package's own bug: named, not a traceback
            raise BloomperfError(
                f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
    return found


def open_sinks(options: RunConfig) -> list[Sink]:
    """The run's sinks beside its results file: the options' built-ins, then installed ones."""
    chosen: list[Sink] = []
    if options.github_output:
        chosen.append(GitHubOutput())
    if options.history is not None:
        chosen.append(History(options.history))
    return chosen + installed_sinks()


def tell(sinks: Sequence[Sink], event: str, *args: object) -> list[str]:
    """Call ``event`` on every sink; each failure becomes one line (the others still run)."""
    failures = []
    for sink in sinks:
        try:
            getattr(sink, event)(*args)
        except Exception as exc:  # a sink's bug or outage must not lose the measurement
            failures.append(f"sink {sink_name(sink)} ({event}): {type(exc).__name__}: {exc}")
    return failures
