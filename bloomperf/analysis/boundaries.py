"""The OOM boundary the memory model predicts: the largest batch that fits a scenario, a row
of ``bloomperf predict``'s table, and the model against a baseline's measured boundaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bloomperf.analysis.memory_model import MemoryPrediction, predict_cell
from bloomperf.analysis.roofline import roofline_ms_per_token
from bloomperf.analysis.scenario import Scenario
from bloomperf.catalog.hardware import GpuSpec
from bloomperf.catalog.models import ModelShape
from bloomperf.store.baseline import EXPECT_OK, Baseline, oom_boundary


def predict_boundary(scenario: Scenario, batches: tuple[int, ...], **layout: Any) -> int | None:
    """The largest of ``batches`` that fits, None when not even the smallest does.

    Memory grows with the batch, so the first batch that does not fit ends the search.
    """
    largest = None
    for batch in sorted(batches):
        if not predict_cell(scenario, batch, **layout).fits:
            break
        largest = batch
    return largest


@dataclass(frozen=True)
class PredictedRow:
    """One (backend, dtype) row: each batch's memory and roofline, and the boundary."""

    scenario: Scenario
    boundary: int | None
    cells: tuple[MemoryPrediction, ...]
    roofline_ms_per_token: tuple[float, ...]


def predict_row(scenario: Scenario, batches: tuple[int, ...]) -> PredictedRow:
    cells = tuple(predict_cell(scenario, b) for b in batches)
    bounds = tuple(roofline_ms_per_token(scenario, b) for b in batches)
    return PredictedRow(scenario, predict_boundary(scenario, batches), cells, bounds)


@dataclass(frozen=True)
class BoundaryCheck:
    """One row of a baseline against the model: the largest batch that ran and the prediction."""

    backend: str
    dtype: str
    reference: int | None  # largest batch the baseline ran, None when none did
    reference_oom: int | None  # smallest batch the baseline ran out of memory at
    predicted: int | None
    steps_off: int  # batch-size steps between the two (positive: the model is optimistic)


def check_boundaries(
    baseline: Baseline, shape: ModelShape, gpus: GpuSpec, n_gpus: int
) -> list[BoundaryCheck]:
    """Every (backend, dtype) row of ``baseline`` that has an OOM, against ``predict_boundary``."""
    checks = []
    rows = dict.fromkeys((c.backend, c.dtype) for c in baseline.cells)
    for backend, dtype in rows:
        oom = oom_boundary(baseline, backend, dtype)
        if oom is None:
            continue
        ran = [
            c.batch_size
            for c in baseline.cells
            if (c.backend, c.dtype) == (backend, dtype) and c.outcome == EXPECT_OK
        ]
        batches = tuple(sorted({c.batch_size for c in baseline.cells}))
        reference = max(ran) if ran else None
        scenario = Scenario(shape, baseline.model_layers, backend, dtype, gpus, n_gpus)
        predicted = predict_boundary(scenario, batches)
        steps = _step(predicted, batches) - _step(reference, batches)
        checks.append(BoundaryCheck(backend, dtype, reference, oom, predicted, steps))
    return checks


def _step(batch: int | None, batches: tuple[int, ...]) -> int:
    return -1 if batch is None else batches.index(batch)
