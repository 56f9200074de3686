"""A cheap check that a cell's model computes something, before any of its timings count.

A broken path still runs at full speed: NaN weights, int8 buffers holding fp16 bit patterns
(DeepSpeed 0.19.8's int8 without a pre-quantized checkpoint), a kernel that writes nothing.
Timing it would record garbage as a result. Two symptoms, each checked once per cell and never
inside a timed cycle: the next-token logits of the prompts are not all finite, or every new token
of every row is the same id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class GarbageOutput(RuntimeError):
    """The model's output is not a language model's: the cell is an ``error``."""


def check_logits(logits: torch.Tensor) -> None:
    """Raise ``GarbageOutput`` unless every logit is finite."""
    import torch

    finite = torch.isfinite(logits)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise GarbageOutput(
            f"garbage output: {bad} of {logits.numel()} next-token logits are NaN or infinite"
        )


def check_new_tokens(new_tokens: torch.Tensor) -> None:
    """Raise ``GarbageOutput`` when every generated token of every row is one id."""
    if new_tokens.numel() > 1:
        first = new_tokens.reshape(-1)[0]
        if bool((new_tokens == first).all()):
            raise GarbageOutput(
                f"garbage output: all {new_tokens.numel()} new tokens are id {int(first)}"
            )
