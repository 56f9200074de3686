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


def check_logits(logits: torch.Tensor, attention_mask: torch.Tensor | None = None) -> None:
    """Raise ``GarbageOutput`` unless every logit is finite. ``logits`` is one row per prompt;
    the message names the rows that are not, and with the inputs' attention mask, how many pad
    tokens each holds: what tells a masking fault (transformers 5.x's BLOOM in fp16 turns a
    left-padded row into NaN, docs/gpu.md) from a broken kernel, which spoils every row."""
    import torch

    finite = torch.isfinite(logits)
    if bool(finite.all()):
        return
    bad = int((~finite).sum())
    message = f"garbage output: {bad} of {logits.numel()} next-token logits are NaN or infinite"
    if logits.dim() == 2:
        rows = [int(r) for r in (~finite).any(-1).nonzero().flatten()]
        pads = None if attention_mask is None else (attention_mask == 0).sum(-1)
        named = ", ".join(row_named(r, pads) for r in rows[:ROWS_NAMED])
        more = f" and {len(rows) - ROWS_NAMED} more" if len(rows) > ROWS_NAMED else ""
        message += f", in {len(rows)} of {logits.shape[0]} rows: {named}{more}"
    raise GarbageOutput(message)


ROWS_NAMED = 8  # a bs64 cell's bad rows would fill the terminal; the count says the rest


def row_named(row: int, pads: torch.Tensor | None) -> str:
    return f"row {row}" if pads is None else f"row {row} ({int(pads[row])} pad tokens)"


def check_new_tokens(new_tokens: torch.Tensor) -> None:
    """Raise ``GarbageOutput`` when every generated token of every row is one id."""
    if new_tokens.numel() > 1:
        first = new_tokens.reshape(-1)[0]
        if bool((new_tokens == first).all()):
            raise GarbageOutput(
                f"garbage output: all {new_tokens.numel()} new tokens are id {int(first)}"
            )
