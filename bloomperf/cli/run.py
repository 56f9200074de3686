"""`bloomperf run`: measure the matrix, print the table and the gate's verdict.

The command line only: the run itself is ``bloomperf.harness.session.Session``, its dry-run plan
``bloomperf.cli.plan``, and the verdict ``bloomperf.analysis.compare.judge`` (the plugin's and
`diff`'s rule).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from bloomperf.analysis.compare import host_ram_headline
from bloomperf.analysis.verdicts import Comparison
from bloomperf.backends import backend_class
from bloomperf.backends.ds_inference import read_shard_marker
from bloomperf.catalog.topology import detect_topology, host_ram
from bloomperf.cli.plan import add_plan_arguments, run_dry
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import clean, plain
from bloomperf.core.interrupt import interruption
from bloomperf.core.jsonfile import refuse_overwriting_inputs
from bloomperf.core.paths import shell_word
from bloomperf.core.progress import emit, time_left
from bloomperf.harness.finish import Finished, finish_run
from bloomperf.harness.lock import hold_device_lock, hold_output_lock
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import add_cli_options, input_files, resolve_options
from bloomperf.harness.session import Session, all_cells, lock_key
from bloomperf.harness.sinks import open_sinks
from bloomperf.render.comparison import render_comparison
from bloomperf.render.table import render_run_table
from bloomperf.render.terminal import terminal_width, wants_colour
from bloomperf.store.baseline import Baseline
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.output import results_path

LATEST = "latest.json"  # beside the dated results file of a run without --output
NEXT_STEPS = (
    ("diff {results}", "the verdicts again"),
    ("report {results} --out-dir report", "report/index.html"),
    ("baseline accept {results}", "make this run the expectation"),
)


def describe(cell: CellResult) -> str:
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return f"{cell.ms_per_token:.3f} ms/token"
    first_line = plain(clean(cell.message).splitlines()[0]) if cell.message.strip() else ""
    return f"{cell.outcome.value.upper()} {first_line}".strip()


def run_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr  # read at call time, not at import
    if getattr(args, "dry_run", False):
        return run_dry(args, out, err)
    if getattr(args, "topology", None) is not None:
        raise BloomperfError(
            f"--topology {args.topology}: plans only, with --dry-run; a run measures the "
            "machine it runs on (bloomperf topology prints its id)"
        )
    options = resolve_options(vars(args))
    default_output = options.output is None
    output = results_path(options.output, vars(args).get("output"), "bloomperf")
    options = replace(options, output=output)
    refuse_overwriting_inputs([output], input_files(vars(args)), "--output")
    topology = detect_topology()
    with (
        hold_device_lock(lock_key(topology, options), enabled=not options.no_lock),
        hold_output_lock(output),  # --no-lock too: one writer per results file
    ):
        session = Session.prepare(options, topology, sinks=open_sinks(options))
        refuse_a_mismatched_shard(session)
        total = sum(len(g.batch_sizes) for g in session.groups)
        print(
            f"bloomperf: {session.model.name} ({session.model.parameters:,} parameters, "
            f"{session.model.layers} layers) on {topology.id}, {total} cells",
            file=err,
        )
        # The figure the host-RAM skips judged by, and where it came from (--host-ram or MemTotal)
        print(f"bloomperf: {host_ram(options.host_ram).describe()}", file=err)
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
            session.abort()
            how, code = interruption(stop)
            print(f"bloomperf: {how}; {done} cells saved in {shell_word(output)}", file=err)
            if default_output:
                link_latest(output, err)
            return code
        except BaseException:  # a full disk at a cell's save: no worker or folder outlives it
            session.abort()
            raise
        finished = finish_run(session, "run")
    run = finished.run
    headline = host_ram_headline(run)
    if headline:  # first, above the table: nothing else in the run matters as much
        print(f"bloomperf: {headline}", file=out)
    print(render_run_table(run), file=out)
    print_verdicts(finished.verdicts, session.baseline, out)
    shown = link_latest(output, out) if default_output else output
    print_next_steps(output, shown, out)
    report_sink_failures(finished, output, err)
    return finished.exit_code


def refuse_a_mismatched_shard(session: Session) -> None:
    """``--sharded DIR`` against each group that would load it, before minutes of loading: the
    folder's TP degree must be the group's rank count, its layout the backend's."""
    if session.options.sharded is None:
        return
    folder = Path(session.options.sharded)
    marker = read_shard_marker(folder)
    for group in session.groups:
        first = Cell(group.backend, group.dtype, group.batch_sizes[0])
        if session.skip_reason(first):
            continue
        ranks = session.group_spec(first).world_size
        reason = backend_class(group.backend).shard_mismatch(marker, ranks)
        if reason:
            raise BloomperfError(f"--sharded {folder}: {reason}")


def link_latest(output: Path, out: TextIO) -> Path:
    """Point ``latest.json`` beside ``output`` at it (a relative link, replaced atomically), so
    the README's next commands name one stable path; the path to show, or ``output`` when a
    file the user made is in the way (never replaced)."""
    latest = output.parent / LATEST
    if latest.exists() and not latest.is_symlink():
        print(f"bloomperf: {latest} is not a link bloomperf made; left as it is", file=out)
        return output
    temporary = output.parent / f".{LATEST}.{os.getpid()}.tmp"
    try:
        temporary.unlink(missing_ok=True)
        os.symlink(output.name, temporary)
        os.replace(temporary, latest)
    except OSError as exc:
        print(f"bloomperf: {latest}: not linked: {exc.strerror or exc}", file=out)
        return output
    return latest


def print_next_steps(output: Path, shown: Path, out: TextIO) -> None:
    """Where the results are, and the commands that read them next (each on its own line)."""
    also = f" ({shell_word(shown)})" if shown != output else ""
    print(f"\nresults: {shell_word(output)}{also}", file=out)
    print("next:", file=out)
    commands = [(command.format(results=shell_word(shown)), why) for command, why in NEXT_STEPS]
    width = max(len(command) for command, _ in commands)
    for command, why in commands:
        print(f"  bloomperf {command:<{width}}  # {why}", file=out)


def report_sink_failures(finished: Finished, output: Path, err: TextIO) -> None:
    for line in finished.sink_failures:
        print(f"bloomperf: {plain(line)}; the results are safe in {shell_word(output)}", file=err)


def print_verdicts(comparison: Comparison, baseline: Baseline | None, out: TextIO) -> None:
    """The gate's verdict on the finished run (the plugin's and `diff`'s rule)."""
    if baseline is not None:
        print("\nverdicts:", file=out)
        text = render_comparison(
            comparison, "text", colour=wants_colour(out), width=terminal_width()
        )
        print(text, end="", file=out)
    else:
        for line in comparison.failures():
            print(f"FAILED {plain(line)}", file=out)


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="measure the matrix (tiny model on CPU without a GPU) and print the table",
        description="Measure load time, ms/token and peak memory for backend × dtype × batch.",
    )
    add_cli_options(parser)
    add_plan_arguments(parser)
    parser.set_defaults(func=run_command)
