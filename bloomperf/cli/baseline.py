"""`bloomperf baseline show|accept`: print a baseline as the blog's tables, or write results in."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from bloomperf.analysis.compare import incompleteness
from bloomperf.cli.arguments import add_allow_arguments, add_format_argument, add_run_option
from bloomperf.core.errors import BloomperfError
from bloomperf.core.paths import shell_word
from bloomperf.core.storelock import store_lock
from bloomperf.render.baseline import render_baseline_json, render_baseline_text
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.baseline.folders import describe_search, is_package_folder
from bloomperf.store.baseline.search import (
    baseline_path_in,
    default_baselines_dir,
    find_baseline,
    resolve_baseline,
)
from bloomperf.store.results import Outcome
from bloomperf.store.results.files import read_results, refuse_synthetic


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser("baseline", help="show or accept baselines")
    actions = parser.add_subparsers(
        dest="baseline_command", metavar="ACTION", required=True, parser_class=type(parser)
    )
    show = actions.add_parser("show", help="print a baseline as the blog's tables")
    show.add_argument(
        "topology", help="topology id or alias (e.g. 8xA100-80GB), or a baseline file"
    )
    show.add_argument("--model", help="model name when the topology has several [its only one]")
    add_format_argument(show, "json")
    add_run_option(show, "baselines")
    show.set_defaults(func=run_show)
    accept = actions.add_parser("accept", help="write results into the baseline of their topology")
    accept.add_argument("results", nargs="+", help="bloomperf results or pytest-benchmark files")
    add_run_option(
        accept,
        "baselines",
        help="folder to write into [$XDG_DATA_HOME/bloomperf/baselines]",
    )
    accept.add_argument(
        "--force",
        action="store_true",
        help="accept despite errored or timed-out cells (they are left out)",
    )
    add_allow_arguments(
        accept,
        incomplete="accept results that measured nothing or come from a run that did not finish",
        synthetic="accept results of an injected slowdown (--slowdown-percent) into the baseline",
    )
    accept.set_defaults(func=run_accept)


def run_show(args: argparse.Namespace) -> int:
    baseline = resolve_baseline(args.topology, args.model, args.baselines)
    if args.model is not None and not baseline.matches_model(args.model):
        raise BloomperfError(
            f"--model {args.model}: no baseline for topology {args.topology} and this model "
            f"(it has one for {baseline.model}); {describe_search(args.baselines)}"
        )
    text = (
        render_baseline_json(baseline) if args.format == "json" else render_baseline_text(baseline)
    )
    print(text, end="")
    if args.format == "text":
        print(f"\n{describe_search(args.baselines)}\nshown: {baseline.path}")
    return 0


def named_folder(folder: Path, given: Path | None) -> str:
    """``folder`` as the option that named it, or as where the default came from: a user who
    gave no --baselines must not be told that it is wrong."""
    if given is not None:
        return f"--baselines {folder}"
    data = os.environ.get("XDG_DATA_HOME", "")
    if os.path.isabs(data) and Path(data) in folder.parents:
        return f"XDG_DATA_HOME={data}: the default baselines folder {folder}"
    return f"the default baselines folder {folder}"


def run_accept(args: argparse.Namespace) -> int:
    folder = args.baselines if args.baselines is not None else default_baselines_dir()
    if is_package_folder(folder):
        raise BloomperfError(
            f"--baselines {folder}: is the baselines shipped inside the bloomperf package; "
            "accept into another folder (the default is your user folder)"
        )
    try:
        # A new baselines folder, but not a whole new tree (the user folder's parents excepted).
        folder.mkdir(exist_ok=True, parents=args.baselines is None)
    except OSError as exc:
        raise BloomperfError(
            f"{named_folder(folder, args.baselines)}: cannot create: {exc.strerror or exc}"
        ) from None
    for text in args.results:
        run = refuse_synthetic(read_results(Path(text)), text, args.allow_synthetic)
        gap = incompleteness(run)
        if gap and not args.allow_incomplete:
            raise BloomperfError(f"{text}: {gap}")
        # Read, merge and write under the folder's lock: concurrent accepts (parallel CI jobs)
        # each add their cells instead of writing over each other's.
        with store_lock(folder):
            existing = find_baseline(run.topology, run.model.name, folder)
            updated = accept_run(run, existing, source=text, force=args.force)
            path = (
                Path(existing.path)
                if existing is not None
                else baseline_path_in(folder, run.topology, run.model.name)
            )
            save_baseline(updated, path)
        accepted = sum(c.outcome in (Outcome.OK, Outcome.OOM) for c in run.cells)
        print(f"bloomperf: {shell_word(path)}: accepted {accepted} cells from {shell_word(text)}")
    return 0
