"""``bloomperf run --dry-run``: the plan of a run, without loading or building anything.

Per (backend, dtype) group: the launch command and the devices it gets, accelerate's device map
(computed by transformers and accelerate themselves on the meta device, with the 8-bit
quantizer's adjustments, from the model's config alone), the memory model's prediction per GPU,
and each cell with the reason it would be skipped. ``--topology`` plans for a machine this one is
not (as ``bloomperf predict`` does); ``CUDA_VISIBLE_DEVICES`` narrows its GPUs as it would there.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any, TextIO

from bloomperf.analysis.memory_model import (
    CUDA_CONTEXT_BYTES,
    DEVICE_MAP,
    MemoryPrediction,
    memory_model_of,
    predict_cell,
)
from bloomperf.analysis.scenario import Scenario
from bloomperf.analysis.suite_prediction import cell_prediction
from bloomperf.backends import backend_class
from bloomperf.backends.accelerate import gpu_max_memory
from bloomperf.catalog.accelerate_map import on_machine
from bloomperf.catalog.checkpoints import (
    PreparedModel,
    checkpoint_folder_name,
    default_cache_dir,
    resolve_model,
)
from bloomperf.catalog.hardware import GiB, GpuSpec, parse_topology_id
from bloomperf.catalog.models import MODEL_SHAPES, check_layers
from bloomperf.catalog.topology import Topology, detect_topology
from bloomperf.catalog.topology import planned_topology as plan_machine
from bloomperf.cli.arguments import add_format_argument
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.launch import group_command
from bloomperf.harness.matrix import Cell, Group
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import DEFAULT_MODEL, Session, resolve_device
from bloomperf.render.terminal import fit_lines, terminal_width

PLAN_KIND = "bloomperf-plan"
SCHEMA_VERSION = 1


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("dry run")
    group.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (launch commands, device maps, predicted memory, skips); run nothing",
    )
    group.add_argument(
        "--topology",
        default=None,
        metavar="ID",
        help="with --dry-run: plan for this topology (e.g. 8xA100-80GB) [this machine]",
    )
    add_format_argument(group, "json", help="plan format [text]")


# ---- where the plan runs ----------------------------------------------------------------------


def planned_topology(text: str | None) -> tuple[Topology, GpuSpec | None]:
    """This machine's topology, or ``text``'s with the GPUs this process's
    ``CUDA_VISIBLE_DEVICES`` leaves."""
    if text is None:
        return detect_topology(), None
    return plan_machine(text), parse_topology_id(text)[2]


def planned_model(options: RunConfig, device: str) -> PreparedModel:
    """The model the run would use, without building it: a registry shape from its config."""
    name = options.model or DEFAULT_MODEL[device]
    if name not in MODEL_SHAPES:
        return resolve_model(name, options.layers, options.cache_dir)
    shape = MODEL_SHAPES[name]
    layers = check_layers(options.layers, shape.n_layer, shape.name)
    cache = options.cache_dir or default_cache_dir()
    folder = cache / "models" / checkpoint_folder_name(shape, layers)
    return PreparedModel(shape.name, folder, layers, shape.parameters(layers), shape)


# ---- the plan ---------------------------------------------------------------------------------


def plan_group(session: Session, group: Group, gpu: GpuSpec | None, err: TextIO) -> dict[str, Any]:
    """A worker group's plan: its ranks, the GPUs its launch names (none on CPU), the launch,
    accelerate's device map (on GPU only) and each cell."""
    spec = session.group_spec(Cell(group.backend, group.dtype, group.batch_sizes[0]))
    argv, env = group_command(spec)
    indices = tuple(g.index for g in session.topology.gpus)
    devices = [d.index for d in spec.devices]  # the GPUs the launch itself names
    device_map = None
    by_map = backend_class(group.backend).memory_model == DEVICE_MAP
    if by_map and session.device == "cuda" and gpu is not None:
        print(f"  {group.backend} {group.dtype}: device map on the meta device...", file=err)
        device_map = plan_device_map(session, group.dtype, len(indices), gpu)
    # A multi-node launch names no local devices: it spans every GPU of every node.
    n_gpus = len(devices) or len(indices) * session.topology.nodes
    cells = [plan_cell(session, cell, gpu, n_gpus, spec.world_size) for cell in group.cells()]
    return {
        "backend": group.backend,
        "dtype": group.dtype,
        "world_size": spec.world_size,
        "devices": devices,
        "launch": {"argv": list(argv), "env": env},
        "device_map": device_map,
        "cells": cells,
    }


def plan_device_map(session: Session, dtype: str, n_gpus: int, gpu: GpuSpec) -> dict[str, Any]:
    """accelerate's own map for the backend's ``max_memory``, summarised per device."""
    from bloomperf.catalog.device_map import infer_device_map, summarise

    shape, layers = session.model.shape, session.model.layers
    if shape is None:
        return {"error": "the checkpoint's config is no BLOOM shape bloomperf knows"}
    if session.topology.nodes > 1:
        return {"error": "Accelerate runs on one node only (one process drives every GPU)"}
    options = session.backend_options
    given = gpu_max_memory(options, replace(shape, n_layer=layers), dtype, n_gpus, gpu.memory_bytes)
    # On the machine, transformers lowers each entry to the GPU's free memory (``get_max_memory``):
    # the capacity less the CUDA context, as the memory model counts it.
    try:
        found = infer_device_map(
            shape, layers, dtype, on_machine(given, gpu.memory_bytes - CUDA_CONTEXT_BYTES)
        )
    except ImportError as exc:
        return {"error": f"cannot plan: {exc}"}
    modules = summarise(found.placement)
    order = sorted(modules, key=lambda d: (not d.isdigit(), int(d) if d.isdigit() else 0, d))
    return {
        "max_memory": {str(k): v for k, v in given.items()},
        "planned_max_memory": found.planned_max_memory,
        "devices": {
            device: {"modules": names, "bytes": found.bytes_per_device.get(device, 0)}
            for device in order
            for names in [modules[device]]
        },
        "offloaded": found.offloaded,
        "refused": found.refused,
    }


def plan_cell(
    session: Session, cell: Cell, gpu: GpuSpec | None, n_gpus: int, world_size: int
) -> dict[str, Any]:
    planned: dict[str, Any] = {"batch_size": cell.batch_size, "skip": session.skip_reason(cell)}
    shape, layers = session.model.shape, session.model.layers
    if gpu is None or shape is None or memory_model_of(cell.backend) is None:
        suite_cell = session.suite_cell(cell.backend, cell.dtype, cell.batch_size)
        planned["predicted"] = cell_prediction(suite_cell)
        return planned
    choice = session.options.max_memory
    scenario = Scenario(
        shape,
        layers,
        cell.backend,
        cell.dtype,
        gpu,
        n_gpus,
        session.topology.nodes,
        new_tokens=session.run.workload.new_tokens,
    )
    try:
        memory = predict_cell(scenario, cell.batch_size, max_memory=choice, tp=world_size)
    except (ValueError, KeyError) as exc:  # BloomperfError is a ValueError too
        planned["predicted"] = {"error": str(exc)}
        return planned
    planned["predicted"] = prediction_dict(memory)
    return planned


def prediction_dict(memory: MemoryPrediction) -> dict[str, Any]:
    return {
        "per_gpu_bytes": [g.total for g in memory.per_gpu],
        "peak_per_gpu_bytes": memory.peak_per_gpu_bytes,
        "fits": memory.fits,
        "limit": memory.limit,
    }


def build_plan(options: RunConfig, topology_text: str | None, err: TextIO) -> dict[str, Any]:
    topology, gpu = planned_topology(topology_text)
    if gpu is None and topology.device == "cuda":
        from bloomperf.catalog.hardware import known_topology

        known = known_topology(topology.id)
        gpu = known[2] if known else None
    if topology.nodes > 1 and options.hostfile is None:
        raise BloomperfError(
            f"--topology {topology_text}: {topology.nodes} nodes are planned from a DeepSpeed "
            "hostfile: add --hostfile FILE (one line per node: HOST slots=GPUS)"
        )
    device = "cuda" if topology_text else resolve_device(options.device, topology)
    model = planned_model(options, device)
    session = Session.prepare(replace(options, output=None, device=device), topology, model)
    print(
        f"bloomperf: planning {model.name} ({model.layers} layers) on {topology.id}, "
        f"{len(session.groups)} groups",
        file=err,
    )
    groups = [plan_group(session, group, gpu, err) for group in started_groups(session)]
    return {
        "kind": PLAN_KIND,
        "schema_version": SCHEMA_VERSION,
        "model": {"name": model.name, "layers": model.layers, "parameters": model.parameters},
        "topology": topology.id,
        "planned_for": f"--topology {topology_text}" if topology_text else "this machine",
        "device": device,
        "gpus": [g.index for g in topology.gpus],
        "groups": groups,
        "loads": len(groups),  # one model load per group the run starts
    }


def started_groups(session: Session) -> list[Group]:
    """The worker groups the run will start, as the session starts them: one per batch size
    where the backend asks for it (``Backend.group_per_batch``), each one load of the model."""
    started: list[Group] = []
    for group in session.groups:
        if backend_class(group.backend).group_per_batch(session.backend_options):
            started += [Group(group.backend, group.dtype, (b,)) for b in group.batch_sizes]
        else:
            started.append(group)
    return started


# ---- output -----------------------------------------------------------------------------------


def render_text(plan: dict[str, Any]) -> str:
    model = plan["model"]
    lines = [
        f"plan: {model['name']} ({model['layers']} layers, {model['parameters']:,} parameters) "
        f"on {plan['topology']} ({plan['planned_for']}), device {plan['device']}",
        f"{plan['loads']} worker groups, one model load each",
    ]
    for group in plan["groups"]:
        devices = ",".join(str(d) for d in group["devices"]) or (
            "the hostfile's nodes" if plan["device"] == "cuda" else "cpu"
        )
        lines.append("")
        lines.append(
            f"{group['backend']} {group['dtype']}: {group['world_size']} rank(s), devices {devices}"
        )
        env = " ".join(f"{k}={v}" for k, v in sorted(group["launch"]["env"].items()))
        lines.append(f"  launch: {env + ' ' if env else ''}{' '.join(group['launch']['argv'])}")
        lines.extend(device_map_lines(group["device_map"]))
        for cell in group["cells"]:
            lines.append(f"  bs{cell['batch_size']}: {cell_text(cell)}")
            if cell["skip"]:
                lines.append(f"      skip: {cell['skip']}")  # a reason is long: its own line
    return fit_lines("\n".join(lines), terminal_width())


def device_map_lines(device_map: dict[str, Any] | None) -> list[str]:
    if device_map is None:
        return []
    if "error" in device_map:
        return [f"  device map: {device_map['error']}"]
    given = ", ".join(
        f"{k}: {v / GiB:.1f}" if isinstance(v, int) else f"{k}: {v}"
        for k, v in device_map["max_memory"].items()
    )
    lines = [f"  max_memory (GiB, as passed): {given}"]
    for device, entry in device_map["devices"].items():
        lines.append(
            f"  device map {device}: {entry['bytes'] / GiB:.1f} GiB: {', '.join(entry['modules'])}"
        )
    if device_map["refused"]:
        lines.append(f"  transformers would refuse this map: {device_map['refused']}")
    elif device_map["offloaded"]:
        lines.append(f"  offloaded off the GPUs (slow): {len(device_map['offloaded'])} modules")
    return lines


def cell_text(cell: dict[str, Any]) -> str:
    predicted = cell.get("predicted") or {}
    parts = []
    if "peak_per_gpu_bytes" in predicted:
        fits = "fits" if predicted["fits"] else f"OOM ({predicted['limit']})"
        parts.append(f"predicted peak {predicted['peak_per_gpu_bytes'] / GiB:.1f} GiB/GPU, {fits}")
    elif "predicted_peak_bytes" in predicted:
        scope = predicted.get("predicted_peak_scope", "")
        parts.append(f"predicted peak {predicted['predicted_peak_bytes'] / GiB:.2f} GiB {scope}")
    elif "error" in predicted:
        parts.append(f"no prediction: {predicted['error']}")
    parts.append("skip" if cell["skip"] else "run")
    return "; ".join(parts)


def refusals(plan: dict[str, Any]) -> list[str]:
    """The groups whose model transformers would refuse to load, with its words."""
    return [
        f"{g['backend']} {g['dtype']}: {g['device_map']['refused']}"
        for g in plan["groups"]
        if (g["device_map"] or {}).get("refused")
    ]


def run_dry(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Exit 1 when a planned group could not load (its device map is refused), else 0."""
    out, err = out or sys.stdout, err or sys.stderr
    options = resolve_options(vars(args))
    plan = build_plan(options, args.topology, err)
    if args.format == "json":
        print(json.dumps(plan, indent=2, allow_nan=False), file=out)
    else:
        print(render_text(plan), file=out)
    for refusal in refusals(plan):
        print(f"bloomperf: would not load: {refusal}", file=err)
    return 1 if refusals(plan) else 0
