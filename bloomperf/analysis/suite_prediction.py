"""What the memory model and the roofline tell the suite about a cell it runs: the prediction
recorded in its results, and whether it is worth running where no baseline knows the OOM."""

from __future__ import annotations

from typing import Any

from bloomperf.analysis.boundaries import predict_boundary
from bloomperf.analysis.memory_model import memory_model_of, predict_cell, predict_cpu_rss
from bloomperf.analysis.roofline import roofline_ms_per_token
from bloomperf.analysis.scenario import SuiteCell
from bloomperf.core.errors import BloomperfError


def cell_prediction(cell: SuiteCell) -> dict[str, Any]:
    """What the model predicts for a cell the suite measures, for its results' ``details``:
    peak memory (per GPU, or process RSS on CPU), whether it fits, and the roofline bound.
    Empty where there is nothing to predict from (an external checkpoint, an unknown GPU, a
    backend without a memory model)."""
    model = memory_model_of(cell.backend)
    if cell.shape is None or model is None:
        return {}
    if cell.topology == "cpu":
        # The CPU model knows one process loading in fp32 (accelerate's path), not rank groups.
        if cell.dtype != "fp32" or not model.one_process:
            return {}
        rss = predict_cpu_rss(cell.shape, cell.layers, cell.batch, new_tokens=cell.new_tokens)
        return {"predicted_peak_bytes": rss, "predicted_peak_scope": "process RSS"}
    scenario = cell.scenario()
    if scenario is None:
        return {}
    try:
        memory = predict_cell(scenario, cell.batch)
        bound = roofline_ms_per_token(scenario, cell.batch)
    except (BloomperfError, KeyError, ValueError):
        return {}
    return {
        "predicted_peak_bytes": memory.peak_per_gpu_bytes,
        "predicted_peak_scope": "per GPU",
        "predicted_fits": memory.fits,
        "predicted_limit": memory.limit,
        "roofline_ms_per_token": bound,
    }


def predicted_skip_reason(
    cell: SuiteCell, batch_sizes: tuple[int, ...], largest_ok: int | None = None
) -> str | None:
    """Why a cell is not worth loading and running where no baseline knows the OOM boundary:
    it is more than one batch step beyond the boundary the memory model predicts, and beyond
    ``largest_ok`` (the largest batch of its group that ran). The step beyond still runs, so a
    pessimistic model shows up as a success there, and the sweep goes on from it."""
    scenario = cell.scenario()
    if scenario is None or memory_model_of(cell.backend) is None:
        return None  # never skipped on a guess that no model of this backend makes
    try:
        boundary = predict_boundary(scenario, batch_sizes)
    except (BloomperfError, KeyError, ValueError):
        return None
    if largest_ok is not None and (boundary is None or largest_ok > boundary):
        boundary = largest_ok
    if cell.batch not in batch_sizes or cell.batch in batches_through(batch_sizes, boundary, 1):
        return None
    largest = "no batch" if boundary is None else f"batch {boundary}"
    return (
        f"predicted to run out of memory: more than one step beyond {largest}, the largest "
        f"that the memory model fits or that ran on {cell.topology} "
        "(no baseline; --probe runs it)"
    )


def batches_through(batches: tuple[int, ...], boundary: int | None, beyond: int) -> tuple[int, ...]:
    """The batches up to ``boundary`` (None: none fits) and ``beyond`` more (to catch the model
    being pessimistic; an OOM there is the expected outcome, a success a model error)."""
    ordered = sorted(batches)
    last = -1 if boundary is None else ordered.index(boundary)
    return tuple(ordered[: last + 1 + beyond])
