"""`bloomperf diff`: results against a baseline, or one result against another.

Reads every format a run leaves behind: a ``bloomperf run`` results file, a pytest-benchmark
``--benchmark-json`` file, a file of pytest-benchmark's ``--benchmark-save`` storage, or that
storage folder (its newest file). The pytest plugin stores each cell in a benchmark's
``extra_info["bloomperf"]`` and the run's context in ``extra_info["bloomperf_run"]``.

Exit status: 1 when a cell regressed, ran out of memory unexpectedly, errored or timed out (or,
with ``--strict``, moved its OOM boundary up); 0 otherwise; 2 on bad input.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from bloomperf.baseline import (
    BASELINE_KIND,
    Baseline,
    accept_run,
    default_baselines_dir,
    find_baseline,
    resolve_baseline,
)
from bloomperf.compare import Comparison, compare_run, compare_without_baseline, render_comparison
from bloomperf.errors import EXIT_REGRESSION, BloomperfError
from bloomperf.history import add_detection_options, detection_settings, history_section
from bloomperf.jsonfile import check_header, get_dict, get_list, read_document
from bloomperf.results import (
    RESULTS_KIND,
    RESULTS_SCHEMA_VERSION,
    RunResult,
    cell_from_dict,
    run_from_dict,
)

STORAGE_GLOB = "[0-9][0-9][0-9][0-9]_*.json"


# ---- reading results --------------------------------------------------------------------------


def read_results(path: Path) -> RunResult:
    """A RunResult from any result format; a folder means its newest pytest-benchmark file."""
    path = Path(path)
    if path.is_dir():
        path = newest_storage_file(path)
    data = read_document(path, "a results")  # no kind check yet: the format is sniffed below
    where = str(path)
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: expected a JSON object, found {type(data).__name__}")
    if "kind" in data:
        if data.get("kind") == BASELINE_KIND:
            raise BloomperfError(f"{where}: is a baseline, not results (pass it with --baseline)")
        check_header(data, where, RESULTS_KIND, RESULTS_SCHEMA_VERSION)
        return run_from_dict(data, where)
    if "benchmarks" in data:
        return run_from_benchmark_json(data, where)
    raise BloomperfError(f"{where}: neither a bloomperf results file nor a pytest-benchmark file")


def newest_storage_file(folder: Path) -> Path:
    """The newest ``NNNN_name.json`` in a pytest-benchmark storage folder or one machine's folder.

    Like pytest-benchmark itself, by run number (a checkout or a copy resets modification
    times, the numbers stay); modification time only breaks ties between machine folders.
    """
    files = [*folder.glob(STORAGE_GLOB), *folder.glob(f"*/{STORAGE_GLOB}")]
    if not files:
        raise BloomperfError(f"{folder}: no pytest-benchmark files (NNNN_name.json) in it")
    return max(files, key=lambda f: (f.name[:4], f.stat().st_mtime, f.name))


def run_from_benchmark_json(data: dict[str, Any], where: str) -> RunResult:
    """The bloomperf cells of a pytest-benchmark file as one RunResult."""
    run: RunResult | None = None
    own_ids: set[str] = set()
    for index, bench in enumerate(get_list(data, "benchmarks", where)):
        if not isinstance(bench, dict):
            raise BloomperfError(f"{where}: benchmark {index} is not an object")
        name = f"{where} {bench.get('fullname') or bench.get('name') or f'benchmark {index}'}"
        extra = get_dict(bench, "extra_info", name, default={})
        if "bloomperf" not in extra:
            continue  # another plugin's benchmark in the same session
        cell = cell_from_dict(extra["bloomperf"], name)
        context = get_dict(extra, "bloomperf_run", name)
        check_header(context, f"{name} bloomperf_run", RESULTS_KIND, RESULTS_SCHEMA_VERSION)
        # pytest-benchmark drops a benchmark that never timed anything (an OOM, an error), so
        # the context may carry such cells itself; a benchmark's own cell always wins.
        this_run = run_from_dict({"cells": [], **context}, name)
        if run is None:
            finished = this_run.finished_at or str(data.get("datetime", ""))
            run = replace(this_run, cells=(), finished_at=finished)
        elif (this_run.topology, this_run.model.name) != (run.topology, run.model.name):
            raise BloomperfError(
                f"{name}: from another run ({this_run.topology}, {this_run.model.name}) than the "
                f"first benchmark ({run.topology}, {run.model.name})"
            )
        for carried in this_run.cells:
            if carried.id not in own_ids:
                run = run.with_cell(carried)
        run = run.with_cell(cell)
        own_ids.add(cell.id)
    if run is None:
        raise BloomperfError(
            f"{where}: no bloomperf cells in this pytest-benchmark file "
            "(was it written with the bloomperf plugin?)"
        )
    return run


def merge_runs(runs: list[RunResult], names: list[str]) -> RunResult:
    """Several result files of one topology and model as one run (later files win per cell)."""
    merged = runs[0]
    for run, name in zip(runs[1:], names[1:], strict=True):
        if (run.topology, run.model.name) != (merged.topology, merged.model.name):
            raise BloomperfError(
                f"{name}: results of {run.topology} / {run.model.name} cannot be merged with "
                f"{names[0]} ({merged.topology} / {merged.model.name})"
            )
        for cell in run.cells:
            merged = merged.with_cell(cell)
    return merged


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
) -> Comparison:
    if baseline_arg is None and len(results) == 2:
        before = read_results(Path(results[0]))
        after = read_results(Path(results[1]))
        return compare_run(after, baseline_of_run(before, results[0], tolerance), strict=strict)
    if baseline_arg is None and len(results) > 2:
        raise BloomperfError(
            "diff: give --baseline to compare several result files, or exactly two to diff them"
        )
    run = merge_runs([read_results(Path(r)) for r in results], results)
    if baseline_arg is not None:
        baseline = resolve_baseline(baseline_arg, run.model.name, baselines_dir)
    else:
        folder = baselines_dir if baselines_dir is not None else default_baselines_dir()
        found = find_baseline(run.topology, run.model.name, folder)
        if found is None:
            why = f"no baseline for {run.topology} / {run.model.name} in {folder}"
            return compare_without_baseline(run, why)
        baseline = found
    return compare_run(run, baseline, strict=strict)


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare results with a baseline, or two result files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "results",
        nargs="+",
        metavar="RESULT",
        help="bloomperf results, pytest-benchmark JSON, or a pytest-benchmark storage folder; "
        "two of them without --baseline: before and after",
    )
    parser.add_argument(
        "--baseline", metavar="FILE|TOPOLOGY", help="a baseline file or a topology id or alias"
    )
    parser.add_argument("--baselines", type=Path, help="baselines folder (default: ./baselines)")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument(
        "--strict", action="store_true", help="fail when a cell ran where an OOM was expected"
    )
    parser.add_argument(
        "--tolerance",
        type=_fraction,
        help="ms/token tolerance when diffing two results (default: 0.05 on GPUs, "
        "none on CPU), e.g. 0.1 for ±10%%",
    )
    # ---- history (bloomperf.history owns the test; this only wires it in) ----
    parser.add_argument(
        "--history",
        type=Path,
        metavar="DIR",
        help="history folder: also list persistent changes over the nights, and fail when the "
        "newest night confirmed one for the worse",
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
    comparison = diff(
        args.results, args.baseline, args.baselines, strict=args.strict, tolerance=args.tolerance
    )
    failed = comparison.failed
    history = ""
    if args.history is not None:
        fmt = "markdown" if args.format == "markdown" else "text"
        history, worse = history_section(args.history, fmt, **detection_settings(args))
        failed = failed or worse
    if args.format == "json" or not history:
        print(render_comparison(comparison, args.format), end="")
    else:
        print(render_comparison(comparison, args.format) + "\n" + history, end="")
    return EXIT_REGRESSION if failed else 0
