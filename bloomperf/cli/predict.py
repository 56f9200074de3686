"""``bloomperf predict``: the memory model's peak per GPU, the OOM boundary and the roofline of
every cell of a topology, as a table or JSON, and the boundaries against a baseline where one
exists. The models are ``memory_model``, ``roofline`` and ``boundaries``; this is their command.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from bloomperf.analysis.boundaries import (
    BoundaryCheck,
    PredictedRow,
    check_boundaries,
    predict_row,
)
from bloomperf.analysis.memory_model import (
    ACCELERATE_IO_CACHE_COPIES,
    CUDA_CONTEXT_BYTES,
    KV_HEADROOM,
    ZERO_PINNED_GATHER_BLOCKS,
    GpuMemory,
    MemoryPrediction,
)
from bloomperf.analysis.scenario import NEW_TOKENS, PROMPT_TOKENS, Scenario
from bloomperf.backends import BACKEND_NAMES, backend_class
from bloomperf.catalog.hardware import GiB, parse_topology_id, topology_id
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.arguments import add_format_argument, add_run_option, checked, run_option
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import markdown_table, unknown_name
from bloomperf.harness.matrix import DEFAULT_BATCH_SIZES
from bloomperf.harness.options import parse_positive_int
from bloomperf.render.terminal import fit_lines, fit_table, terminal_width
from bloomperf.store.baseline.search import find_baseline

PREDICT_KIND = "bloomperf-predict"
PREDICT_SCHEMA_VERSION = 1


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="predict peak memory per GPU, the OOM boundary and the roofline of every cell",
    )
    add_run_option(parser, "model", required=True, help=f"shape: {', '.join(MODEL_SHAPES)}")
    add_run_option(parser, "layers")
    parser.add_argument(
        "--topology",
        required=True,
        metavar="ID",
        help="[NODESx]GPUSxGPU, e.g. 8xA100-80GB, 2x8xA100-40GB, or 'detect' [detect]",
    )
    # The blog's rows (the built-ins a GPU run measures: installed backends are only read when
    # named) and GPU batch sizes; --batches is the older spelling of --batch-sizes.
    blogs = [name for name in BACKEND_NAMES if "cuda" in backend_class(name).default_on]
    for name, default, *older in (
        ("backends", ",".join(blogs)),
        ("dtypes", "bf16,fp16,int8"),
        ("batch_sizes", ",".join(str(b) for b in DEFAULT_BATCH_SIZES["cuda"]), "--batches"),
        ("new_tokens", str(NEW_TOKENS)),
    ):
        described = f"{run_option(name).help.split(' [')[0]} [{default}]"
        add_run_option(parser, name, *older, default=default, help=described)
    parser.add_argument(
        "--prompt-tokens",
        type=checked(parse_positive_int),
        default=PROMPT_TOKENS,
        metavar="N",
        help=f"prompt tokens per sequence [{PROMPT_TOKENS}]",
    )
    add_format_argument(parser, "json")
    parser.set_defaults(func=run_predict)


def render_text(rows: list[PredictedRow], batches: tuple[int, ...], title: str) -> str:
    header = ["backend dtype", "boundary", *(f"bs{b}" for b in batches)]
    table = []
    for row in rows:
        cells = []
        for cell, bound in zip(row.cells, row.roofline_ms_per_token, strict=True):
            memory = f"{cell.peak_per_gpu_bytes / GiB:.1f}G" if cell.fits else "OOM"
            cells.append(f"{memory} {_ms(bound)}")
        table.append([_row_name(row), str(row.boundary or "none"), *cells])
    lines = [title, "cells: predicted peak GiB per GPU (or OOM) and roofline ms/token"]
    # Wider than the terminal: the batch columns in blocks under the rows' names and boundary.
    lines.append(fit_table(header, table, terminal_width(), keep=2))
    lines.append("")
    lines.append("per row: the peak GPU at the largest batch that fits, and why the next does not")
    lines.extend(_row_details(row) for row in rows)
    lines.append(
        f"constants: CUDA_CONTEXT {CUDA_CONTEXT_BYTES / GiB:.1f} GiB/GPU, "
        f"KV_HEADROOM {KV_HEADROOM} (calibrated), ACCELERATE_IO_CACHE_COPIES "
        f"{ACCELERATE_IO_CACHE_COPIES}, ZERO_PINNED_GATHER_BLOCKS {ZERO_PINNED_GATHER_BLOCKS}"
    )
    return "\n".join(lines)


def _row_details(row: PredictedRow) -> str:
    fitting = [c for c in row.cells if c.fits]
    failing = [c for c in row.cells if not c.fits]
    parts = [f"{_row_name(row)}:"]
    if fitting:
        parts.append(f"bs{fitting[-1].batch_size} {breakdown_text(fitting[-1])};")
    if failing:
        parts.append(f"bs{failing[0].batch_size} does not fit: {failing[0].limit}")
    return " ".join(parts)


def breakdown_text(cell: MemoryPrediction) -> str:
    """``GPU 0: weights 41.0 + KV 6.6 + ... = 55.8 GiB`` for the GPU at the peak."""
    index = max(range(len(cell.per_gpu)), key=lambda i: cell.per_gpu[i].total)
    gpu = cell.per_gpu[index]
    terms = [
        ("weights", gpu.weights),
        ("KV", gpu.kv_cache),
        ("activations", gpu.activations),
        ("logits", gpu.logits),
        ("workspace", gpu.workspace),
        ("context", gpu.context),
        ("fragmentation", gpu.fragmentation),
    ]
    summed = " + ".join(f"{name} {value / GiB:.1f}" for name, value in terms if value)
    return f"GPU {index}: {summed} = {gpu.total / GiB:.1f} GiB"


def _row_name(row: PredictedRow) -> str:
    return f"{row.scenario.backend} {row.scenario.dtype}"


def _ms(value: float) -> str:
    return f"{value:.2f}ms" if value < 10 else f"{value:.1f}ms"


def render_json(rows: list[PredictedRow], topology: str, model: str) -> str:
    data = {
        "kind": PREDICT_KIND,
        "schema_version": PREDICT_SCHEMA_VERSION,
        "topology": topology,
        "model": model,
        "constants": {
            "cuda_context_bytes": CUDA_CONTEXT_BYTES,
            "kv_headroom": KV_HEADROOM,
            "accelerate_io_cache_copies": ACCELERATE_IO_CACHE_COPIES,
            "zero_pinned_gather_blocks": ZERO_PINNED_GATHER_BLOCKS,
        },
        "rows": [
            {
                "backend": row.scenario.backend,
                "dtype": row.scenario.dtype,
                "boundary": row.boundary,
                "cells": [
                    {
                        **asdict(cell),
                        "per_gpu": [_gpu_dict(g) for g in cell.per_gpu],
                        "roofline_ms_per_token": bound,
                    }
                    for cell, bound in zip(row.cells, row.roofline_ms_per_token, strict=True)
                ],
            }
            for row in rows
        ],
    }
    return json.dumps(data, indent=2, allow_nan=False)


def _gpu_dict(gpu: GpuMemory) -> dict[str, int]:
    return {**asdict(gpu), "total": gpu.total}


def _topology_text(text: str) -> str:
    """``detect``: this machine's GPUs through NVML (bloomperf.catalog.topology)."""
    if text != "detect":
        return text
    found = detect_topology()
    if found.device != "cuda":
        raise BloomperfError(f"--topology detect: no GPU found ({found.nvml_reason or 'CPU only'})")
    return found.id


def run_predict(args: argparse.Namespace) -> int:
    if args.model not in MODEL_SHAPES:
        raise BloomperfError(f"--model: {unknown_name(args.model, list(MODEL_SHAPES))}")
    shape = MODEL_SHAPES[args.model]
    nodes, per_node, gpus = parse_topology_id(_topology_text(args.topology))
    n_gpus = nodes * per_node
    batches = args.batch_sizes
    tokens = (args.prompt_tokens, args.new_tokens)
    rows = [
        predict_row(
            Scenario(shape, args.layers, backend, dtype, gpus, n_gpus, nodes, *tokens), batches
        )
        for backend in args.backends
        for dtype in args.dtypes
        if dtype in backend_class(backend).dtypes
    ]
    topology = topology_id(nodes, per_node, gpus)
    if args.format == "json":
        print(render_json(rows, topology, shape.name))
    else:
        text = render_text(rows, batches, f"{shape.name} on {topology} (predicted)")
        print(fit_lines(text, terminal_width()))
        baseline = find_baseline(topology, shape.name)
        if baseline is not None and args.layers in (None, baseline.model_layers):
            checks = check_boundaries(baseline, shape, gpus, n_gpus)
            print()
            checked = render_checks(checks, f"OOM boundary, predicted vs {baseline.path}")
            print(fit_lines(checked, terminal_width()))
    return 0


def render_checks(checks: list[BoundaryCheck], title: str) -> str:
    header = ["backend", "dtype", "reference: largest batch run (first OOM)", "predicted", ""]
    rows = []
    for c in checks:
        if c.steps_off == 0:
            verdict = "equal"
        else:
            side = "optimistic" if c.steps_off > 0 else "pessimistic"
            verdict = f"{abs(c.steps_off)} step{'s' if abs(c.steps_off) > 1 else ''} {side}"
        reference = f"{c.reference} ({c.reference_oom})"
        rows.append([c.backend, c.dtype, reference, str(c.predicted), verdict])
    return "\n".join([f"**{title}**", "", *markdown_table(header, rows)])
