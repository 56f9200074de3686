"""The documents tests feed bloomperf, built through its own dataclasses and writers.

Runs, cells, memory readings, baselines and history nights made here are what a real run or
``baseline accept`` would write: a test about a malformed file writes its raw text itself. The
committed fixtures these paths name are rebuilt by ``python -m tests.data.results.make_fixtures``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bloomperf.store.baseline import EXPECT_OK, EXPECT_OOM, Baseline, BaselineCell, Provenance
from bloomperf.store.history.nights import add_to_history
from bloomperf.store.results import (
    CellResult,
    MemoryReading,
    ModelInfo,
    Outcome,
    RunResult,
    WorkloadInfo,
)
from bloomperf.store.results.codec import save_run

REPO = Path(__file__).resolve().parent.parent
BASELINES = REPO / "baselines"
BLOG_BASELINE = BASELINES / "8xA100-SXM4-80GB.bloom-176b.json"
RESULTS = REPO / "tests" / "data" / "results"
# The blog's 8 x A100-80GB table as a `bloomperf run` results file, and as pytest-benchmark JSON.
BLOG_RESULTS = RESULTS / "8xA100-SXM4-80GB.blog.results.json"
BLOG_BENCHMARK = RESULTS / "8xA100-SXM4-80GB.blog.benchmark.json"
BENCHMARK_STORAGE = RESULTS / "benchmarks"
# pytest-benchmark storage of the blog's cells, then the same with accelerate-bf16-bs8 10 % slower.
BLOG_STORED_RUN = BENCHMARK_STORAGE / "Linux-CPython-3.11-64bit" / "0001_blog.json"
REGRESSED_RUN = BENCHMARK_STORAGE / "Linux-CPython-3.11-64bit" / "0002_slower.json"

GiB = 2**30
MiB = 2**20

BLOG_TOPOLOGY = "8xA100-SXM4-80GB"
BLOOM = ModelInfo("bloom-176b", "bigscience/bloom", 70, 176_247_271_424)
BLOG_PROMPT = "DeepSpeed is a machine learning framework"
# The tiny BLOOM the CPU suite builds (bloomperf.catalog.models), on a 2-core CPU runner.
TINY = ModelInfo("tiny", "", 2, 165_760)
CPU_ENVIRONMENT: dict[str, Any] = {
    "cpu_model": "AMD EPYC",
    "cpu_cores": 2,
    "ram_bytes": 24 * GiB,
    "python": "3.11.7",
    "packages": {"torch": "2.13.0+cpu"},
    "gpus": [],
    "driver": "",
}
FIRST_NIGHT = date(2026, 10, 1)
OOM_MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB"


# ---- cells ----------------------------------------------------------------------------------


def rss(mib: float) -> MemoryReading:
    """A CPU peak: the process's resident set."""
    return MemoryReading("rss", int(mib * MiB))


def nvml(gib: float) -> MemoryReading:
    """A GPU peak: NVML's total over the GPUs, without a per-device split."""
    return MemoryReading("nvml", int(gib * GiB))


def ok_cell(ms: float, memory_gib: float = 40.0, batch_size: int = 1) -> CellResult:
    """A DeepSpeed-Inference fp16 cell that ran: three cycles 1 % around ``ms`` ms/token, loaded
    in 60 s, ``memory_gib`` at its peak."""
    return CellResult(
        "ds-inference",
        "fp16",
        batch_size,
        Outcome.OK,
        (ms * 0.99, ms, ms * 1.01),
        load_time_s=60.0,
        generate_memory=nvml(memory_gib),
    )


def scaled(cell: CellResult, factor: float) -> CellResult:
    """The cell ``factor`` times as slow: every cycle and every step."""
    return replace(
        cell,
        samples_ms_per_token=tuple(s * factor for s in cell.samples_ms_per_token),
        samples_step_ms=tuple(tuple(ms * factor for ms in c) for c in cell.samples_step_ms),
    )


def scaled_run(run: RunResult, factor: float, cell_id: str | None = None) -> RunResult:
    """The run with one cell (``cell_id``), or every cell, ``factor`` times as slow."""
    cells = (scaled(c, factor) if cell_id in (None, c.id) else c for c in run.cells)
    return replace(run, cells=tuple(cells))


def cell_of(run: RunResult, cell_id: str) -> CellResult:
    return next(c for c in run.cells if c.id == cell_id)


# ---- runs -----------------------------------------------------------------------------------


def bloom_run(
    *cells: CellResult,
    topology: str = BLOG_TOPOLOGY,
    cycles: int = 5,
    environment: dict[str, Any] | None = None,
    started_at: str = "",
    finished_at: str = "",
) -> RunResult:
    """A finished BLOOM-176B run of the blog's workload: 100 new tokens after one warm-up."""
    return RunResult(
        model=BLOOM,
        workload=WorkloadInfo(new_tokens=100, cycles=cycles, warmup=1, prompts=(BLOG_PROMPT,)),
        topology=topology,
        environment=dict(environment or {}),
        cells=cells,
        started_at=started_at,
        finished_at=finished_at,
        complete=True,
    )


def tiny_run(
    *cells: CellResult,
    topology: str = "cpu",
    new_tokens: int = 20,
    cycles: int = 3,
    environment: dict[str, Any] | None = None,
) -> RunResult:
    """A finished run of the tiny model on the CPU runner (``CPU_ENVIRONMENT`` unless given)."""
    return RunResult(
        model=TINY,
        workload=WorkloadInfo(new_tokens=new_tokens, cycles=cycles, warmup=1, prompts=("Hello",)),
        topology=topology,
        environment=dict(CPU_ENVIRONMENT if environment is None else environment),
        cells=cells,
        started_at="2026-11-29T10:00:00Z",
        finished_at="2026-11-29T10:05:00Z",
        complete=True,
    )


def blog_cells(
    baseline: Baseline, measured: Callable[[BaselineCell], CellResult]
) -> tuple[CellResult, ...]:
    """The baseline's table as measured cells: an OOM where it expects one, ``measured(b)`` where
    it gives a figure, nothing where it has none ("–" in the blog)."""
    cells = []
    for b in baseline.cells:
        if b.outcome == EXPECT_OOM:
            cells.append(
                CellResult(b.backend, b.dtype, b.batch_size, Outcome.OOM, message=OOM_MESSAGE)
            )
        elif b.outcome == EXPECT_OK and b.ms_per_token is not None:
            cells.append(measured(b))
    return tuple(cells)


# ---- history --------------------------------------------------------------------------------


def night(i: int) -> date:
    """The date of the ``i``-th night of a history (0 is ``FIRST_NIGHT``)."""
    return FIRST_NIGHT + timedelta(days=i)


def on_night(run: RunResult, day: date) -> RunResult:
    """``run`` as the nightly job measured it on ``day`` (01:30 to 03:10 UTC)."""
    return replace(run, started_at=f"{day}T01:30:00Z", finished_at=f"{day}T03:10:00Z")


def night_run(day: date, cells: list[CellResult]) -> RunResult:
    """A BLOOM-176B night of ``cells``."""
    return on_night(bloom_run(*cells, environment={"transformers": "4.43.4"}), day)


def add_night(history: Path, run: RunResult, scratch: Path) -> Path:
    """Add ``run`` to ``history`` through a results file in ``scratch``, as the nightly job does;
    returns the file the history holds."""
    result = scratch / f"night-{run.started_at[:10]}.json"
    save_run(run, result)
    path, added = add_to_history(result, history)
    assert added, f"{result} was already in {history}"
    return path


# ---- baselines ------------------------------------------------------------------------------

CPU_PROVENANCE = Provenance("p", "test", "2026-11-30", "cpu", {})


def cpu_baseline(*cells: BaselineCell) -> Baseline:
    """A baseline of the tiny model on ``cpu`` with the given cells, all from one provenance."""
    return Baseline(
        topology="cpu",
        topology_aliases=(),
        topology_description="",
        model="tiny",
        model_aliases=(),
        model_layers=TINY.layers,
        new_tokens=None,
        provenance=(CPU_PROVENANCE,),
        cells=tuple(replace(c, provenance=CPU_PROVENANCE.id) for c in cells),
    )
