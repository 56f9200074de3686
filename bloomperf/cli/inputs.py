"""What `bloomperf diff` and `bloomperf report` both read: result files, and the baseline to judge
them against (``--baseline FILE|TOPOLOGY``, else the run's own topology, looked up in
``--baselines`` or along the search order of ``baseline show``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bloomperf.cli.arguments import add_run_option
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.folders import describe_search
from bloomperf.store.baseline.search import find_baseline, resolve_baseline
from bloomperf.store.results import RunResult


def add_input_arguments(parser: argparse.ArgumentParser, results_help: str) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULT", help=results_help)
    parser.add_argument(
        "--baseline",
        metavar="FILE|TOPOLOGY",
        help="a baseline file, or a topology id or alias [the run's own topology]",
    )
    add_run_option(parser, "baselines")


def baseline_for(
    run: RunResult, baseline_arg: str | None, baselines_dir: Path | None
) -> tuple[Baseline | None, str]:
    """The baseline asked for, else the run's own topology's; and, when there is none, why."""
    if baseline_arg is not None:
        return resolve_baseline(baseline_arg, run.model.name, baselines_dir), ""
    baseline = find_baseline(run.topology, run.model.name, baselines_dir)
    where = baselines_dir if baselines_dir is not None else describe_search()
    return baseline, f"no baseline for {run.topology} / {run.model.name}; {where}"
