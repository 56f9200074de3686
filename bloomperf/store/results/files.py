"""Reading results in every format a run leaves behind, as one ``RunResult``.

A ``bloomperf run`` results file, a pytest-benchmark ``--benchmark-json`` file, a file of
pytest-benchmark's ``--benchmark-save`` storage, or that storage folder (its newest file). The
pytest plugin stores each cell in a benchmark's ``extra_info["bloomperf"]`` and the run's context
in ``extra_info["bloomperf_run"]``. Every command that reads results reads them through here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import get_dict, get_list, get_str, read_document
from bloomperf.store.baseline.codec import BASELINE
from bloomperf.store.results import MAX_CELLS, RunResult
from bloomperf.store.results.codec import RESULTS, cell_from_dict, check_samples, run_from_dict
from bloomperf.store.schema import upgrade
from bloomperf.store.serving import KIND as SERVING_KIND
from bloomperf.store.serving import run_from_sweep_v1

STORAGE_GLOB = "[0-9][0-9][0-9][0-9]_*.json"


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
        if data.get("kind") == BASELINE.name:
            raise BloomperfError(f"{where}: is a baseline, not results (pass it with --baseline)")
        if data.get("kind") == SERVING_KIND:  # the serving sweep's former document
            return run_from_sweep_v1(data, where)
        return run_from_dict(upgrade(data, where, RESULTS), where)
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
        names = [get_str(bench, k, f"{where} benchmark {index}", "") for k in ("fullname", "name")]
        name = f"{where} {names[0] or names[1] or f'benchmark {index}'}"
        extra = get_dict(bench, "extra_info", name, default={})
        if "bloomperf" not in extra:
            continue  # another plugin's benchmark in the same session
        cell = cell_from_dict(extra["bloomperf"], name)
        if cell.id in own_ids:
            # The native format's rule (results.codec.check_unique): which of the two counts?
            raise BloomperfError(f"{name}: cell {cell.id} appears twice")
        context = upgrade(get_dict(extra, "bloomperf_run", name), f"{name} bloomperf_run", RESULTS)
        # pytest-benchmark drops a benchmark that never timed anything (an OOM, an error), so
        # the context may carry such cells itself; a benchmark's own cell always wins.
        this_run = run_from_dict({"cells": [], **context}, name)
        if run is None:
            finished = this_run.finished_at or get_str(data, "datetime", where, default="")
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
    if len(run.cells) > MAX_CELLS:
        raise BloomperfError(f"{where}: {len(run.cells)} cells, over {MAX_CELLS}")
    check_samples(run.cells, where)
    return run


def refuse_synthetic(run: RunResult, where: str, allowed: bool) -> RunResult:
    """Results of an injected slowdown gate nothing and set no baseline, unless asked for."""
    if run.synthetic and not allowed:
        raise BloomperfError(
            f"{where}: synthetic results ({run.synthetic}); --allow-synthetic uses them anyway"
        )
    return run


def read_many(paths: list[str]) -> RunResult:
    """Several result files of one topology and model as one run (later files win per cell)."""
    return merge_runs([read_results(Path(p)) for p in paths], paths)


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
