"""A controlled, test-only slowdown: the model's work takes (1 + percent/100) x its own time.

``benchmarks/detection_power.py`` uses it to measure how often bloomperf flags a known 5 % or
10 % regression in a real backend. The delay is proportional to each call's measured duration
(not a fixed number of milliseconds), so it is the same relative slowdown at every batch size.

What is stretched is ``generate`` when the model has one, not each forward pass: measured on
the tiny BLOOM on CPU, forward passes are only about a fifth of ``generate``'s time (the rest is
transformers' per-token Python: stopping criteria, cache bookkeeping), so 50 % per forward pass
made ms/token only 10 % slower. Stretching the whole call makes "a 10 % slowdown" mean 10 % of
the metric bloomperf judges, on any model size. Modules without ``generate`` get forward hooks.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from bloomperf.core.errors import BloomperfError

MAX_PERCENT = 1000.0
# time.sleep overshoots by the kernel's timer slack (50 us) and the wake-up, so the last stretch
# is spun on perf_counter. Only a short one: a process spinning after a whole generate has used
# its time slice and is preempted mid-spin on a loaded machine (measured on this 2-core VM at
# load 10: a 20 ms spin overshot a 3 ms wait by 1.5 ms at the median, a 1 ms spin by 1 us).
SPIN_SECONDS = 0.001


def install_slowdown(model: torch.nn.Module, percent: float) -> None:
    """Make every ``generate`` call of ``model`` (else every forward pass) ``percent`` % slower.

    The clock starts after synchronising the model's devices and stops after synchronising
    again (so queued GPU work is counted); then the call waits ``duration * percent / 100``
    more. The outputs are untouched. ``percent == 0`` installs nothing.
    """
    if not 0.0 <= percent <= MAX_PERCENT:
        raise BloomperfError(
            f"slowdown_percent: must be between 0 and {MAX_PERCENT:g}, found {percent}"
        )
    if percent == 0.0:
        return
    devices = _cuda_devices(model)
    if callable(getattr(model, "generate", None)):
        _stretch_generate(model, devices, percent)
    else:
        _stretch_forward(model, devices, percent)


def _stretch_generate(model: torch.nn.Module, devices: list[torch.device], percent: float) -> None:
    original: Callable[..., Any] = model.generate  # type: ignore[assignment]

    @functools.wraps(original)
    def slowed_generate(*args: Any, **kwargs: Any) -> Any:
        _synchronize(devices)
        start = time.perf_counter()
        output = original(*args, **kwargs)
        _synchronize(devices)
        wait_for((time.perf_counter() - start) * percent / 100.0)
        return output

    # An instance attribute shadows the class's method for every caller of model.generate.
    model.generate = slowed_generate  # type: ignore[assignment]


def _stretch_forward(model: torch.nn.Module, devices: list[torch.device], percent: float) -> None:
    starts: list[float] = []  # a stack: a re-entered top module must not lose the outer start

    def before(module: torch.nn.Module, args: Any) -> None:
        _synchronize(devices)
        starts.append(time.perf_counter())

    def after(module: torch.nn.Module, args: Any, output: Any) -> None:
        _synchronize(devices)
        wait_for((time.perf_counter() - starts.pop()) * percent / 100.0)

    model.register_forward_pre_hook(before)
    model.register_forward_hook(after)


def wait_for(seconds: float) -> None:
    """Wait ``seconds`` precisely, never less: sleep all but the last ``SPIN_SECONDS``, spin
    those. What remains is the machine's: time spent waiting for a CPU at the end."""
    end = time.perf_counter() + seconds
    if seconds > SPIN_SECONDS:
        time.sleep(seconds - SPIN_SECONDS)
    while time.perf_counter() < end:
        pass


def _cuda_devices(model: torch.nn.Module) -> list[torch.device]:
    """Every CUDA device holding part of the model (Accelerate spreads layers over several)."""
    seen = {p.device for p in model.parameters() if p.device.type == "cuda"}
    return sorted(seen, key=lambda d: d.index or 0)


def _synchronize(devices: list[torch.device]) -> None:
    for device in devices:
        torch.cuda.synchronize(device)
