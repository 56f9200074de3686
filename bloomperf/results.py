"""Results of a run: frozen dataclasses, serialised to schema-versioned JSON.

A ``RunResult`` is written after every cell (atomically), so an interrupted or crashed run keeps
what it measured; ``complete`` says whether the run reached its end.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.errors import BloomperfError
from bloomperf.jsonfile import (
    get_dict,
    get_float,
    get_int,
    get_list,
    get_str,
    read_json,
    write_json_atomic,
)
from bloomperf.latency import StepSummary, summarize_steps, tokens_per_s
from bloomperf.names import check_model_name, check_topology_id
from bloomperf.telemetry import Telemetry, telemetry_from_dict, telemetry_to_dict

RESULTS_KIND = "bloomperf-results"
RESULTS_SCHEMA_VERSION = 1


class Outcome(str, enum.Enum):
    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"


def cell_id(backend: str, dtype: str, batch_size: int) -> str:
    """The stable id used for pytest items, baselines and tables: ``accelerate-bf16-bs32``."""
    return f"{backend}-{dtype}-bs{batch_size}"


@dataclass(frozen=True)
class MemoryReading:
    """Peak memory over one phase (load, or one cell's generation).

    ``source`` is ``nvml`` (GPU: device used memory, summed over devices), ``rss`` (CPU: peak
    resident set of the worker's process tree) or ``unavailable`` (then ``reason`` says why).
    """

    source: str
    peak_bytes: int | None
    per_device_bytes: tuple[int, ...] = ()
    process_bytes: int | None = None
    torch_allocated_bytes: int | None = None
    torch_reserved_bytes: int | None = None
    reason: str = ""
    # NVML's device total at the phase's start (after the cell's cleanup): what the cell found
    # already in use, so its own share is peak_bytes - start_bytes. None on CPU and in old files.
    start_bytes: int | None = None


@dataclass(frozen=True)
class EnergyReading:
    """Energy over the timed cycles (``bloomperf.measure.energy``): ``source`` is ``nvml`` (summed
    over the group's GPUs), ``rapl`` (CPU packages) or ``unavailable``; ``energy_j`` is None when
    the counters could not be read or went backwards, and ``reason`` says which."""

    source: str
    energy_j: float | None
    seconds: float  # wall time the counters covered
    tokens: int  # tokens generated in that time (batch x new tokens x cycles)
    reason: str = ""

    @property
    def j_per_token(self) -> float | None:
        return self.energy_j / self.tokens if self.energy_j is not None and self.tokens else None

    @property
    def avg_power_w(self) -> float | None:
        ok = self.energy_j is not None and self.seconds > 0
        return self.energy_j / self.seconds if ok and self.energy_j is not None else None


@dataclass(frozen=True)
class CellResult:
    backend: str
    dtype: str
    batch_size: int
    outcome: Outcome
    samples_ms_per_token: tuple[float, ...] = ()
    load_time_s: float | None = None
    load_memory: MemoryReading | None = None
    generate_memory: MemoryReading | None = None
    message: str = ""
    # What actually ran: e.g. {"kernel_inject": false, "tp": 2, "ranks": 2, "device_map": ...}
    details: dict[str, Any] = field(default_factory=dict)
    # Per timed cycle, the ms of each generate step: prefill first, then each decode step.
    samples_step_ms: tuple[tuple[float, ...], ...] = ()
    energy: EnergyReading | None = None
    telemetry: Telemetry | None = None  # GPU clocks/power/temperature; flags if not steady

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)

    @property
    def ms_per_token(self) -> float | None:
        """Median over the timed cycles: robust to one disturbed cycle."""
        if not self.samples_ms_per_token:
            return None
        return statistics.median(self.samples_ms_per_token)

    @property
    def steps(self) -> StepSummary | None:
        return summarize_steps(self.samples_step_ms)

    @property
    def tokens_per_s(self) -> float | None:
        return tokens_per_s(self.ms_per_token)

    @property
    def gpu_count(self) -> int:
        """GPUs the cell ran on (NVML's per-device readings); 0 on CPU."""
        memory = self.generate_memory or self.load_memory
        if memory is None or memory.source != "nvml":
            return 0
        return len(memory.per_device_bytes)

    @property
    def peak_memory_bytes(self) -> int | None:
        """The larger of the load and generation peaks: what the cell needed to exist."""
        peaks = [
            m.peak_bytes
            for m in (self.load_memory, self.generate_memory)
            if m is not None and m.peak_bytes is not None
        ]
        return max(peaks) if peaks else None


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: str
    layers: int
    parameters: int


@dataclass(frozen=True)
class WorkloadInfo:
    new_tokens: int
    cycles: int
    warmup: int
    prompts: tuple[str, ...]


@dataclass(frozen=True)
class RunResult:
    model: ModelInfo
    workload: WorkloadInfo
    topology: str
    environment: dict[str, Any]
    cells: tuple[CellResult, ...] = ()
    started_at: str = ""
    finished_at: str = ""
    complete: bool = False
    # Why the figures are not real measurements (an injected slowdown), or "".
    synthetic: str = ""

    def with_cell(self, cell: CellResult) -> RunResult:
        kept = tuple(c for c in self.cells if c.id != cell.id)
        return replace(self, cells=(*kept, cell))


# ---- JSON ---------------------------------------------------------------------------------


def memory_to_dict(m: MemoryReading | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "source": m.source,
        "peak_bytes": m.peak_bytes,
        "per_device_bytes": list(m.per_device_bytes),
        "process_bytes": m.process_bytes,
        "torch_allocated_bytes": m.torch_allocated_bytes,
        "torch_reserved_bytes": m.torch_reserved_bytes,
        "reason": m.reason,
        "start_bytes": m.start_bytes,
    }


def latency_to_dict(c: CellResult) -> dict[str, float | None]:
    """The derived latency and throughput figures, stored for readers (never read back)."""
    steps = c.steps
    rate = c.tokens_per_s
    gpus = c.gpu_count
    return {
        "ttft_ms": steps.ttft_ms if steps else None,
        "tpot_ms": steps.tpot_ms if steps else None,
        "tpot_p90_ms": steps.tpot_p90_ms if steps else None,
        "tpot_p99_ms": steps.tpot_p99_ms if steps else None,
        "tokens_per_s": rate,
        "tokens_per_s_per_gpu": rate / gpus if rate is not None and gpus else None,
    }


def energy_to_dict(e: EnergyReading | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "source": e.source,
        "energy_j": e.energy_j,
        "seconds": e.seconds,
        "tokens": e.tokens,
        "reason": e.reason,
    }


def energy_from_dict(data: Any, where: str) -> EnergyReading | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: energy must be an object")
    return EnergyReading(
        source=get_str(data, "source", where),
        energy_j=get_float(data, "energy_j", where, optional=True),
        seconds=float(get_float(data, "seconds", where) or 0.0),
        tokens=int(get_int(data, "tokens", where) or 0),
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
        "energy_j": c.energy.energy_j if c.energy else None,
        "j_per_token": c.energy.j_per_token if c.energy else None,
        "avg_power_w": c.energy.avg_power_w if c.energy else None,
        "energy": energy_to_dict(c.energy),
        "flags": list(c.telemetry.flags) if c.telemetry else [],
        "telemetry": telemetry_to_dict(c.telemetry),
        "load_time_s": c.load_time_s,
        "peak_memory_bytes": c.peak_memory_bytes,
        "load_memory": memory_to_dict(c.load_memory),
        "generate_memory": memory_to_dict(c.generate_memory),
        "message": c.message,
        "details": c.details,
    }


def run_to_dict(run: RunResult) -> dict[str, Any]:
    return {
        "kind": RESULTS_KIND,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "complete": run.complete,
        "synthetic": run.synthetic or None,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "topology": run.topology,
        "model": {
            "name": run.model.name,
            "path": run.model.path,
            "layers": run.model.layers,
            "parameters": run.model.parameters,
        },
        "workload": {
            "new_tokens": run.workload.new_tokens,
            "cycles": run.workload.cycles,
            "warmup": run.workload.warmup,
            "prompts": list(run.workload.prompts),
        },
        "environment": run.environment,
        "cells": [cell_to_dict(c) for c in run.cells],
    }


def memory_from_dict(data: Any, where: str) -> MemoryReading | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: memory reading must be an object")
    per_device = get_list(data, "per_device_bytes", where, default=[])
    return MemoryReading(
        source=get_str(data, "source", where),
        peak_bytes=get_int(data, "peak_bytes", where, optional=True),
        per_device_bytes=tuple(
            int(get_int({"v": v}, "v", f"{where} per_device_bytes") or 0) for v in per_device
        ),
        process_bytes=get_int(data, "process_bytes", where, optional=True),
        torch_allocated_bytes=get_int(data, "torch_allocated_bytes", where, optional=True),
        torch_reserved_bytes=get_int(data, "torch_reserved_bytes", where, optional=True),
        reason=get_str(data, "reason", where, default=""),
        start_bytes=get_int(data, "start_bytes", where, optional=True),
    )


def check_backend_and_dtype(backend: str, dtype: str, where: str) -> None:
    if backend not in BACKEND_NAMES:
        raise BloomperfError(
            f"{where}: unknown backend {backend!r} (valid: {', '.join(BACKEND_NAMES)})"
        )
    if dtype not in DTYPES:
        raise BloomperfError(f"{where}: unknown dtype {dtype!r} (valid: {', '.join(DTYPES)})")


def cell_from_dict(data: Any, where: str) -> CellResult:
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: a cell must be an object")
    backend = get_str(data, "backend", where)
    dtype = get_str(data, "dtype", where)
    check_backend_and_dtype(backend, dtype, where)
    outcome_text = get_str(data, "outcome", where)
    try:
        outcome = Outcome(outcome_text)
    except ValueError:
        valid = ", ".join(o.value for o in Outcome)
        raise BloomperfError(
            f"{where}: unknown outcome {outcome_text!r} (valid: {valid})"
        ) from None
    samples = get_list(data, "samples_ms_per_token", where, default=[])
    return CellResult(
        backend=backend,
        dtype=dtype,
        batch_size=int(get_int(data, "batch_size", where, minimum=1) or 0),
        outcome=outcome,
        samples_ms_per_token=tuple(
            float(get_float({"v": s}, "v", f"{where} samples_ms_per_token", positive=True) or 0.0)
            for s in samples
        ),
        load_time_s=get_float(data, "load_time_s", where, optional=True, positive=True),
        load_memory=memory_from_dict(data.get("load_memory"), where),
        generate_memory=memory_from_dict(data.get("generate_memory"), where),
        message=get_str(data, "message", where, default=""),
        details=get_dict(data, "details", where, default={}),
        energy=energy_from_dict(data.get("energy"), f"{where} energy"),
        telemetry=telemetry_from_dict(data.get("telemetry"), f"{where} telemetry"),
        samples_step_ms=steps_from_list(
            get_list(data, "samples_step_ms", where, default=[]), where
        ),
    )


def steps_from_list(cycles: list[Any], where: str) -> tuple[tuple[float, ...], ...]:
    """Per-cycle step times; absent in files written before per-step timing (read as none)."""
    what = f"{where} samples_step_ms"
    read: list[tuple[float, ...]] = []
    for steps in cycles:
        if not isinstance(steps, list):
            raise BloomperfError(f"{what}: each cycle must be a list of milliseconds")
        read.append(
            tuple(float(get_float({"v": ms}, "v", what, positive=True) or 0.0) for ms in steps)
        )
    return tuple(read)


def run_from_dict(data: dict[str, Any], where: str) -> RunResult:
    model = get_dict(data, "model", where)
    workload = get_dict(data, "workload", where)
    cells = tuple(
        cell_from_dict(c, f"{where} cell {i}") for i, c in enumerate(get_list(data, "cells", where))
    )
    check_unique(cells, where)
    return RunResult(
        model=ModelInfo(
            name=check_model_name(get_str(model, "name", where), where),
            path=get_str(model, "path", where, default=""),
            layers=int(get_int(model, "layers", where, optional=True) or 0),
            parameters=int(get_int(model, "parameters", where, optional=True) or 0),
        ),
        workload=WorkloadInfo(
            new_tokens=int(get_int(workload, "new_tokens", where, minimum=1) or 0),
            cycles=int(get_int(workload, "cycles", where, minimum=1) or 0),
            warmup=int(get_int(workload, "warmup", where) or 0),
            prompts=tuple(str(p) for p in get_list(workload, "prompts", where, default=[])),
        ),
        topology=check_topology_id(get_str(data, "topology", where), where),
        environment=get_dict(data, "environment", where, default={}),
        cells=cells,
        started_at=get_str(data, "started_at", where, default=""),
        finished_at=get_str(data, "finished_at", where, default=""),
        complete=bool(data.get("complete", False)),
        synthetic=get_str(data, "synthetic", where, default="") if data.get("synthetic") else "",
    )


def check_unique(cells: tuple[CellResult, ...], where: str) -> None:
    """A cell measured twice in one file is a corrupt or hand-edited file: which one counts?"""
    seen: set[str] = set()
    for cell in cells:
        if cell.id in seen:
            raise BloomperfError(f"{where}: cell {cell.id} appears twice")
        seen.add(cell.id)


def load_run(path: Path) -> RunResult:
    data = read_json(Path(path), RESULTS_KIND, RESULTS_SCHEMA_VERSION)
    return run_from_dict(data, str(path))


def save_run(run: RunResult, path: Path) -> None:
    write_json_atomic(Path(path), run_to_dict(run))
