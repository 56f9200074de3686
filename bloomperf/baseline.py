"""Baselines: what a (topology, model) pair is expected to do, cell by cell.

One schema-versioned JSON file per topology and model under ``baselines/``. A cell holds the
expected outcome (``ok``, ``oom``, or ``not-run`` for cells beyond an OOM, as the blog's "–"),
and ms/token, peak memory and load time where known, each with its own relative tolerance (a
tolerance of ``null`` keeps the figure for reading but never judges it). Load times the reference
gives per backend and checkpoint kind rather than per cell live in ``load_times``. Every figure
points at a provenance entry: where it came from, when, on what hardware and software.

``bloomperf baseline show`` prints a baseline as the blog's tables; ``bloomperf baseline accept``
writes measured results into a baseline, atomically, keeping the provenance of untouched cells.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.baseline_folders import describe_search, search_folders, writable_baselines_dir
from bloomperf.errors import BloomperfError
from bloomperf.formatting import (
    GIB,
    format_gib,
    format_ms,
    format_table,
    row_label,
    table_layout,
    utc_now,
)
from bloomperf.jsonfile import (
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    read_json,
    write_json_atomic,
)
from bloomperf.latency import JUDGED_LATENCY, per_cycle
from bloomperf.names import check_model_name, check_topology_id
from bloomperf.results import CellResult, Outcome, RunResult, cell_id, check_backend_and_dtype

BASELINE_KIND = "bloomperf-baseline"
BASELINE_SCHEMA_VERSION = 1

EXPECT_OK = "ok"
EXPECT_OOM = "oom"
EXPECT_NOT_RUN = "not-run"  # beyond an OOM: the reference never ran it (the blog's "–")
EXPECTED_OUTCOMES = (EXPECT_OK, EXPECT_OOM, EXPECT_NOT_RUN)

# Tolerances `baseline accept` gives new cells (an existing cell keeps its own). On GPUs a
# 100-token greedy generation repeats within a few percent and NVML memory within a few; load
# time depends on the file system and its cache. On a shared CPU runner a tiny model's timing
# measures the neighbours more than the code, so ms/token and load time are kept but not judged;
# RSS is stable enough to catch a doubling.
GPU_TOLERANCES = {"ms_per_token": 0.05, "peak_memory": 0.10, "load_time": 0.25}
CPU_TOLERANCES: dict[str, float | None] = {
    "ms_per_token": None,
    "peak_memory": 0.5,
    "load_time": None,
}


# The fingerprint keys a baseline's provenance keeps beside the package versions.
SOFTWARE_SYSTEM_KEYS = ("python", "driver", "cuda_driver", "cuda_torch", "nccl")
# And the bloomperf checkout it was measured with (from ``provenance.provenance``).
COMMIT_KEY = "bloomperf_commit"
DIRTY_KEY = "bloomperf_dirty"


@dataclass(frozen=True)
class Provenance:
    id: str
    source: str
    date: str
    hardware: str
    software: dict[str, str]


@dataclass(frozen=True)
class BaselineCell:
    backend: str
    dtype: str
    batch_size: int
    outcome: str
    ms_per_token: float | None = None
    ms_per_token_tolerance: float | None = None
    # Decimals as printed by the source (the blog prints "1.00", JSON keeps only 1.0).
    ms_per_token_decimals: int | None = None
    # The cycles behind ms_per_token when the baseline was measured by bloomperf.
    ms_per_token_samples: tuple[float, ...] = ()
    peak_memory_bytes: int | None = None
    peak_memory_tolerance: float | None = None
    load_time_s: float | None = None
    load_time_tolerance: float | None = None
    provenance: str = ""
    # Per-cycle TTFT / TPOT / TPOT p99 of a recorded run (bloomperf.latency.per_cycle) and
    # their tolerances: only baselines accepted from real runs have them.
    latency_samples: dict[str, tuple[float, ...]] = field(default_factory=dict)
    latency_tolerances: dict[str, float | None] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)


@dataclass(frozen=True)
class LoadTime:
    """A load time the source gives per backend and checkpoint kind, not per cell."""

    backend: str
    dtype: str
    variant: str  # e.g. "pre-sharded", "unsharded", "" when there is only one
    seconds: float
    tolerance: float | None
    provenance: str = ""


@dataclass(frozen=True)
class Baseline:
    topology: str
    topology_aliases: tuple[str, ...]
    topology_description: str
    model: str
    model_aliases: tuple[str, ...]
    model_layers: int | None
    new_tokens: int | None
    provenance: tuple[Provenance, ...]
    cells: tuple[BaselineCell, ...]
    load_times: tuple[LoadTime, ...] = ()
    notes: tuple[str, ...] = ()
    path: str = ""  # where it was read from; not stored

    def cell(self, backend: str, dtype: str, batch_size: int) -> BaselineCell | None:
        for c in self.cells:
            if (c.backend, c.dtype, c.batch_size) == (backend, dtype, batch_size):
                return c
        return None

    def matches_topology(self, topology: str) -> bool:
        names = {self.topology.lower(), *(a.lower() for a in self.topology_aliases)}
        return topology.lower() in names

    def matches_model(self, model: str) -> bool:
        names = {self.model.lower(), *(a.lower() for a in self.model_aliases)}
        return model.lower() in names


# ---- OOM boundaries -------------------------------------------------------------------------


def oom_boundary(baseline: Baseline, backend: str, dtype: str) -> int | None:
    """The smallest batch size expected to run out of memory, None when none is."""
    sizes = [
        c.batch_size
        for c in baseline.cells
        if (c.backend, c.dtype) == (backend, dtype) and c.outcome == EXPECT_OOM
    ]
    return min(sizes) if sizes else None


def beyond_boundary(baseline: Baseline, backend: str, dtype: str, batch_size: int) -> bool:
    boundary = oom_boundary(baseline, backend, dtype)
    return boundary is not None and batch_size > boundary


def expected_cell(baseline: Baseline, cell: CellResult) -> BaselineCell | None:
    """The baseline cell to compare ``cell`` with, load time filled in from ``load_times``.

    A batch size the baseline does not list but that lies beyond its OOM boundary is expected
    not to run (OOM if tried), like the blog's "–" cells.
    """
    found = baseline.cell(cell.backend, cell.dtype, cell.batch_size)
    if found is None:
        if beyond_boundary(baseline, cell.backend, cell.dtype, cell.batch_size):
            return BaselineCell(cell.backend, cell.dtype, cell.batch_size, EXPECT_NOT_RUN)
        return None
    if found.load_time_s is None:
        load = matching_load_time(baseline, cell)
        if load is not None:
            found = replace(found, load_time_s=load.seconds, load_time_tolerance=load.tolerance)
    return found


def matching_load_time(baseline: Baseline, cell: CellResult) -> LoadTime | None:
    """The load time for the cell's backend and dtype; the variant must be unambiguous.

    The worker may say which checkpoint it loaded in ``details["checkpoint"]`` ("pre-sharded",
    "unsharded"); without that, a backend with two variants is not judged on load time.
    """
    candidates = [
        lt for lt in baseline.load_times if (lt.backend, lt.dtype) == (cell.backend, cell.dtype)
    ]
    variant = cell.details.get("checkpoint")
    if isinstance(variant, str):
        candidates = [lt for lt in candidates if lt.variant in (variant, "")]
    return candidates[0] if len(candidates) == 1 else None


# ---- JSON -------------------------------------------------------------------------------------


def _tolerance(data: dict[str, Any], key: str, where: str) -> float | None:
    value = get_float(data, key, where, optional=True)
    if value is not None and value >= 1.0:
        raise BloomperfError(
            f"{where}: field {key!r} must be a fraction below 1 (0.05 = 5%), found {value}"
        )
    return value


def _floats(values: Iterable[Any], where: str) -> tuple[float, ...]:
    return tuple(float(get_float({"v": v}, "v", where, positive=True) or 0.0) for v in values)


def _strings(values: Iterable[Any], where: str) -> tuple[str, ...]:
    return tuple(get_str({"v": v}, "v", where) for v in values)


def cell_from_dict(data: Any, where: str) -> BaselineCell:
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: a cell must be an object")
    backend = get_str(data, "backend", where)
    dtype = get_str(data, "dtype", where)
    check_backend_and_dtype(backend, dtype, where)
    outcome = get_str(data, "outcome", where)
    if outcome not in EXPECTED_OUTCOMES:
        raise BloomperfError(
            f"{where}: unknown outcome {outcome!r} (valid: {', '.join(EXPECTED_OUTCOMES)})"
        )
    ms = get_float(data, "ms_per_token", where, optional=True, positive=True)
    if outcome != EXPECT_OK and ms is not None:
        raise BloomperfError(f"{where}: an {outcome!r} cell cannot have ms_per_token")
    return BaselineCell(
        backend=backend,
        dtype=dtype,
        batch_size=int(get_int(data, "batch_size", where, minimum=1) or 0),
        outcome=outcome,
        ms_per_token=ms,
        ms_per_token_tolerance=_tolerance(data, "ms_per_token_tolerance", where),
        ms_per_token_decimals=get_int(data, "ms_per_token_decimals", where, optional=True),
        ms_per_token_samples=_floats(get_list(data, "ms_per_token_samples", where, []), where),
        peak_memory_bytes=get_int(data, "peak_memory_bytes", where, optional=True),
        peak_memory_tolerance=_tolerance(data, "peak_memory_tolerance", where),
        load_time_s=get_float(data, "load_time_s", where, optional=True, positive=True),
        load_time_tolerance=_tolerance(data, "load_time_tolerance", where),
        provenance=get_str(data, "provenance", where, default=""),
        **latency_from_dict(get_dict(data, "latency", where, default={}), f"{where} latency"),
    )


def latency_from_dict(data: dict[str, Any], where: str) -> dict[str, Any]:
    samples, tolerances = {}, {}
    for metric, entry in data.items():
        if metric not in JUDGED_LATENCY or not isinstance(entry, dict):
            raise BloomperfError(f"{where}: unknown latency metric {metric!r}")
        samples[metric] = _floats(get_list(entry, "samples", where), where)
        tolerances[metric] = _tolerance(entry, "tolerance", where)
    return {"latency_samples": samples, "latency_tolerances": tolerances}


def cell_to_dict(c: BaselineCell) -> dict[str, Any]:
    data: dict[str, Any] = {
        "backend": c.backend,
        "dtype": c.dtype,
        "batch_size": c.batch_size,
        "outcome": c.outcome,
    }
    optional: dict[str, Any] = {
        "ms_per_token": _number(c.ms_per_token),
        "ms_per_token_tolerance": c.ms_per_token_tolerance,
        "ms_per_token_decimals": c.ms_per_token_decimals,
        "ms_per_token_samples": list(c.ms_per_token_samples) or None,
        "peak_memory_bytes": c.peak_memory_bytes,
        "peak_memory_tolerance": c.peak_memory_tolerance,
        "load_time_s": _number(c.load_time_s),
        "load_time_tolerance": c.load_time_tolerance,
    }
    data.update({k: v for k, v in optional.items() if v is not None})
    if c.latency_samples:
        data["latency"] = {
            metric: {"samples": list(values), "tolerance": c.latency_tolerances.get(metric)}
            for metric, values in c.latency_samples.items()
        }
    data["provenance"] = c.provenance
    return data


def _number(value: float | None) -> float | int | None:
    """Whole numbers stay integers in the file ("283", as the blog prints it, not "283.0")."""
    if value is not None and float(value).is_integer():
        return int(value)
    return value


def load_time_from_dict(data: Any, where: str) -> LoadTime:
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: a load time must be an object")
    backend = get_str(data, "backend", where)
    dtype = get_str(data, "dtype", where)
    check_backend_and_dtype(backend, dtype, where)
    return LoadTime(
        backend=backend,
        dtype=dtype,
        variant=get_str(data, "variant", where, default=""),
        seconds=float(get_float(data, "seconds", where, positive=True) or 0.0),
        tolerance=_tolerance(data, "tolerance", where),
        provenance=get_str(data, "provenance", where, default=""),
    )


def load_time_to_dict(lt: LoadTime) -> dict[str, Any]:
    return {
        "backend": lt.backend,
        "dtype": lt.dtype,
        "variant": lt.variant,
        "seconds": _number(lt.seconds),
        "tolerance": lt.tolerance,
        "provenance": lt.provenance,
    }


def provenance_from_dict(data: Any, where: str) -> Provenance:
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: a provenance entry must be an object")
    software = get_dict(data, "software", where, default={})
    return Provenance(
        id=get_str(data, "id", where),
        source=get_str(data, "source", where),
        date=get_str(data, "date", where),
        hardware=get_str(data, "hardware", where),
        software={str(k): get_str(software, k, f"{where} software") for k in software},
    )


def provenance_to_dict(p: Provenance) -> dict[str, Any]:
    return {
        "id": p.id,
        "source": p.source,
        "date": p.date,
        "hardware": p.hardware,
        "software": dict(p.software),
    }


def baseline_from_dict(data: dict[str, Any], where: str) -> Baseline:
    topology = get_dict(data, "topology", where)
    model = get_dict(data, "model", where)
    workload = get_dict(data, "workload", where, default={})
    provenance = tuple(
        provenance_from_dict(p, f"{where} provenance {i}")
        for i, p in enumerate(get_list(data, "provenance", where))
    )
    cells = tuple(
        cell_from_dict(c, f"{where} cell {i}") for i, c in enumerate(get_list(data, "cells", where))
    )
    load_times = tuple(
        load_time_from_dict(lt, f"{where} load time {i}")
        for i, lt in enumerate(get_list(data, "load_times", where, default=[]))
    )
    baseline = Baseline(
        topology=check_topology_id(get_str(topology, "id", where), where),
        topology_aliases=tuple(
            check_topology_id(a, where)
            for a in _strings(get_list(topology, "aliases", where, []), where)
        ),
        topology_description=get_str(topology, "description", where, default=""),
        model=check_model_name(get_str(model, "name", where), where),
        model_aliases=tuple(
            check_model_name(a, where)
            for a in _strings(get_list(model, "aliases", where, []), where)
        ),
        model_layers=get_int(model, "layers", where, optional=True),
        new_tokens=get_int(workload, "new_tokens", where, optional=True, minimum=1),
        provenance=provenance,
        cells=cells,
        load_times=load_times,
        notes=_strings(get_list(data, "notes", where, []), where),
        path=where,
    )
    check_consistent(baseline, where)
    return baseline


def check_consistent(baseline: Baseline, where: str) -> None:
    """No cell twice, and every figure's provenance is described."""
    seen: set[str] = set()
    for c in baseline.cells:
        if c.id in seen:
            raise BloomperfError(f"{where}: cell {c.id} appears twice")
        seen.add(c.id)
    known = {p.id for p in baseline.provenance}
    for item_id, ref in [(c.id, c.provenance) for c in baseline.cells] + [
        (f"load time {lt.backend}-{lt.dtype}", lt.provenance) for lt in baseline.load_times
    ]:
        if ref not in known:
            raise BloomperfError(f"{where}: {item_id} names unknown provenance {ref!r}")


def baseline_to_dict(b: Baseline) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kind": BASELINE_KIND,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "topology": {
            "id": b.topology,
            "aliases": list(b.topology_aliases),
            "description": b.topology_description,
        },
        "model": {"name": b.model, "aliases": list(b.model_aliases), "layers": b.model_layers},
        "workload": {"new_tokens": b.new_tokens},
        "provenance": [provenance_to_dict(p) for p in b.provenance],
        "notes": list(b.notes),
        "cells": [cell_to_dict(c) for c in b.cells],
        "load_times": [load_time_to_dict(lt) for lt in b.load_times],
    }
    return data


def load_baseline(path: Path) -> Baseline:
    path = Path(path)
    data = read_json(path, BASELINE_KIND, BASELINE_SCHEMA_VERSION)
    return baseline_from_dict(data, str(path))


def save_baseline(baseline: Baseline, path: Path) -> None:
    write_json_atomic(Path(path), baseline_to_dict(baseline))


# ---- finding a baseline -------------------------------------------------------------------


def default_baselines_dir() -> Path:
    """Where ``baseline accept`` writes without ``--baselines`` (see ``baseline_folders``)."""
    return writable_baselines_dir()


def baseline_file_name(topology: str, model: str) -> str:
    """``8xA100-SXM4-80GB.bloom-176b.json``; a hub id's "/" becomes "--"."""
    return f"{topology}.{model.replace('/', '--')}.json"


def find_baseline(topology: str, model: str, folder: Path | None = None) -> Baseline | None:
    """The baseline whose topology (id or alias) and model (name or alias) match: in ``folder``,
    or else the first found along the search order of ``baseline_folders``."""
    for where in search_folders(folder):
        where = checked_folder(where)
        found = [
            b
            for b in (load_baseline(p) for p in sorted(where.glob("*.json")))
            if b.matches_topology(topology) and b.matches_model(model)
        ]
        if len(found) > 1:
            names = ", ".join(b.path for b in found)
            raise BloomperfError(
                f"{where}: several baselines match {topology} and {model}: {names}"
            )
        if found:
            return found[0]
    return None


def resolve_baseline(text: str, model: str | None, folder: Path | None) -> Baseline:
    """``--baseline FILE|TOPOLOGY``: a file path, or a topology id/alias looked up in ``folder``."""
    path = Path(text)
    if path.suffix == ".json" or path.exists():
        return load_baseline(path)
    candidates = [b for b in all_baselines(folder) if b.matches_topology(text)]
    # The model narrows the choice; when no baseline has it, the topology's only baseline is
    # still the one asked for (the comparison then says why it is incomparable).
    same_model = [b for b in candidates if model is not None and b.matches_model(model)]
    candidates = same_model or candidates
    if len(candidates) == 1:
        return candidates[0]
    where = folder if folder is not None else describe_search()
    if not candidates:
        raise BloomperfError(f"--baseline: no baseline for topology {text!r} in {where}")
    models = ", ".join(b.model for b in candidates)
    raise BloomperfError(
        f"--baseline: topology {text!r} has baselines for several models ({models})"
    )


def all_baselines(folder: Path | None) -> list[Baseline]:
    """Every baseline along the search order; an earlier one hides a later one for the same
    topology and model."""
    found: list[Baseline] = []
    for where in search_folders(folder):
        for b in (load_baseline(p) for p in sorted(checked_folder(where).glob("*.json"))):
            if not any(b.matches_topology(f.topology) and b.matches_model(f.model) for f in found):
                found.append(b)
    return found


def checked_folder(folder: Path) -> Path:
    """``--baselines``: a folder that is missing is a mistake to report, not "no baseline"."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BloomperfError(f"--baselines: {folder} is not a folder")
    return folder


def baseline_path_in(folder: Path, topology: str, model: str) -> Path:
    """Where a new baseline goes: inside ``folder``, whatever the names say."""
    path = folder / baseline_file_name(topology, model)
    if path.resolve().parent != folder.resolve():
        raise BloomperfError(f"{path}: a baseline must be written inside {folder}")
    return path


def refuse_output_among_baselines(output: Path, folder: Path | None) -> None:
    """A results file written into a baselines folder would replace a baseline, or break
    every later lookup there (each *.json in it is read as a baseline)."""
    for where in search_folders(folder):
        if where.is_dir() and Path(output).resolve().parent == where.resolve():
            raise BloomperfError(
                f"--output {output}: is inside the baselines folder {where}; refusing to write "
                "results among the baselines"
            )


# ---- accepting results ----------------------------------------------------------------------


def accept_run(
    run: RunResult,
    existing: Baseline | None,
    *,
    source: str,
    force: bool = False,
    now: str | None = None,
) -> Baseline:
    """A baseline with ``run``'s cells written over ``existing``'s (or a new one).

    Cells the run did not measure keep their figures and provenance. Cells that errored or timed
    out say nothing about what to expect: the run is refused unless ``force``, and then they are
    left out. Skipped cells are left out too.
    """
    bad = [c for c in run.cells if c.outcome in (Outcome.ERROR, Outcome.TIMEOUT)]
    if bad and not force:
        listed = ", ".join(f"{c.id} ({c.outcome.value})" for c in bad)
        raise BloomperfError(
            f"{source}: refusing cells that did not finish: {listed}; "
            "use --force to accept the rest"
        )
    if existing is not None and not existing.matches_model(run.model.name):
        raise BloomperfError(
            f"{source}: model {run.model.name!r} is not the baseline's {existing.model!r}"
        )
    provenance = provenance_of_run(run, source, now)
    base = existing if existing is not None else new_baseline(run)
    by_id = {c.id: c for c in base.cells}
    for cell in run.cells:
        if cell.outcome in (Outcome.OK, Outcome.OOM):
            by_id[cell.id] = baseline_cell_of(cell, by_id.get(cell.id), run.topology, provenance.id)
    cells = tuple(sorted(by_id.values(), key=_cell_order))
    used = {c.provenance for c in cells} | {lt.provenance for lt in base.load_times}
    kept = tuple(p for p in base.provenance if p.id in used and p.id != provenance.id)
    return replace(base, cells=cells, provenance=(*kept, provenance))


def _cell_order(c: BaselineCell) -> tuple[int, int, int]:
    backend = BACKEND_NAMES.index(c.backend) if c.backend in BACKEND_NAMES else len(BACKEND_NAMES)
    return (backend, DTYPES.index(c.dtype), c.batch_size)


def new_baseline(run: RunResult) -> Baseline:
    return Baseline(
        topology=run.topology,
        topology_aliases=(),
        topology_description=describe_hardware(run.environment, run.topology),
        model=run.model.name,
        model_aliases=(),
        model_layers=run.model.layers or None,
        new_tokens=run.workload.new_tokens,
        provenance=(),
        cells=(),
    )


def default_tolerances(topology: str) -> dict[str, float | None]:
    return dict(CPU_TOLERANCES) if topology.lower().startswith("cpu") else dict(GPU_TOLERANCES)


def baseline_cell_of(
    cell: CellResult, old: BaselineCell | None, topology: str, provenance: str
) -> BaselineCell:
    """A measured cell as a baseline cell; the tolerances an existing cell had are kept."""
    tol = default_tolerances(topology)
    if old is not None:
        kept = {
            "ms_per_token": old.ms_per_token_tolerance,
            "peak_memory": old.peak_memory_tolerance,
            "load_time": old.load_time_tolerance,
        }
        # An OOM cell has no tolerances of its own: only figures that were judged keep theirs.
        tol |= {metric: value for metric, value in kept.items() if value is not None}
    ok = cell.outcome == Outcome.OK
    ms = cell.ms_per_token if ok else None
    memory = cell.peak_memory_bytes if ok else None
    load = cell.load_time_s
    return BaselineCell(
        backend=cell.backend,
        dtype=cell.dtype,
        batch_size=cell.batch_size,
        outcome=EXPECT_OK if ok else EXPECT_OOM,
        ms_per_token=ms,
        ms_per_token_tolerance=tol["ms_per_token"] if ms is not None else None,
        ms_per_token_samples=cell.samples_ms_per_token if ms is not None else (),
        peak_memory_bytes=memory,
        peak_memory_tolerance=tol["peak_memory"] if memory is not None else None,
        load_time_s=load,
        load_time_tolerance=tol["load_time"] if load is not None else None,
        provenance=provenance,
        latency_samples=per_cycle(cell.samples_step_ms) if ok else {},
        latency_tolerances=latency_tolerances(topology, old),
    )


def latency_tolerances(topology: str, old: BaselineCell | None) -> dict[str, float | None]:
    """Per-metric defaults (None on CPU: recorded, not judged); an existing cell's are kept."""
    cpu = topology.lower().startswith("cpu")
    tol: dict[str, float | None] = {m: None if cpu else t for m, t in JUDGED_LATENCY.items()}
    if old is not None:
        tol |= {m: t for m, t in old.latency_tolerances.items() if t is not None}
    return tol


def provenance_of_run(run: RunResult, source: str, now: str | None) -> Provenance:
    date = run.finished_at or run.started_at or now or utc_now()
    return Provenance(
        id=f"run-{date}",
        source=source,
        date=date,
        hardware=describe_hardware(run.environment, run.topology),
        software=describe_software(run.environment),
    )


def describe_hardware(environment: dict[str, Any], topology: str) -> str:
    """ "8 x NVIDIA A100-SXM4-80GB; AMD EPYC 7763, 256 cores, 2015 GiB RAM" from the fingerprint."""
    parts = []
    gpus = environment.get("gpus")
    if isinstance(gpus, list) and gpus:
        names = Counter(str(g) for g in gpus)
        parts.append(" + ".join(f"{n} x {name}" for name, n in names.items()))
    cpu = environment.get("cpu_model")
    if isinstance(cpu, str) and cpu:
        cores = environment.get("cpu_cores")
        ram = environment.get("ram_bytes")
        text = cpu + (f", {cores} cores" if isinstance(cores, int) else "")
        text += f", {ram / GIB:.0f} GiB RAM" if isinstance(ram, int) else ""
        parts.append(text)
    return "; ".join(parts) or topology


def describe_software(environment: dict[str, Any]) -> dict[str, str]:
    """Package versions, Python, driver and CUDA from the run's environment fingerprint."""
    packages = environment.get("packages")
    software = {str(k): str(v) for k, v in packages.items()} if isinstance(packages, dict) else {}
    for key in SOFTWARE_SYSTEM_KEYS:
        value = environment.get(key)
        if value not in (None, ""):
            software[key] = str(value)
    git = (environment.get("provenance") or {}).get("git") or {}
    if git.get("commit"):  # what the report's "What changed" compares a later run's with
        software[COMMIT_KEY] = str(git["commit"])
        if git.get("dirty") is not None:
            software[DIRTY_KEY] = "yes" if git["dirty"] else "no"
    return software


def software_environment(p: Provenance) -> dict[str, Any]:
    """A provenance entry's software as the fingerprint ``describe_software`` read it from (what
    ``provenance.what_changed`` compares): the system keys, and the rest as packages."""
    software = dict(p.software)
    commit, dirty = software.pop(COMMIT_KEY, None), software.pop(DIRTY_KEY, None)
    system = {k: v for k, v in software.items() if k in SOFTWARE_SYSTEM_KEYS}
    packages = {k: v for k, v in software.items() if k not in SOFTWARE_SYSTEM_KEYS}
    environment = {**system, "packages": packages}
    if commit:
        dirty_flag = None if dirty is None else dirty == "yes"
        environment["provenance"] = {"git": {"commit": commit, "dirty": dirty_flag}}
    return environment


def baseline_cell_text(c: BaselineCell | None) -> str:
    if c is None or c.outcome == EXPECT_NOT_RUN:
        return "–"
    if c.outcome == EXPECT_OOM:
        return "OOM"
    if c.ms_per_token is None:
        return "ok"
    return format_ms(c.ms_per_token, c.ms_per_token_decimals)


def render_baseline_text(b: Baseline) -> str:
    rows, sizes = table_layout(b.cells)
    header = ["Solution (dtype)", *(f"Batch {s}" for s in sizes)]
    body = [
        [row_label(*row), *(baseline_cell_text(b.cell(*row, s)) for s in sizes)] for row in rows
    ]
    parts = [f"{b.topology} · {b.model} · ms per token", format_table(header, body)]
    if any(c.peak_memory_bytes is not None for c in b.cells):
        memory = [
            [row_label(*row), *(_memory_text(b.cell(*row, s)) for s in sizes)] for row in rows
        ]
        parts += ["", "Peak memory", format_table(header, memory)]
    if b.load_times:
        loads = [
            [
                row_label(lt.backend, lt.dtype) + (f" ({lt.variant})" if lt.variant else ""),
                f"{_number(lt.seconds)}",
                _tolerance_text(lt.tolerance),
            ]
            for lt in b.load_times
        ]
        parts += [
            "",
            "Model load time",
            format_table(["Solution", "Load time (s)", "Tolerance"], loads),
        ]
    parts += ["", "Provenance"]
    parts += [f"  {p.id}: {p.source}; {p.date}; {p.hardware}" for p in b.provenance]
    if b.notes:
        parts += ["", "Notes"] + [f"  - {n}" for n in b.notes]
    return "\n".join(parts) + "\n"


def _memory_text(c: BaselineCell | None) -> str:
    if c is None or c.peak_memory_bytes is None:
        return "–"
    return format_gib(c.peak_memory_bytes)


def _tolerance_text(tolerance: float | None) -> str:
    return "not judged" if tolerance is None else f"±{tolerance * 100:g}%"


def render_baseline_json(b: Baseline) -> str:
    """The baseline file's own form (so it loads back), every cell with its ``ms_per_token``."""
    data = baseline_to_dict(b)
    for cell in data["cells"]:
        cell.setdefault("ms_per_token", None)
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
