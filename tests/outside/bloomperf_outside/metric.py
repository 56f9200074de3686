"""A higher-is-better metric with a measurement of its own: tokens generated per CPU-second of
the worker process (what a unit of CPU buys; a change that burns more CPU for the same tokens
lowers it even where the wall clock hides it behind idle cores).

The meter reads the process's CPU clock right before and right after each timed cycle (the
worker calls it outside the timed region); bloomperf stores one figure per cycle in the cell's
``figures`` and judges it against a baseline like any built-in metric, but upward.
"""

from __future__ import annotations

import time

from bloomperf.core.metrics import HIGHER, Cycle, Metric


class CpuTimeMeter:
    def __init__(self) -> None:
        self.started = 0.0

    def start(self) -> None:
        self.started = time.process_time()

    def stop(self, cycle: Cycle) -> float | None:
        used = time.process_time() - self.started
        return cycle.batch_size * cycle.new_tokens / used if used > 0 else None


TOKENS_PER_CPU_S = Metric(
    name="tokens_per_cpu_s",
    label="tokens per CPU-second",
    unit="tok/CPU-s",
    direction=HIGHER,
    measure=CpuTimeMeter,
    default_tolerance=0.10,
    cpu_tolerance=0.5,  # a shared runner's CPU clock swings too; this still catches a halving
)
