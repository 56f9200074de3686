"""The metric registry: one frozen record per figure a cell is judged on.

Baselines, verdicts, the terminal and GitHub output, the report, history change detection and
``bloomperf ab`` iterate ``metrics()`` rather than naming figures. A record says how a figure
reads (unit, formatter), which way is better, how a measured cell yields its samples, the
tolerance ``baseline accept`` gives it, and, for a metric that measures something of its own,
a worker-side ``measure`` hook. Built-ins are listed here; a package outside bloomperf adds one
through the entry-point group ``bloomperf.metrics`` (an entry point naming a ``Metric``).

Cells are read by attribute (``samples`` takes a ``store.results.CellResult``): this layer sits
below the store, so every layer above can use the registry.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol

from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import format_gib, format_ms, format_seconds

ENTRY_POINT_GROUP = "bloomperf.metrics"
LOWER = "lower"
HIGHER = "higher"
DIRECTIONS = (LOWER, HIGHER)


@dataclass(frozen=True)
class Cycle:
    """What a worker hands a metric's meter after one timed cycle (outside the timed region)."""

    batch_size: int
    new_tokens: int
    seconds: float
    step_ms: tuple[float, ...]


class Meter(Protocol):
    """A metric's own measurement in the worker: ``start`` right before a timed cycle,
    ``stop`` right after it (neither inside the timed region), one figure per cycle."""

    def start(self) -> None: ...

    def stop(self, cycle: Cycle) -> float | None: ...


@dataclass(frozen=True)
class Metric:
    name: str  # as stored in files: "ms_per_token", "peak_memory", ...
    label: str  # as people read it: "ms/token", "peak memory"
    unit: str  # "ms", "bytes", "s", or any other unit written after the number
    direction: str = LOWER  # which way is better: "lower" or "higher"
    # The cell's samples (per cycle, or one value); None: the generic per-cycle figures
    # the metric's ``measure`` hook recorded (``CellResult.figures[name]``).
    read: Callable[[Any], Sequence[float]] | None = None
    default_tolerance: float | None = 0.05  # what `baseline accept` gives a new cell on a GPU
    cpu_tolerance: float | None = None  # and on a CPU (None: recorded, not judged)
    judged_by_default: bool = True  # False: accepted with no tolerance anywhere
    measure: Callable[[], Meter] | None = None  # the worker-side hook, one meter per cell
    per_row: bool = False  # one figure serves a table row (a load), not each batch size
    short_label: str = ""  # for a narrow terminal cell; the label when empty
    # Whether the nightly history looks for level shifts in it (``analysis.changes``): not in
    # figures that swing night to night with the file cache and neighbours.
    watched: bool = True

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise BloomperfError(
                f"metric {self.name}: direction must be one of {', '.join(DIRECTIONS)}, "
                f"found {self.direction!r}"
            )

    @property
    def abbrev(self) -> str:
        return self.short_label or self.label

    def samples(self, cell: Any) -> tuple[float, ...]:
        """The cell's positive finite samples of this metric (none when not measured)."""
        read = self.read(cell) if self.read else cell.figures.get(self.name, ())
        values = (float(v) for v in read if v is not None)
        return tuple(v for v in values if math.isfinite(v) and v > 0)

    def format(self, value: float) -> str:
        if self.unit == "ms":
            return format_ms(value)
        if self.unit == "bytes":
            return format_gib(value)
        if self.unit == "s":
            return format_seconds(value)
        return f"{value:.4g} {self.unit}".rstrip()

    def tolerance_for(self, cpu: bool) -> float | None:
        """The tolerance a newly accepted cell gets on a CPU or GPU topology."""
        if not self.judged_by_default:
            return None
        return self.cpu_tolerance if cpu else self.default_tolerance


def _one(value: Any) -> tuple[float, ...]:
    return () if value is None else (float(value),)


def _latency(key: str) -> Callable[[Any], Sequence[float]]:
    return lambda cell: cell.latency_cycles.get(key, ())


# On GPUs a 100-token greedy generation repeats within a few percent and NVML memory within a
# few; load time depends on the file system and its cache; a latency tail is noisier than a
# median. On a shared CPU runner a tiny model's timing measures the neighbours more than the
# code, so timing is kept but not judged there; RSS is stable enough to catch a doubling.
BUILT_INS = (
    Metric("ms_per_token", "ms/token", "ms", read=lambda c: c.samples_ms_per_token),
    Metric(
        "peak_memory",
        "peak memory",
        "bytes",
        read=lambda c: _one(c.peak_memory_bytes),
        default_tolerance=0.10,
        cpu_tolerance=0.5,
        short_label="mem",
    ),
    Metric(
        "load_time",
        "load time",
        "s",
        read=lambda c: _one(c.load_time_s),
        default_tolerance=0.25,
        per_row=True,
        watched=False,
    ),
    Metric(
        "ttft_ms", "TTFT", "ms", read=_latency("ttft_ms"), default_tolerance=0.10, watched=False
    ),
    Metric("tpot_ms", "TPOT p50", "ms", read=_latency("tpot_ms"), watched=False),
    Metric(
        "tpot_p99_ms",
        "TPOT p99",
        "ms",
        read=_latency("tpot_p99_ms"),
        default_tolerance=0.15,
        watched=False,
    ),
    # A `bloomperf serve` sweep's figures (its cell's ``figures``, docs/serving.md). Even on a
    # loaded CPU a server's capacity is judged, loosely: the sweep's rates are 10-25 % apart
    # and a p99 of 40 requests moves by half between runs, but a halved effective throughput
    # or a doubled tail is a broken server, not noise.
    Metric(
        "serving_effective_rps",
        "effective throughput",
        "req/s",
        direction=HIGHER,
        default_tolerance=0.15,
        cpu_tolerance=0.4,
        short_label="eff. req/s",
    ),
    Metric(
        "serving_ttft_p99_ms", "served TTFT p99", "ms", default_tolerance=0.25, cpu_tolerance=0.9
    ),
    Metric("serving_itl_p99_ms", "served ITL p99", "ms", default_tolerance=0.25, cpu_tolerance=0.9),
)
# The figure a table cell shows first; the rest follow where they moved.
HEADLINE = "ms_per_token"


@functools.cache
def metrics() -> tuple[Metric, ...]:
    """The built-ins, then every metric an installed package registers, in name order."""
    return (*BUILT_INS, *outside_metrics(BUILT_INS))


def outside_metrics(known: Sequence[Metric]) -> tuple[Metric, ...]:
    names = {m.name for m in known}
    found: list[Metric] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        where = f"entry point {point.name} = {point.value} ({ENTRY_POINT_GROUP})"
        try:
            loaded = point.load()
        except Exception as exc:  # any import failure of a plug-in is the user's input
            raise BloomperfError(f"{where}: cannot load it: {exc}") from None
        if not isinstance(loaded, Metric):
            raise BloomperfError(f"{where}: names a {type(loaded).__name__}, not a Metric")
        if loaded.name in names:
            raise BloomperfError(f"{where}: metric {loaded.name!r} is registered twice")
        names.add(loaded.name)
        found.append(loaded)
    return tuple(found)


def metric_names() -> tuple[str, ...]:
    return tuple(m.name for m in metrics())


def find_metric(name: str) -> Metric | None:
    return next((m for m in metrics() if m.name == name), None)


def metric(name: str) -> Metric:
    found = find_metric(name)
    if found is None:
        raise BloomperfError(f"unknown metric {name!r} (registered: {', '.join(metric_names())})")
    return found


def label_of(name: str) -> str:
    found = find_metric(name)
    return found.label if found is not None else name


def format_value(name: str, value: float | str | None) -> str:
    """A figure of metric ``name`` with its unit; a name no record has gets no unit at all
    (a guessed one would mislead)."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return value
    found = find_metric(name)
    if found is None and name.endswith("_ms"):  # a latency percentile shown, not judged
        return format_ms(value)
    return found.format(value) if found is not None else f"{value:.4g}"


def better(name: str, before: float, after: float) -> bool:
    """Whether ``after`` is better than ``before`` for this metric (equal is not better)."""
    found = find_metric(name)
    higher = found is not None and found.direction == HIGHER
    return after > before if higher else after < before
