"""Which pairs a busy machine disturbed, and what the verdict is without them. No I/O here.

The paired test assumes that whatever else runs slows both cycles of a pair alike. A burst of
load that lands on one arm's cycle breaks that: measured here, a planted bisect named the wrong
version (B/A 1.28) while other jobs kept the 2-core machine at a load of 4-5. Each cycle
therefore carries what else used the machine (``bloomperf.store.contention.CycleLoad``), and a
pair is **set aside** when:

* its two cycles lost different shares of their time to other processes: each cycle's wall time
  is its own work over ``1 - wait share``, so waiting alone can move the pair's ``log(B/A)`` by
  ``|log(1 - wait_B) - log(1 - wait_A)|``; beyond half the tolerance the pair could lean towards
  a verdict by the machine's doing (a pair where both waited alike cancels, as pairing intends);
* or another process ran on the group's GPU during either cycle (NVML cannot say how much it
  took: any is too much).

The verdict comes from the clean pairs alone, by the unchanged rule of
``bloomperf.analysis.paired``: with no contention it is exactly that rule's, and pairs set aside
can never turn it into *slower*. When the clean pairs cannot decide and some were set aside,
the cell is *inconclusive: the machine was busy* with the figures that say how busy.

The others' CPU time (``other_cores``) is reported, not judged: it counts in 10 ms clock ticks,
coarser than a short cycle, and on a many-core host others may run on cores the worker never
uses. The run-queue wait is exact and says what the others took from the worker itself.

Except in a served sweep (``ab --serve``): there the measured processes (the server's threads
and the client) outnumber their CPUs and wait for each other, so their wait moves with the arm
itself (one sequence at a time waits otherwise than eight), and the others' share of the CPUs
they may use is judged instead (``CycleLoad.cpus``; a client's run lasts tenths of a second,
tens of ticks). On a many-core host that errs towards setting pairs aside, never towards a
verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bloomperf.analysis.paired import PairedEstimate, estimate_paired
from bloomperf.store.contention import CycleLoad

# A pair is set aside when waiting could have moved its log-ratio by more than this share of
# the tolerance: pairs that each lean by less than half the tolerance cannot together bring the
# estimate (a median of their averages) past ``1 + tolerance``.
LEAN_SHARE_OF_TOLERANCE = 0.5


@dataclass(frozen=True)
class Busy:
    """How busy the machine was over one cell's pairs (the figures of a busy verdict)."""

    pairs: int
    set_aside: int
    max_wait_share: float | None  # the largest share of a cycle a worker waited for a CPU
    median_other_cores: float | None  # others' CPU use in cores, median over the cycles
    gpu_neighbours: int  # the most other processes seen on the GPUs during one cycle

    @property
    def clean(self) -> int:
        return self.pairs - self.set_aside

    def describe(self) -> str:
        parts = [f"{self.clean} of {self.pairs} pairs clean"]
        if self.max_wait_share is not None:
            parts.append(f"workers waited up to {self.max_wait_share * 100:.0f} % of a cycle")
        if self.median_other_cores is not None:
            parts.append(f"others used {self.median_other_cores:.2f} cores (median)")
        if self.gpu_neighbours:
            parts.append(f"{self.gpu_neighbours} other processes on the GPU")
        return "; ".join(parts)


Loads = Sequence[CycleLoad | None]


def lean(a: CycleLoad | None, b: CycleLoad | None) -> float:
    """How far what the others took (``CycleLoad.taken_share``: the wait for a CPU, or the
    others' share of the CPUs a served sweep's processes share) could have moved the ratio of
    cycle ``b`` to cycle ``a`` (in log), either way; 0 when either is unknown."""
    shares = [load.taken_share if load is not None else None for load in (a, b)]
    if shares[0] is None or shares[1] is None:
        return 0.0
    return abs(math.log1p(-shares[1]) - math.log1p(-shares[0]))


def contended(a: Loads, b: Loads, tolerance: float) -> bool:
    """Whether a pair whose arms ran the cycles ``a`` and ``b`` is set aside (see the module's
    rule). A pair of ``groups`` mode pairs two medians of several cycles each: either median
    may be any of its arm's cycles, so every cycle of A is weighed against every cycle of B."""
    if any(load is not None and (load.gpu_others or 0) > 0 for load in (*a, *b)):
        return True
    limit = LEAN_SHARE_OF_TOLERANCE * tolerance
    return any(lean(x, y) > limit for x in a for y in b)


def clean(values: Sequence[float], flags: Sequence[bool]) -> list[float]:
    """The values of the pairs not set aside."""
    return [value for value, aside in zip(values, flags, strict=True) if not aside]


def clean_estimate(
    a: Sequence[float], b: Sequence[float], flags: Sequence[bool], confidence: float
) -> PairedEstimate | None:
    """The paired estimate over the pairs not set aside; None when every pair was."""
    kept_a, kept_b = clean(a, flags), clean(b, flags)
    return estimate_paired(kept_a, kept_b, confidence) if kept_b else None


def busy_figures(loads: Sequence[tuple[Loads, ...]], flags: Sequence[bool]) -> Busy:
    """The figures of a cell's contention, from every cycle behind its pairs."""
    cycles = [load for pair in loads for arm in pair for load in arm if load is not None]
    waits = [s for s in (load.wait_share for load in cycles) if s is not None]
    others = [c for c in (load.other_cores for load in cycles) if c is not None]
    return Busy(
        pairs=len(flags),
        set_aside=sum(1 for aside in flags if aside),
        max_wait_share=max(waits) if waits else None,
        median_other_cores=statistics.median(others) if others else None,
        gpu_neighbours=max((load.gpu_others or 0 for load in cycles), default=0),
    )
