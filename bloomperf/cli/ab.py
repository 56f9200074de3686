"""`bloomperf ab`: compare two environments on this machine, interleaved, and judge each cell.

An arm is an interpreter or venv, ``KEY=VALUE`` settings and pinned packages (see
``bloomperf.harness.overlay``); the measuring is ``bloomperf.harness.interleave``'s, the statistics
``bloomperf.analysis.paired``'s. The results file (kind ``bloomperf-ab``) holds both arms'
fingerprints, what differs between them, and every sample with its arm and position; it is
rewritten after each cell and at each look at an interval, so an interrupted comparison keeps what
it measured.

Exit status: 1 when B is slower than A beyond the tolerance in any cell, or a cell failed to
run; 0 when every cell is same or faster. An inconclusive cell (the budget ran out before the
interval decided) is printed as such and exits 0, unless ``--fail-inconclusive``: a gate that
fails whenever the machine is too noisy to tell would fail for reasons unrelated to the change.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from bloomperf.analysis.paired import SLOWER
from bloomperf.catalog.checkpoints import default_cache_dir
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.ab_report import KIND, SCHEMA_VERSION, comparison_json, log_json, render_table
from bloomperf.cli.arguments import TOLERANCE_HELP
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import write_json_atomic
from bloomperf.harness.interleave import (
    CYCLES,
    GROUPS,
    Comparison,
    PairLog,
    Settings,
    arm_spec,
    compare_group,
    print_progress,
)
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import (
    add_cli_options,
    parse_positive_float,
    parse_positive_int,
    resolve_options,
)
from bloomperf.harness.overlay import (
    Arm,
    PackageSource,
    describe_differences,
    differences,
    parse_settings,
    prepare_arm,
    resolve_python,
)
from bloomperf.harness.session import Session, lock_key, resolve_device, utc_now
from bloomperf.store.results import Outcome

DEFAULT_TOLERANCE = 0.05
FAILED_OUTCOMES = (Outcome.ERROR, Outcome.TIMEOUT, Outcome.OOM)


def add_comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``ab`` and ``bisect``: the verdict, the budget, the package index."""
    group = parser.add_argument_group("comparison")
    group.add_argument(
        "--tolerance",
        type=float,
        help=f"{TOLERANCE_HELP} [0.05; --serve: each metric's own, as baseline accept gives it]",
    )
    group.add_argument(
        "--confidence", type=float, default=0.99, help="confidence of the intervals [0.99]"
    )
    group.add_argument("--min-pairs", type=int, default=10, help="pairs before any verdict [10]")
    group.add_argument("--max-pairs", type=int, default=2000, help="pairs at most per cell [2000]")
    group.add_argument(
        "--max-time",
        type=float,
        default=600.0,
        help="seconds at most per cell, a group's first cell including the loads [600]",
    )
    group.add_argument(
        "--mode",
        choices=("auto", CYCLES, GROUPS),
        default="auto",
        help="cycles: both arms loaded, single cycles alternate; groups: the arms "
        "take turns loading the model, one round each [auto: cycles on CPU, groups on GPU]",
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the pair orders [0]")
    group.add_argument(
        "--fail-inconclusive", action="store_true", help="exit 1 on an inconclusive cell too"
    )
    group.add_argument("--index-url", help="package index for pins (pip's --index-url) [pip's own]")
    group.add_argument(
        "--find-links",
        action="append",
        help="folder or page of wheels for pins (pip's --find-links; alone: offline) [none]",
    )
    group.add_argument(
        "--with-deps", action="store_true", help="install the pins' dependencies too"
    )
    add_cli_options(parser)


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ab",
        help="compare two environments interleaved on this machine (exit 1: B slower)",
        description="Compare arm B with arm A: an interpreter or venv, KEY=VALUE settings and "
        "pinned packages each. Cycles alternate between the arms; each cell gets a paired "
        "confidence interval of B/A and a verdict: same, slower, faster or inconclusive.",
    )
    for arm in ("a", "b"):
        parser.add_argument(
            f"--{arm}", metavar="PYTHON", help="interpreter or venv [this interpreter]"
        )
        parser.add_argument(
            f"--{arm}-env",
            action="append",
            metavar="KEY=VALUE",
            help="environment setting, repeatable [none]",
        )
        parser.add_argument(
            f"--{arm}-pin",
            action="append",
            metavar="REQ",
            help="pinned package, e.g. x==1.2, repeatable [none]",
        )
    add_comparison_arguments(parser)
    from bloomperf.cli.ab_serve import add_serving_arguments  # it builds on this module

    add_serving_arguments(parser)
    parser.set_defaults(func=ab_command)


# The sequential test resamples every pair it has: its work grows with the pairs.
MAX_PAIRS = 100_000


def comparison_settings(args: Any, options: RunConfig, device: str) -> Settings:
    """The Settings from the command line, each value checked with the option named."""
    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    for name, value in (("--tolerance", tolerance), ("--confidence", args.confidence)):
        if not 0.0 < value < 1.0:
            raise BloomperfError(f"{name}: must be between 0 and 1, found {value}")
    checked = {
        "--min-pairs": parse_positive_int,
        "--max-pairs": parse_positive_int,
        "--max-time": parse_positive_float,
    }
    for name, parse in checked.items():
        try:
            parse(str(getattr(args, name[2:].replace("-", "_"))))
        except ValueError as exc:
            raise BloomperfError(f"{name}: {exc}") from None
    if args.min_pairs > args.max_pairs:
        raise BloomperfError(
            f"--min-pairs {args.min_pairs}: above --max-pairs {args.max_pairs}; no verdict could "
            "ever be reached"
        )
    if args.max_pairs > MAX_PAIRS:
        raise BloomperfError(f"--max-pairs: at most {MAX_PAIRS}, found {args.max_pairs}")
    mode = args.mode if args.mode != "auto" else (CYCLES if device == "cpu" else GROUPS)
    return Settings(
        tolerance=tolerance,
        confidence=args.confidence,
        min_pairs=args.min_pairs,
        max_pairs=args.max_pairs,
        max_time_s=args.max_time,
        warmup=options.warmup,
        cycles_per_round=options.cycles,
        mode=mode,
        seed=args.seed,
    )


def package_source(args: Any) -> PackageSource:
    return PackageSource(
        index_url=args.index_url,
        find_links=tuple(args.find_links or ()),
        with_deps=bool(args.with_deps),
    )


def ab_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr  # read at call time, not at import
    options = resolve_options(vars(args))
    topology = detect_topology()
    settings = comparison_settings(args, options, resolve_device(options.device, topology))
    source = package_source(args)
    if args.serve:  # the parser always sets it
        from bloomperf.cli.ab_serve import serving_ab_command

        found = serving_ab_command(args, options, topology, settings, source, (out, err))
        return exit_code(found, args.fail_inconclusive)
    cache_dir = options.cache_dir or default_cache_dir()
    arms = []
    for name in ("a", "b"):
        python = getattr(args, name)
        pins = tuple(getattr(args, f"{name}_pin") or ())
        print(
            f"bloomperf ab: preparing arm {name.upper()}"
            + (f" ({' '.join(pins)})" if pins else ""),
            file=err,
        )
        arms.append(
            prepare_arm(
                name,
                resolve_python(python, f"--{name}") if python else sys.executable,
                parse_settings(getattr(args, f"{name}_env"), f"--{name}-env"),
                pins,
                source,
                cache_dir,
            )
        )
    output = options.output or Path("results") / (
        f"bloomperf-ab-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    )
    from bloomperf.harness.lock import hold_device_lock

    with hold_device_lock(lock_key(topology, options), enabled=not options.no_lock):
        session = Session.prepare(replace(options, output=None), topology)
        for line in describe_differences(differences(arms[0], arms[1])) or ["(no difference)"]:
            print(f"  differs: {line}", file=err)
        comparisons = compare_arms(session, arms[0], arms[1], settings, output, err)
    print(render_table(comparisons, settings), file=out)
    print(f"results: {output}", file=out)
    hint = missing_module_hint(comparisons, arms, source.with_deps)
    if hint:
        print(hint, file=err)
    return exit_code(comparisons, args.fail_inconclusive)


MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def missing_module_hint(comparisons: list[Comparison], arms: list[Arm], with_deps: bool) -> str:
    """Pins go in without their dependencies unless --with-deps: an arm whose cell failed on a
    missing module is told so (transformers 4.46 wants ``requests``, which 5.x dropped)."""
    if with_deps:
        return ""
    for comparison in comparisons:
        missing = MISSING_MODULE.search(comparison.message)
        for arm in arms:
            if missing and arm.pins and comparison.message.startswith(f"arm {arm.name.upper()}:"):
                return (
                    f"bloomperf ab: arm {arm.name.upper()} lacks the module {missing[1]!r}: "
                    f"its pins ({' '.join(arm.pins)}) were installed without their "
                    "dependencies; run again with --with-deps"
                )
    return ""


def compare_arms(
    session: Session,
    a: Arm,
    b: Arm,
    settings: Settings,
    output: Path | None,
    err: TextIO | None = None,
) -> list[Comparison]:
    """Compare every planned cell; the results file is rewritten as the comparison goes."""
    err = err or sys.stderr
    document = new_document(session, a, b, settings)
    comparisons: list[Comparison] = []
    show = print_progress(err)

    def save() -> None:
        if output is not None:
            write_json_atomic(output, document)

    def progress(log: PairLog, elapsed: float) -> None:
        show(log, elapsed)
        document["in_progress"] = log_json(log)
        save()

    save()  # an unwritable output fails now, not after a cell
    print(
        f"bloomperf ab: {session.model.name} on {session.topology.id}, {settings.mode} mode, "
        f"tolerance {settings.tolerance * 100:g} %, up to {settings.max_time_s:g} s per cell",
        file=err,
    )

    def record(earlier: list[Comparison], cells: list[Cell], found: dict[Cell, Comparison]) -> None:
        # In the group's cell order, each skipped cell at once: an interrupted comparison keeps
        # why a cell was not run as well as what the others measured.
        comparisons[:] = earlier + [found[c] for c in cells if c in found]
        document["cells"] = [comparison_json(c) for c in comparisons]
        document.pop("in_progress", None)
        save()

    for group in session.groups:
        cells, earlier = group.cells(), list(comparisons)
        found = {
            cell: Comparison(cell, Outcome.SKIPPED, None, None, (), 0.0, "skipped", message=reason)
            for cell in cells
            if (reason := session.skip_reason(cell))
        }
        record(earlier, cells, found)
        runnable = [c for c in cells if c not in found]
        if not runnable:
            continue
        spec = session.group_spec(runnable[0])
        specs = {arm.name: arm_spec(spec, arm) for arm in (a, b)}
        planned = replace(group, batch_sizes=tuple(c.batch_size for c in runnable))
        for comparison in compare_group(specs, planned, settings, progress):
            found[comparison.cell] = comparison
            record(earlier, cells, found)
    document.update(finished_at=utc_now(), complete=True)
    save()
    return comparisons


def new_document(session: Session, a: Arm, b: Arm, settings: Settings) -> dict[str, Any]:
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "started_at": utc_now(),
        "finished_at": None,
        "complete": False,
        "model": {"name": session.model.name, "layers": session.model.layers},
        "workload": {"new_tokens": session.run.workload.new_tokens},
        "topology": session.topology.id,
        "machine": {
            k: session.run.environment.get(k) for k in ("hostname", "cpu_model", "gpus", "driver")
        },
        "settings": {
            "tolerance": settings.tolerance,
            "confidence": settings.confidence,
            "look_confidence": settings.look_confidence,
            "min_pairs": settings.min_pairs,
            "max_pairs": settings.max_pairs,
            "max_time_s": settings.max_time_s,
            "warmup": settings.warmup,
            "mode": settings.mode,
            "cycles_per_round": settings.cycles_per_round,
            "seed": settings.seed,
        },
        "arms": {"a": a.describe(), "b": b.describe()},
        "differences": differences(a, b),
        "cells": [],
    }


def exit_code(comparisons: list[Comparison], fail_inconclusive: bool) -> int:
    for c in comparisons:
        if c.outcome in FAILED_OUTCOMES or c.verdict == SLOWER:
            return 1
        if fail_inconclusive and c.verdict == "inconclusive":
            return 1
    return 0
