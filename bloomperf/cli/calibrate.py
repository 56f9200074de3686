"""`bloomperf calibrate`: measure this machine's noise floor by running the same cells N times.

Nothing changes between the runs (A/A), so whatever moves is noise: per cell, the coefficient of
variation of the timed cycles inside one run, and how far the per-run medians (ms/token), peak
memory and load time move from run to run. Each run is a complete ``bloomperf run`` pass (fresh
worker processes, a fresh load), because a baseline and a later check are different runs too:
the spread between loads is part of what a tolerance must absorb. From that spread comes a
suggested tolerance (``bloomperf.analysis.stats.suggest_tolerance``), which ``--write-tolerances``
can store into a baseline file's cells.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from bloomperf.analysis.stats import NoiseFloor, coefficient_of_variation, measure_noise, run_spread
from bloomperf.analysis.stats import suggest_tolerance as tolerance_for
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import format_table
from bloomperf.core.jsonfile import json_fields, write_json_atomic
from bloomperf.harness.lock import hold_device_lock
from bloomperf.harness.options import add_cli_options, resolve_options
from bloomperf.harness.session import Session, all_cells, lock_key
from bloomperf.store.baseline import OWN_FIELDS, BaselineCell, expected_figure, with_figures
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.results import CellResult, Outcome

DEFAULT_REPEATS = 5
MAX_REPEATS = 1000


@dataclass(frozen=True)
class SpreadOfValue:
    """Run-to-run noise of a figure measured once per run (peak memory, load time)."""

    median: float
    run_cv: float
    run_spread: float
    suggested_tolerance: float


@dataclass(frozen=True)
class CellNoise:
    id: str
    backend: str
    dtype: str
    batch_size: int
    runs_ok: int
    median_ms_per_token: float
    ms_per_token: NoiseFloor
    peak_memory: SpreadOfValue | None
    load_time: SpreadOfValue | None


def parse_repeats(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 2 <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"must be between 2 and {MAX_REPEATS}, got {value}")
    return value


def run_repeats(options: RunConfig, repeats: int, err: TextIO) -> dict[str, list[CellResult]]:
    """Every cell of the matrix, measured ``repeats`` times, each repeat a full fresh run."""
    by_cell: dict[str, list[CellResult]] = defaultdict(list)
    for repeat in range(1, repeats + 1):
        session = Session.prepare(replace(options, output=None))
        try:
            for cell in all_cells(session):
                result = session.measure_cell(cell)
                by_cell[result.id].append(result)
                print(f"  run {repeat}/{repeats} {result.id:<28} {_short(result)}", file=err)
        finally:
            session.stop()
    return by_cell


def _short(cell: CellResult) -> str:
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return f"{cell.ms_per_token:.3f} ms/token"
    return cell.outcome.value


def spread_of(values: list[float]) -> SpreadOfValue | None:
    if len(values) < 2 or min(values) <= 0:
        return None
    cv = coefficient_of_variation(values)
    spread = run_spread(values)
    return SpreadOfValue(
        median=sorted(values)[len(values) // 2],
        run_cv=cv,
        run_spread=spread,
        suggested_tolerance=tolerance_for(cv, spread),
    )


def cell_noise(results: list[CellResult]) -> CellNoise | None:
    """The noise of one cell over its runs; None when fewer than two runs measured it."""
    ok = [r for r in results if r.outcome is Outcome.OK and r.samples_ms_per_token]
    if len(ok) < 2:
        return None
    first = ok[0]
    medians = [r.ms_per_token or 0.0 for r in ok]
    return CellNoise(
        id=first.id,
        backend=first.backend,
        dtype=first.dtype,
        batch_size=first.batch_size,
        runs_ok=len(ok),
        median_ms_per_token=sorted(medians)[len(medians) // 2],
        ms_per_token=measure_noise([r.samples_ms_per_token for r in ok]),
        peak_memory=spread_of([float(r.peak_memory_bytes) for r in ok if r.peak_memory_bytes]),
        load_time=spread_of([r.load_time_s for r in ok if r.load_time_s]),
    )


def render_table(cells: list[CellNoise], repeats: int) -> str:
    header = (
        "cell",
        "ms/token",
        "cycle CV",
        "run CV",
        "run spread",
        "tol ms/token",
        "tol memory",
        "tol load",
    )
    rows = [
        (
            c.id,
            f"{c.median_ms_per_token:.3f}",
            _pct(c.ms_per_token.cycle_cv),
            _pct(c.ms_per_token.run_cv),
            _pct(c.ms_per_token.run_spread),
            _pct(c.ms_per_token.suggested_tolerance),
            _pct(c.peak_memory.suggested_tolerance) if c.peak_memory else "-",
            _pct(c.load_time.suggested_tolerance) if c.load_time else "-",
        )
        for c in cells
    ]
    title = f"noise floor over {repeats} runs (A/A; run CV: the medians' run-to-run variation)"
    return "\n".join([title, format_table(header, rows, numbers_right=True, rule=True)])


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def noise_to_dict(
    cells: list[CellNoise], repeats: int, topology: str, model: str
) -> dict[str, Any]:
    return {
        "kind": "bloomperf-calibration",
        "schema_version": 1,
        "topology": topology,
        "model": model,
        "repeats": repeats,
        "cells": [
            {
                "id": c.id,
                "runs_ok": c.runs_ok,
                "median_ms_per_token": c.median_ms_per_token,
                "ms_per_token": json_fields(c.ms_per_token),
                "peak_memory": json_fields(c.peak_memory) if c.peak_memory else None,
                "load_time": json_fields(c.load_time) if c.load_time else None,
            }
            for c in cells
        ],
    }


def write_tolerances(path: Path, cells: list[CellNoise]) -> int:
    """Store the suggested tolerances in a baseline's matching cells; returns how many changed.

    Only figures the baseline has are given a tolerance (a missing figure stays unjudged).
    """
    baseline = load_baseline(path)
    noise = {c.id: c for c in cells}
    changed = 0
    updated: list[BaselineCell] = []
    for old in baseline.cells:
        found = noise.get(old.id)
        new = old if found is None else tolerances_into(old, found)
        changed += new != old
        updated.append(new)
    save_baseline(replace(baseline, cells=tuple(updated)), path)
    return changed


def tolerances_into(cell: BaselineCell, noise: CellNoise) -> BaselineCell:
    suggested = {m: getattr(noise, m) for m in ("ms_per_token", "peak_memory", "load_time")}
    figures = {}
    for name in (*OWN_FIELDS, *cell.figure_samples):
        figure, found = expected_figure(cell, name), suggested.get(name)
        if found is not None and figure.value is not None:
            figure = replace(figure, tolerance=found.suggested_tolerance)
        figures[name] = figure
    return with_figures(cell, figures)


def calibrate_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr  # read at call time, not at import
    options = resolve_options(vars(args))
    if args.write_tolerances is not None:
        load_baseline(args.write_tolerances)  # refuse a bad baseline before measuring for minutes
    probe = Session.prepare(replace(options, output=None))
    print(
        f"bloomperf calibrate: {probe.model.name} on {probe.topology.id}, "
        f"{sum(len(g.batch_sizes) for g in probe.groups)} cells x {args.repeats} runs",
        file=err,
    )
    # The devices `bloomperf run` with these options would lock (GPU UUIDs, or the CPU), so a
    # calibration and a run on the same GPUs exclude each other.
    with hold_device_lock(lock_key(probe.topology, options), enabled=not options.no_lock):
        by_cell = run_repeats(options, args.repeats, err)
    cells = [n for n in (cell_noise(r) for r in by_cell.values()) if n is not None]
    if not cells:
        raise BloomperfError("calibrate: no cell was measured in two runs (see the lines above)")
    print(render_table(cells, args.repeats), file=out)
    if options.output is not None:
        data = noise_to_dict(cells, args.repeats, probe.topology.id, probe.model.name)
        write_json_atomic(options.output, data)
        print(f"noise floor: {options.output}", file=out)
    if args.write_tolerances is not None:
        changed = write_tolerances(args.write_tolerances, cells)
        print(f"tolerances: {changed} cells updated in {args.write_tolerances}", file=out)
    return 0


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="run the same cells several times (A/A) and report the noise floor per cell",
        description=__doc__.split("\n\n")[0],
    )
    add_cli_options(parser)
    parser.add_argument(
        "--repeats",
        type=parse_repeats,
        default=DEFAULT_REPEATS,
        metavar="N",
        help=f"runs of every cell [{DEFAULT_REPEATS}]",
    )
    parser.add_argument(
        "--write-tolerances",
        type=Path,
        metavar="BASELINE",
        help="store the suggested tolerances in this baseline file's matching cells [none]",
    )
    parser.set_defaults(func=calibrate_command)
