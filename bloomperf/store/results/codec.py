"""A run's JSON form: the ``bloomperf-results`` document and its one writer.

``resultfiles.read_results`` is its one reader (it also reads pytest-benchmark's files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bloomperf.catalog.names import check_model_name, check_topology_id
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import (
    entries,
    get_bool,
    get_dict,
    get_figures,
    get_float,
    get_int,
    get_list,
    get_str,
    get_strings,
    json_fields,
)
from bloomperf.store.contention import CycleLoad, load_from_dict, load_to_dict
from bloomperf.store.results import (
    MAX_BATCH_SIZE,
    MAX_CELLS,
    MAX_CYCLES,
    MAX_NEW_TOKENS,
    MAX_RUN_SAMPLES,
    CellResult,
    EnergyReading,
    MemoryReading,
    ModelInfo,
    Outcome,
    RunResult,
    WorkloadInfo,
    latency_to_dict,
    read_backend_and_dtype,
)
from bloomperf.store.schema import DocumentKind, write_versioned
from bloomperf.store.telemetry import telemetry_from_dict, telemetry_to_dict


def update_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added a cell's ``figures`` (metric name -> per-cycle samples, from metrics
    that measure something of their own) and its ``loads`` (what else used the machine during
    each timed cycle). Both are optional in a cell (absent: none), as a version 1 cell measured
    neither, so a version 1 document reads as it is."""
    return data


RESULTS = DocumentKind("bloomperf-results", 2, {2: update_to_2})


def energy_from_dict(data: Any, where: str) -> EnergyReading | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: energy must be an object")
    return EnergyReading(
        source=get_str(data, "source", where),
        energy_j=get_float(data, "energy_j", where, optional=True),
        seconds=get_float(data, "seconds", where),
        tokens=get_int(data, "tokens", where),
        reason=get_str(data, "reason", where, default=""),
    )


def cell_to_dict(c: CellResult) -> dict[str, Any]:
    return {
        "id": c.id,
        "backend": c.backend,
        "dtype": c.dtype,
        "batch_size": c.batch_size,
        "outcome": c.outcome.value,
        "ms_per_token": c.ms_per_token,
        "samples_ms_per_token": list(c.samples_ms_per_token),
        **latency_to_dict(c),
        "samples_step_ms": [list(steps) for steps in c.samples_step_ms],
        "figures": {name: list(values) for name, values in c.figures.items()},
        "loads": [load_to_dict(load) for load in c.loads],
        "energy_j": c.energy.energy_j if c.energy else None,
        "j_per_token": c.energy.j_per_token if c.energy else None,
        "avg_power_w": c.energy.avg_power_w if c.energy else None,
        "energy": json_fields(c.energy) if c.energy else None,
        "flags": list(c.telemetry.flags) if c.telemetry else [],
        "telemetry": telemetry_to_dict(c.telemetry),
        "load_time_s": c.load_time_s,
        "peak_memory_bytes": c.peak_memory_bytes,
        "load_memory": json_fields(c.load_memory) if c.load_memory else None,
        "generate_memory": json_fields(c.generate_memory) if c.generate_memory else None,
        "message": c.message,
        "details": c.details,
    }


def run_to_dict(run: RunResult) -> dict[str, Any]:
    return {
        **RESULTS.header(),
        "complete": run.complete,
        "synthetic": run.synthetic or None,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "topology": run.topology,
        "model": json_fields(run.model),
        "workload": json_fields(run.workload),
        "environment": run.environment,
        "cells": [cell_to_dict(c) for c in run.cells],
    }


def memory_from_dict(cell: dict[str, Any], key: str, where: str) -> MemoryReading | None:
    """The memory reading of one phase (``key``: load_memory or generate_memory), or None."""
    data = cell.get(key)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: {key} must be an object (a memory reading)")
    per_device = get_list(data, "per_device_bytes", where, default=[])
    return MemoryReading(
        source=get_str(data, "source", where),
        peak_bytes=get_int(data, "peak_bytes", where, optional=True),
        per_device_bytes=tuple(
            get_int(entry, name, where) for entry, name in entries(per_device, "per_device_bytes")
        ),
        process_bytes=get_int(data, "process_bytes", where, optional=True),
        torch_allocated_bytes=get_int(data, "torch_allocated_bytes", where, optional=True),
        torch_reserved_bytes=get_int(data, "torch_reserved_bytes", where, optional=True),
        reason=get_str(data, "reason", where, default=""),
        start_bytes=get_int(data, "start_bytes", where, optional=True),
        per_node_bytes=per_node_from_list(data, where),
    )


def per_node_from_list(data: dict[str, Any], where: str) -> tuple[tuple[str, int], ...]:
    """``[[node, bytes], ...]`` (written by json_fields from the tuple of pairs)."""
    pairs = get_list(data, "per_node_bytes", where, default=[])
    nodes: list[tuple[str, int]] = []
    for index, pair in enumerate(pairs):
        name = f"per_node_bytes[{index}]"
        if not (isinstance(pair, list) and len(pair) == 2):
            raise BloomperfError(f"{where}: {name} must be a [node, bytes] pair")
        (node_entry, node_name), (size_entry, size_name) = entries(pair, name)
        nodes.append((get_str(node_entry, node_name, where), get_int(size_entry, size_name, where)))
    return tuple(nodes)


def cell_from_dict(data: Any, where: str) -> CellResult:
    backend, dtype = read_backend_and_dtype(data, where, "a cell")
    outcome_text = get_str(data, "outcome", where)
    try:
        outcome = Outcome(outcome_text)
    except ValueError:
        valid = ", ".join(o.value for o in Outcome)
        raise BloomperfError(
            f"{where}: unknown outcome {outcome_text!r} (valid: {valid})"
        ) from None
    samples = bounded_list(data, "samples_ms_per_token", where, MAX_CYCLES)
    check_derived(data, where)
    return CellResult(
        backend=backend,
        dtype=dtype,
        batch_size=get_int(data, "batch_size", where, minimum=1, maximum=MAX_BATCH_SIZE),
        outcome=outcome,
        samples_ms_per_token=get_figures(samples, "samples_ms_per_token", where),
        load_time_s=get_float(data, "load_time_s", where, optional=True, positive=True),
        load_memory=memory_from_dict(data, "load_memory", where),
        generate_memory=memory_from_dict(data, "generate_memory", where),
        message=get_str(data, "message", where, default=""),
        details=get_dict(data, "details", where, default={}),
        energy=energy_from_dict(data.get("energy"), f"{where} energy"),
        telemetry=telemetry_from_dict(data.get("telemetry"), f"{where} telemetry"),
        samples_step_ms=steps_from_list(
            bounded_list(data, "samples_step_ms", where, MAX_CYCLES), where
        ),
        figures=figures_from_dict(get_dict(data, "figures", where, default={}), where),
        loads=loads_from_list(bounded_list(data, "loads", where, MAX_CYCLES), where),
    )


def figures_from_dict(data: dict[str, Any], where: str) -> dict[str, tuple[float, ...]]:
    """Per-cycle figures by metric name; a name no installed metric has is kept (the package
    that measured it may be missing here), never judged."""
    return {
        str(name): get_figures(
            bounded_list(data, name, where, MAX_CYCLES), str(name), f"{where} figures"
        )
        for name in data
    }


def loads_from_list(values: list[Any], where: str) -> tuple[CycleLoad, ...]:
    """Each timed cycle's load (what else used the machine); none in a version 1 file (nor in
    a version 2 file written before cycles carried one: the list may be absent)."""
    read = (load_from_dict(entry, f"{where} loads[{i}]") for i, entry in enumerate(values))
    return tuple(load for load in read if load is not None)


# Figures written beside a cell for other readers and recomputed from its samples when read:
# never used, but a wrong type in one is a broken file all the same.
DERIVED_NUMBERS = (
    "ms_per_token",
    "ttft_ms",
    "tpot_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "energy_j",
    "j_per_token",
    "avg_power_w",
)


def check_derived(data: dict[str, Any], where: str) -> None:
    for key in DERIVED_NUMBERS:
        get_float(data, key, where, optional=True)
    get_int(data, "peak_memory_bytes", where, optional=True)
    if data.get("id") is not None:
        get_str(data, "id", where)
    for entry, name in entries(get_list(data, "flags", where, default=[]), "flags"):
        get_str(entry, name, where)


def bounded_list(data: dict[str, Any], key: str, where: str, limit: int) -> list[Any]:
    """A list field of at most ``limit`` entries: what the statistics can afford, not what the
    file's size allows."""
    values = get_list(data, key, where, default=[])
    if len(values) > limit:
        raise BloomperfError(f"{where}: field {key!r} has {len(values)} entries, over {limit}")
    return values


def steps_from_list(cycles: list[Any], where: str) -> tuple[tuple[float, ...], ...]:
    """Per-cycle step times; absent in files written before per-step timing (read as none)."""
    read: list[tuple[float, ...]] = []
    for index, steps in enumerate(cycles):
        what = f"samples_step_ms[{index}]"
        if not isinstance(steps, list):
            raise BloomperfError(f"{where} {what}: a cycle must be a list of milliseconds")
        if len(steps) > MAX_NEW_TOKENS + 1:
            raise BloomperfError(
                f"{where} {what}: a cycle of {len(steps)} steps, over {MAX_NEW_TOKENS + 1}"
            )
        read.append(get_figures(steps, what, where))
    return tuple(read)


def run_from_dict(data: dict[str, Any], where: str) -> RunResult:
    model = get_dict(data, "model", where)
    workload = get_dict(data, "workload", where)
    cells = tuple(
        cell_from_dict(c, f"{where} cell {i}")
        for i, c in enumerate(bounded_list(data, "cells", where, MAX_CELLS))
    )
    check_unique(cells, where)
    check_samples(cells, where)
    synthetic = data.get("synthetic")
    return RunResult(
        model=ModelInfo(
            name=check_model_name(get_str(model, "name", where), where),
            path=get_str(model, "path", where, default=""),
            layers=int(get_int(model, "layers", where, optional=True) or 0),
            parameters=int(get_int(model, "parameters", where, optional=True) or 0),
        ),
        workload=WorkloadInfo(
            new_tokens=int(
                get_int(workload, "new_tokens", where, minimum=1, maximum=MAX_NEW_TOKENS)
            ),
            cycles=get_int(workload, "cycles", where, minimum=1, maximum=MAX_CYCLES),
            warmup=get_int(workload, "warmup", where, maximum=MAX_CYCLES),
            prompts=get_strings(
                get_list(workload, "prompts", where, default=[]), "prompts", f"{where} workload"
            ),
        ),
        topology=check_topology_id(get_str(data, "topology", where), where),
        environment=get_dict(data, "environment", where, default={}),
        cells=cells,
        started_at=get_str(data, "started_at", where, default=""),
        finished_at=get_str(data, "finished_at", where, default=""),
        complete=get_bool(data, "complete", where, default=False),
        synthetic="" if synthetic is None else get_str(data, "synthetic", where),
    )


def check_unique(cells: tuple[CellResult, ...], where: str) -> None:
    """A cell measured twice in one file is a corrupt or hand-edited file: which one counts?"""
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise BloomperfError(f"{where}: cell {cell.id} appears twice")
        seen.add(cell.id)


def check_samples(cells: tuple[CellResult, ...], where: str) -> None:
    """The timed cycles of all cells together: the verdict's work grows with them."""
    total = sum(len(c.samples_ms_per_token) + len(c.samples_step_ms) for c in cells)
    if total > MAX_RUN_SAMPLES:
        raise BloomperfError(f"{where}: {total} timed samples in all, over {MAX_RUN_SAMPLES}")


def save_run(run: RunResult, path: Path) -> None:
    write_versioned(Path(path), RESULTS, run_to_dict(run))
