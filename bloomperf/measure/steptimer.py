"""Per-step timing inside ``generate``: one synchronised timestamp at every step boundary.

``generate`` calls its stopping criteria once per step, right after the step's token was
chosen: after the prefill forward, then after each decode forward. A criterion that never
stops and only reads the clock therefore marks every step boundary without touching the
generation loop. On CUDA the device is synchronised first (a clock read while kernels are still
queued times the queueing, not the work); ``generate`` synchronises at that point anyway to test
whether every sequence has finished, so the extra synchronisation costs next to nothing.

Imports transformers: only the worker (next to the model) imports this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList


class StepTimer(StoppingCriteria):
    """``timer.start()``, then ``generate(..., stopping_criteria=timer.criteria())``; then
    ``timer.step_ms()``: the prefill step first, then every decode step, in milliseconds."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.marks: list[float] = []
        self._never: torch.Tensor | None = None

    def start(self) -> float:
        """Synchronise and take the first mark (the cycle's start); returns it."""
        self.sync()
        self.marks = [time.perf_counter()]
        return self.marks[0]

    def criteria(self) -> StoppingCriteriaList:
        return StoppingCriteriaList([self])

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        self.sync()
        self.marks.append(time.perf_counter())
        return self._never_stop(input_ids)

    def _never_stop(self, input_ids: torch.Tensor) -> torch.Tensor:
        # One all-False tensor per shape, kept: no allocation inside the timed loop.
        never = self._never
        if (
            never is None
            or never.shape[0] != input_ids.shape[0]
            or never.device != input_ids.device
        ):
            never = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            self._never = never
        return never

    def step_ms(self) -> list[float]:
        """The duration of each step since the previous mark (the first since ``start``)."""
        return [(b - a) * 1000.0 for a, b in zip(self.marks, self.marks[1:], strict=False)]
