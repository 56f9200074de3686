"""Baselines: what a (topology, model) pair is expected to do, cell by cell.

One schema-versioned JSON file per topology and model (``baseline_json`` reads and writes it,
``baseline_search`` finds it). A cell holds the expected outcome (``ok``, ``oom``, or ``not-run``
for cells beyond an OOM, as the blog's "–"), and a figure per registered metric where known
(``expected_figure``), each with its own relative tolerance (a tolerance of ``null`` keeps the
figure for reading but never judges it). Load times the reference gives per backend and
checkpoint kind rather than per cell live in ``load_times``. Every figure points at a provenance
entry: where it came from, when, on what hardware and software.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from bloomperf.store.results import CellResult, cell_id

EXPECT_OK = "ok"
EXPECT_OOM = "oom"
EXPECT_NOT_RUN = "not-run"  # beyond an OOM: the reference never ran it (the blog's "–")
EXPECTED_OUTCOMES = (EXPECT_OK, EXPECT_OOM, EXPECT_NOT_RUN)


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
    # Every other registered metric (TTFT, TPOT, an outside package's): the per-cycle samples
    # of a recorded run and their tolerances. Only baselines accepted from real runs have them.
    figure_samples: dict[str, tuple[float, ...]] = field(default_factory=dict)
    figure_tolerances: dict[str, float | None] = field(default_factory=dict)
    # What the accepted cell recorded that a report draws the measurement against, never
    # judged: a serving sweep's rates (``DRAWN_DETAILS`` of the cell's details).
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)


@dataclass(frozen=True)
class Expected:
    """What a baseline cell expects of one metric: a figure, its tolerance (None: kept, never
    judged) and the cycles behind it when bloomperf measured it."""

    value: float | None
    tolerance: float | None
    samples: tuple[float, ...] = ()


# The metrics the blog's tables give, kept in fields of their own (a figure, not cycles).
OWN_FIELDS = ("ms_per_token", "peak_memory", "load_time")


def expected_figure(cell: BaselineCell, name: str) -> Expected:
    """What ``cell`` expects of metric ``name``; the one place that knows where it is kept."""
    if name == "ms_per_token":
        return Expected(cell.ms_per_token, cell.ms_per_token_tolerance, cell.ms_per_token_samples)
    if name == "peak_memory":
        memory = cell.peak_memory_bytes
        return Expected(None if memory is None else float(memory), cell.peak_memory_tolerance)
    if name == "load_time":
        return Expected(cell.load_time_s, cell.load_time_tolerance)
    samples = cell.figure_samples.get(name, ())
    value = statistics.median(samples) if samples else None
    return Expected(value, cell.figure_tolerances.get(name), samples)


def with_figures(cell: BaselineCell, figures: dict[str, Expected]) -> BaselineCell:
    """``cell`` expecting ``figures`` (metric name -> expectation) and nothing else."""
    ms, memory, load = (figures.get(name) for name in OWN_FIELDS)
    others = {k: v for k, v in figures.items() if k not in OWN_FIELDS}
    return replace(
        cell,
        ms_per_token=ms.value if ms else None,
        ms_per_token_tolerance=ms.tolerance if ms else None,
        ms_per_token_samples=ms.samples if ms else (),
        peak_memory_bytes=int(memory.value) if memory and memory.value is not None else None,
        peak_memory_tolerance=memory.tolerance if memory else None,
        load_time_s=load.value if load else None,
        load_time_tolerance=load.tolerance if load else None,
        figure_samples={k: v.samples for k, v in others.items()},
        figure_tolerances={k: v.tolerance for k, v in others.items()},
    )


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
