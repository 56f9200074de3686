"""`bloomperf diff`: results against a baseline, or one result against another.

Reads every format a run leaves behind: a ``bloomperf run`` results file, a pytest-benchmark
``--benchmark-json`` file, a file of pytest-benchmark's ``--benchmark-save`` storage, or that
storage folder (its newest file).

Exit status: 1 when a cell regressed, ran out of memory unexpectedly, errored, timed out or lacks
a figure its baseline judges (or, with ``--strict``, moved its OOM boundary up), when the results
measured nothing or come from a run that did not finish (unless ``--allow-incomplete``), or when
no cell was judged for want of a baseline (unless ``--allow-no-baseline``); 0 otherwise; 2 on
bad input, including a ``--baseline`` or "before" file that cannot judge these results (another
topology, model or workload; no measured cell); 3 on an internal error. See docs/gate.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bloomperf.analysis.compare import judge
from bloomperf.analysis.verdicts import Comparison
from bloomperf.catalog.provenance import NOTHING_CHANGED, what_changed
from bloomperf.cli.arguments import (
    TOLERANCE_HELP,
    add_allow_arguments,
    add_detection_options,
    add_format_argument,
    add_history_argument,
    add_run_option,
    detection_settings,
)
from bloomperf.cli.inputs import add_input_arguments, baseline_for
from bloomperf.core.errors import EXIT_REGRESSION, BloomperfError
from bloomperf.core.formatting import markdown_text, plain
from bloomperf.core.jsonfile import refuse_overwriting_inputs
from bloomperf.render.comparison import render_comparison
from bloomperf.render.github import job_outputs, render_github, write_job_outputs
from bloomperf.render.history.changes import history_section
from bloomperf.render.terminal import terminal_width, wants_colour
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.history.nights import topology_history
from bloomperf.store.results import Outcome, RunResult
from bloomperf.store.results.files import read_many, read_results, refuse_synthetic

# ---- comparing ---------------------------------------------------------------------------------


def baseline_of_run(run: RunResult, source: str, ms_tolerance: float | None) -> Baseline:
    """A result file as a baseline, for before/after diffs; its cycles feed the statistics."""
    baseline = accept_run(run, None, source=source, force=True)
    if ms_tolerance is not None:
        cells = tuple(
            replace(c, ms_per_token_tolerance=ms_tolerance) if c.ms_per_token is not None else c
            for c in baseline.cells
        )
        baseline = replace(baseline, cells=cells)
    return replace(baseline, path=source)


def diff(
    results: list[str],
    baseline_arg: str | None,
    baselines_dir: Path | None,
    *,
    strict: bool = False,
    tolerance: float | None = None,
    allow_incomplete: bool = False,
    allow_synthetic: bool = False,
    allow_no_baseline: bool = False,
) -> Comparison:
    judged = functools.partial(
        judge, strict=strict, allow_incomplete=allow_incomplete, allow_no_baseline=allow_no_baseline
    )
    if baseline_arg is None and len(results) == 2:
        before = refuse_synthetic(read_results(Path(results[0])), results[0], allow_synthetic)
        after = refuse_synthetic(read_results(Path(results[1])), results[1], allow_synthetic)
        refuse_empty_before(before, results[0])
        expected = baseline_of_run(before, results[0], tolerance)
        return refuse_incomparable(judged(after, expected), results[0])
    if baseline_arg is None and len(results) > 2:
        raise BloomperfError(
            "diff: give --baseline to compare several result files, or exactly two to diff them"
        )
    run = refuse_synthetic(read_many(results), ", ".join(results), allow_synthetic)
    baseline, why = baseline_for(run, baseline_arg, baselines_dir)
    comparison = judged(run, baseline, no_baseline=why)
    if baseline_arg:
        return refuse_incomparable(comparison, f"--baseline {baseline_arg}")
    return comparison


def refuse_empty_before(before: RunResult, where: str) -> None:
    """A "before" file that measured no cell is no baseline: the diff would judge nothing."""
    if not any(c.outcome in (Outcome.OK, Outcome.OOM) for c in before.cells):
        raise BloomperfError(
            f'{where}: the "before" results measured no cell ({len(before.cells)} cells, none '
            "ran or ran out of memory); nothing to compare against"
        )


def refuse_incomparable(comparison: Comparison, named: str) -> Comparison:
    """A baseline the user named (``--baseline``, a "before" file) that is another topology's,
    model's or workload's judges nothing: a usage error (exit 2), unless allowed to pass."""
    if comparison.unjudged and comparison.why_incomparable:
        raise BloomperfError(
            f"{named}: cannot judge these results: {comparison.why_incomparable} "
            "(--allow-no-baseline reports them unjudged)"
        )
    return comparison


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare results with a baseline, or two result files",
        description=__doc__,
    )
    add_input_arguments(
        parser,
        "bloomperf results, pytest-benchmark JSON, or a pytest-benchmark storage folder; "
        "two of them without --baseline: before and after",
    )
    add_format_argument(
        parser,
        "markdown",
        "json",
        "github",
        help="github: the text, then an ::error per failing cell and a ::warning per doubtful "
        "one, and the verdict and counts in $GITHUB_OUTPUT [text]",
    )
    add_run_option(parser, "strict")
    add_allow_arguments(
        parser,
        incomplete="pass results that measured nothing or come from a run that did not finish",
        synthetic="compare results of an injected slowdown (--slowdown-percent) too",
    )
    add_run_option(parser, "allow_no_baseline")
    parser.add_argument(
        "--tolerance",
        type=_fraction,
        help=f"{TOLERANCE_HELP} [the baseline's own; between two results: 0.05 on GPUs, none "
        "on CPU]",
    )
    # ---- history (bloomperf.analysis.changes owns the test; this only wires it in) ----
    add_history_argument(
        parser,
        "history folder: also list persistent changes over the nights, and fail when the "
        "newest night confirmed one for the worse [none]",
    )
    add_detection_options(parser)
    parser.set_defaults(func=run_diff)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1), found {text}")
    return value


def run_diff(args: argparse.Namespace) -> int:
    github_output = os.environ.get("GITHUB_OUTPUT")
    if args.format == "github" and github_output:
        # The job outputs are appended to $GITHUB_OUTPUT: never to a file this diff reads.
        inputs = [Path(r) for r in args.results] + ([Path(args.baseline)] if args.baseline else [])
        refuse_overwriting_inputs([Path(github_output)], inputs, "GITHUB_OUTPUT")
    comparison = diff(
        args.results,
        args.baseline,
        args.baselines,
        strict=args.strict,
        tolerance=args.tolerance,
        allow_incomplete=args.allow_incomplete,
        allow_synthetic=args.allow_synthetic,
        allow_no_baseline=args.allow_no_baseline,
    )
    failed = comparison.failed
    history = ""
    if args.history is not None:
        fmt = "markdown" if args.format == "markdown" else "text"
        folder = topology_history(args.history, comparison.topology)
        history, worse = history_section(folder, fmt, **detection_settings(args))
        failed = failed or worse
    shown = render_comparison(
        comparison, args.format, colour=wants_colour(sys.stdout), width=terminal_width()
    )
    if args.format == "json" or not history:
        print(shown, end="")
    else:
        print(shown + "\n" + history, end="")
    if args.format != "json" and args.baseline is None and len(args.results) == 2:
        print(render_what_changed(args.results, args.format), end="")
    if args.format == "github":
        print(render_github(comparison, args.results[-1]), end="")
        write_job_outputs(job_outputs(comparison, failed))
    return EXIT_REGRESSION if failed else 0


def render_what_changed(results: list[str], fmt: str) -> str:
    """Between two runs: the checkout, system and package versions that differ."""
    before, after = (read_results(Path(r)).environment for r in results)
    lines = what_changed(before, after) or [NOTHING_CHANGED]
    if fmt == "markdown":
        shown = "".join(f"- {markdown_text(x)}\n" for x in lines)
        return "\n### What changed between the runs\n\n" + shown
    return "\nWhat changed between the runs:\n" + "".join(f"  {plain(x)}\n" for x in lines)
