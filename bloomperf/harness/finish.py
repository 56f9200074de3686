"""The end of a run, once for ``bloomperf run`` and the pytest plugin: mark it complete, judge
it against its baseline, save the results file, then tell the other sinks."""

from __future__ import annotations

from dataclasses import dataclass

from bloomperf.analysis.compare import judge
from bloomperf.analysis.verdicts import Comparison
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import EXIT_INTERNAL, EXIT_REGRESSION
from bloomperf.harness.session import Session
from bloomperf.harness.sinks import ResultsFile, RunContext, tell
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.folders import describe_search
from bloomperf.store.results import RunResult


@dataclass(frozen=True)
class Finished:
    run: RunResult
    verdicts: Comparison
    sink_failures: tuple[str, ...]  # one line per failed sink call, in order

    @property
    def exit_code(self) -> int:
        """1 for a failed gate whatever the sinks did; 3 for a passing run a sink failed."""
        if self.verdicts.failed:
            return EXIT_REGRESSION
        return EXIT_INTERNAL if self.sink_failures else 0


def judge_run(run: RunResult, baseline: Baseline | None, options: RunConfig) -> Comparison:
    """The gate's verdict on a run of these options: the same rule as `bloomperf diff`."""
    return judge(
        run,
        baseline,
        strict=options.strict,
        allow_incomplete=options.allow_incomplete,
        allow_no_baseline=options.allow_no_baseline,
        no_baseline=f"no baseline for {run.topology} / {run.model.name}; "
        + describe_search(options.baselines),
    )


def finish_run(session: Session, source: str) -> Finished:
    """Stop the workers, mark the run complete and judge it; the results file is saved first
    (its failure raises), then every other sink hears of it (theirs are kept)."""
    run = session.finish()
    verdicts = judge_run(run, session.baseline, session.options)
    context = RunContext(session.output, session.options, source)
    if session.output is not None:
        ResultsFile(session.output).run_finished(run, verdicts, context)
    late = tell(session.sinks, "run_finished", run, verdicts, context)
    return Finished(run, verdicts, tuple(session.sink_failures + late))
