"""Results of a run: frozen dataclasses, serialised to schema-versioned JSON.

A ``RunResult`` is written after every cell (atomically), so an interrupted or crashed run keeps
what it measured; ``complete`` says whether the run reached its end.
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from bloomperf.backends import DTYPES, backend_names, row_names
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import get_str
from bloomperf.store.contention import CycleLoad
from bloomperf.store.latency import StepSummary, per_cycle, summarize_steps, tokens_per_s
from bloomperf.store.telemetry import Telemetry

# What a run may hold, and so what every reader accepts: the statistics resample each cell's
# cycles (``analysis.stats``), so their cost grows with the samples, not with the file's bytes.
MAX_CYCLES = 1000  # timed cycles of one cell (ms/token samples, per-step rows)
MAX_NEW_TOKENS = 8192  # new tokens per sequence: BLOOM was trained on 2048 positions
MAX_BATCH_SIZE = 1 << 20
MAX_CELLS = 1000  # cells of one run or one baseline
MAX_RUN_SAMPLES = 20_000  # timed cycles of all the cells of one run together


class Outcome(str, enum.Enum):
    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"


def cell_id(backend: str, dtype: str, batch_size: int) -> str:
    """The stable id used for pytest items, baselines and tables: ``accelerate-bf16-bs32``."""
    return f"{backend}-{dtype}-bs{batch_size}"


def table_order(cell: Any) -> tuple[int, int, int]:
    """Where a cell (measured or expected) sorts: the backends' and dtypes' catalog order, then
    batch size; a name the catalog lacks goes last."""
    names = backend_names()
    backend = names.index(cell.backend) if cell.backend in names else 99
    dtype = DTYPES.index(cell.dtype) if cell.dtype in DTYPES else 99
    return (backend, dtype, cell.batch_size)


def read_backend_and_dtype(data: Any, where: str, what: str) -> tuple[str, str]:
    """The backend and dtype of a stored cell or load time (``what``), known to the catalog."""
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: {what} must be an object")
    backend = get_str(data, "backend", where)
    dtype = get_str(data, "dtype", where)
    if backend not in row_names():
        raise BloomperfError(
            f"{where}: unknown backend {backend!r} (valid: {', '.join(row_names())})"
        )
    if dtype not in DTYPES:
        raise BloomperfError(f"{where}: unknown dtype {dtype!r} (valid: {', '.join(DTYPES)})")
    return backend, dtype


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
    # Source ``ranks`` (a multi-node group: each rank measured itself): the sum per node, in
    # the order the nodes first appear by rank.
    per_node_bytes: tuple[tuple[str, int], ...] = ()


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
    # Per timed cycle, what each metric with a measurement of its own (a ``measure`` hook in
    # ``bloomperf.core.metrics``) measured, by metric name.
    figures: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # Per timed cycle, what else used the machine meanwhile (other processes' CPU, GPU).
    loads: tuple[CycleLoad, ...] = ()

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
    def latency_cycles(self) -> dict[str, tuple[float, ...]]:
        """TTFT, TPOT and TPOT p99 per cycle: what their verdicts compare."""
        return per_cycle(self.samples_step_ms)

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


def latency_to_dict(c: CellResult) -> dict[str, float | None]:
    """A cell's derived latency and throughput figures: stored with it for readers (never read
    back) and shown beside its verdict."""
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
