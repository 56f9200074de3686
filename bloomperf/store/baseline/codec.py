"""A baseline's JSON form: the one reader and the one writer of ``bloomperf-baseline`` files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bloomperf.catalog.names import check_model_name, check_topology_id
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import (
    get_dict,
    get_figures,
    get_float,
    get_int,
    get_list,
    get_str,
    get_strings,
    json_fields,
)
from bloomperf.core.metrics import metric_names
from bloomperf.store.baseline import (
    EXPECT_OK,
    EXPECTED_OUTCOMES,
    OWN_FIELDS,
    Baseline,
    BaselineCell,
    LoadTime,
    Provenance,
)
from bloomperf.store.results import MAX_BATCH_SIZE, MAX_CELLS, MAX_CYCLES, read_backend_and_dtype
from bloomperf.store.results.codec import bounded_list
from bloomperf.store.schema import DocumentKind, read_versioned, write_versioned


def update_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 keeps every registered metric's cycles in a cell's ``figures`` map: version
    1's ``latency`` map (TTFT and TPOT, the only ones then) is that map under another name."""
    cells = data.get("cells")
    if not isinstance(cells, list):
        return data  # the reader names what is wrong with it
    renamed = [
        {("figures" if k == "latency" else k): v for k, v in c.items()}
        if isinstance(c, dict)
        else c
        for c in cells
    ]
    return {**data, "cells": renamed}


BASELINE = DocumentKind("bloomperf-baseline", 2, {2: update_to_2})


def _tolerance(data: dict[str, Any], key: str, where: str) -> float | None:
    value = get_float(data, key, where, optional=True)
    if value is not None and value >= 1.0:
        raise BloomperfError(
            f"{where}: field {key!r} must be a fraction below 1 (0.05 = 5%), found {value}"
        )
    return value


def cell_from_dict(data: Any, where: str) -> BaselineCell:
    backend, dtype = read_backend_and_dtype(data, where, "a cell")
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
        batch_size=get_int(data, "batch_size", where, minimum=1, maximum=MAX_BATCH_SIZE),
        outcome=outcome,
        ms_per_token=ms,
        ms_per_token_tolerance=_tolerance(data, "ms_per_token_tolerance", where),
        ms_per_token_decimals=get_int(
            data, "ms_per_token_decimals", where, optional=True, maximum=12
        ),
        ms_per_token_samples=get_figures(
            bounded_list(data, "ms_per_token_samples", where, MAX_CYCLES),
            "ms_per_token_samples",
            where,
        ),
        peak_memory_bytes=get_int(data, "peak_memory_bytes", where, optional=True),
        peak_memory_tolerance=_tolerance(data, "peak_memory_tolerance", where),
        load_time_s=get_float(data, "load_time_s", where, optional=True, positive=True),
        load_time_tolerance=_tolerance(data, "load_time_tolerance", where),
        provenance=get_str(data, "provenance", where, default=""),
        details=get_dict(data, "details", where, default={}),
        **figures_from_dict(get_dict(data, "figures", where, default={}), f"{where} figures"),
    )


def figures_from_dict(data: dict[str, Any], where: str) -> dict[str, Any]:
    samples, tolerances = {}, {}
    for metric, entry in data.items():
        if metric not in metric_names() or metric in OWN_FIELDS or not isinstance(entry, dict):
            raise BloomperfError(f"{where}: unknown metric {metric!r}")
        if "samples" not in entry:
            raise BloomperfError(f"{where}: {metric} has no samples")
        values = bounded_list(entry, "samples", where, MAX_CYCLES)
        samples[metric] = get_figures(values, f"{metric} samples", where)
        tolerances[metric] = _tolerance(entry, "tolerance", where)
    return {"figure_samples": samples, "figure_tolerances": tolerances}


def cell_to_dict(c: BaselineCell) -> dict[str, Any]:
    data: dict[str, Any] = {
        "backend": c.backend,
        "dtype": c.dtype,
        "batch_size": c.batch_size,
        "outcome": c.outcome,
    }
    optional: dict[str, Any] = {
        "ms_per_token": whole_number(c.ms_per_token),
        "ms_per_token_tolerance": c.ms_per_token_tolerance,
        "ms_per_token_decimals": c.ms_per_token_decimals,
        "ms_per_token_samples": list(c.ms_per_token_samples) or None,
        "peak_memory_bytes": c.peak_memory_bytes,
        "peak_memory_tolerance": c.peak_memory_tolerance,
        "load_time_s": whole_number(c.load_time_s),
        "load_time_tolerance": c.load_time_tolerance,
    }
    data.update({k: v for k, v in optional.items() if v is not None})
    if c.figure_samples:
        data["figures"] = {
            metric: {"samples": list(values), "tolerance": c.figure_tolerances.get(metric)}
            for metric, values in c.figure_samples.items()
        }
    if c.details:
        data["details"] = c.details
    data["provenance"] = c.provenance
    return data


def whole_number(value: float | None) -> float | int | None:
    """Whole numbers stay integers in the file ("283", as the blog prints it, not "283.0")."""
    if value is not None and float(value).is_integer():
        return int(value)
    return value


def load_time_from_dict(data: Any, where: str) -> LoadTime:
    backend, dtype = read_backend_and_dtype(data, where, "a load time")
    return LoadTime(
        backend=backend,
        dtype=dtype,
        variant=get_str(data, "variant", where, default=""),
        seconds=get_float(data, "seconds", where, positive=True),
        tolerance=_tolerance(data, "tolerance", where),
        provenance=get_str(data, "provenance", where, default=""),
    )


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


def baseline_from_dict(data: dict[str, Any], where: str) -> Baseline:
    topology = get_dict(data, "topology", where)
    model = get_dict(data, "model", where)
    workload = get_dict(data, "workload", where, default={})
    provenance = tuple(
        provenance_from_dict(p, f"{where} provenance {i}")
        for i, p in enumerate(get_list(data, "provenance", where))
    )
    cells = tuple(
        cell_from_dict(c, f"{where} cell {i}")
        for i, c in enumerate(bounded_list(data, "cells", where, MAX_CELLS))
    )
    load_times = tuple(
        load_time_from_dict(lt, f"{where} load time {i}")
        for i, lt in enumerate(get_list(data, "load_times", where, default=[]))
    )
    baseline = Baseline(
        topology=check_topology_id(get_str(topology, "id", where), where),
        topology_aliases=aliases(topology, check_topology_id, f"{where} topology", where),
        topology_description=get_str(topology, "description", where, default=""),
        model=check_model_name(get_str(model, "name", where), where),
        model_aliases=aliases(model, check_model_name, f"{where} model", where),
        model_layers=get_int(model, "layers", where, optional=True),
        new_tokens=get_int(workload, "new_tokens", where, optional=True, minimum=1),
        provenance=provenance,
        cells=cells,
        load_times=load_times,
        notes=get_strings(get_list(data, "notes", where, []), "notes", where),
        path=where,
    )
    check_consistent(baseline, where)
    return baseline


def aliases(
    data: dict[str, Any], check: Callable[[str, str], str], what: str, where: str
) -> tuple[str, ...]:
    names = get_strings(get_list(data, "aliases", where, []), "aliases", where)
    return tuple(check(a, f"{what} aliases[{i}]") for i, a in enumerate(names))


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
        **BASELINE.header(),
        "topology": {
            "id": b.topology,
            "aliases": list(b.topology_aliases),
            "description": b.topology_description,
        },
        "model": {"name": b.model, "aliases": list(b.model_aliases), "layers": b.model_layers},
        "workload": {"new_tokens": b.new_tokens},
        "provenance": [json_fields(p) for p in b.provenance],
        "notes": list(b.notes),
        "cells": [cell_to_dict(c) for c in b.cells],
        "load_times": [
            json_fields(lt) | {"seconds": whole_number(lt.seconds)} for lt in b.load_times
        ],
    }
    return data


def load_baseline(path: Path) -> Baseline:
    path = Path(path)
    data = read_versioned(path, BASELINE)
    return baseline_from_dict(data, str(path))


def save_baseline(baseline: Baseline, path: Path) -> None:
    write_versioned(Path(path), BASELINE, baseline_to_dict(baseline))
