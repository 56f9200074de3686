"""`bloomperf run`: measure the matrix, print the table and the gate's verdict.

The command line only: the run itself is ``bloomperf.harness.session.Session``, its dry-run plan
``bloomperf.cli.plan``, and the verdict ``bloomperf.analysis.compare.judge`` (the plugin's and
`diff`'s rule).
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from bloomperf.analysis.compare import judge
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.plan import add_plan_arguments, run_dry
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import EXIT_REGRESSION
from bloomperf.core.formatting import clean, plain
from bloomperf.core.interrupt import interruption
from bloomperf.core.progress import emit, time_left
from bloomperf.harness.lock import hold_device_lock
from bloomperf.harness.options import add_cli_options, resolve_options
from bloomperf.harness.session import Session, all_cells, lock_key
from bloomperf.render.comparison import render_comparison
from bloomperf.render.table import render_run_table
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.folders import describe_search
from bloomperf.store.results import CellResult, Outcome, RunResult


def describe(cell: CellResult) -> str:
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return f"{cell.ms_per_token:.3f} ms/token"
    first_line = plain(clean(cell.message).splitlines()[0]) if cell.message.strip() else ""
    return f"{cell.outcome.value.upper()} {first_line}".strip()


def run_command(args: Any, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    if getattr(args, "dry_run", False):
        return run_dry(args, out, err)
    options = resolve_options(vars(args))
    if options.output is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        options = replace(options, output=Path("results") / f"bloomperf-{stamp}.json")
    topology = detect_topology()
    with hold_device_lock(lock_key(topology, options), enabled=not options.no_lock):
        session = Session.prepare(options, topology)
        total = sum(len(g.batch_sizes) for g in session.groups)
        print(
            f"bloomperf: {session.model.name} ({session.model.parameters:,} parameters, "
            f"{session.model.layers} layers) on {topology.id}, {total} cells",
            file=err,
        )
        done = 0
        started = time.monotonic()
        try:
            for cell in all_cells(session):
                emit(f"cell {done + 1}/{total}: {cell.id}")
                result = session.measure_cell(cell)
                done += 1
                left = time_left(done, total, time.monotonic() - started)
                eta = f"  (about {left} left)" if left else ""
                line = f"  [{done}/{total}] {cell.id:<28} {describe(result)}{eta}"
                print(line, file=err, flush=True)
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (bloomperf.core.interrupt)
            session.stop()
            how, code = interruption(stop)
            print(f"bloomperf: {how}; {done} cells saved in {session.output}", file=err)
            return code
        run = session.finish()
    print(render_run_table(run), file=out)
    print(f"results: {session.output}", file=out)
    return print_verdicts(run, session.baseline, options, out)


def print_verdicts(
    run: RunResult, baseline: Baseline | None, options: RunConfig, out: TextIO
) -> int:
    """The gate's verdict on the finished run (the plugin's and `diff`'s rule) → exit status."""
    comparison = judge(
        run,
        baseline,
        strict=options.strict,
        allow_incomplete=options.allow_incomplete,
        allow_no_baseline=options.allow_no_baseline,
        no_baseline=f"no baseline for {run.topology} / {run.model.name}; "
        + describe_search(options.baselines),
    )
    if baseline is not None:
        print(f"\nverdicts against {baseline.path}:", file=out)
        print(render_comparison(comparison, "text"), end="", file=out)
    else:
        for line in comparison.failures():
            print(f"FAILED {plain(line)}", file=out)
    return EXIT_REGRESSION if comparison.failed else 0


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="measure the matrix (tiny model on CPU without a GPU) and print the table",
        description="Measure load time, ms/token and peak memory for backend × dtype × batch.",
    )
    add_cli_options(parser)
    add_plan_arguments(parser)
    parser.set_defaults(func=run_command)
