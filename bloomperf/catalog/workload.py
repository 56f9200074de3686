"""The blog's workload: short prompts repeated to fill the batch, greedy, exactly N new tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The prompts of transformers-bloom-inference's benchmark scripts.
PROMPTS: tuple[str, ...] = (
    "DeepSpeed is a machine learning framework",
    "He is working on",
    "He has a",
    "He got all",
    "Everyone is happy and I can",
    "The new movie that got Oscar this year",
    "In the far far distance from our galaxy,",
    "Peace is the only way",
)


def generate_kwargs(new_tokens: int) -> dict[str, Any]:
    """``generate`` arguments for the blog's workload: greedy, exactly ``new_tokens`` new tokens."""
    # min_new_tokens == max_new_tokens: a sequence that meets EOS early must still cost
    # N tokens, otherwise ms/token silently changes with the weights.
    return {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "do_sample": False,
        "use_cache": True,
    }


def prompts_for_batch(batch_size: int) -> list[str]:
    """The prompts repeated (cyclically) to fill ``batch_size`` rows."""
    return [PROMPTS[i % len(PROMPTS)] for i in range(batch_size)]


def build_inputs(tokenizer: Any, batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Tokenise the batch, left-padded as decoder-only generation needs."""
    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts_for_batch(batch_size), return_tensors="pt", padding=True)
    return {
        "input_ids": encoded["input_ids"].to(device),
        "attention_mask": encoded["attention_mask"].to(device),
    }


def ms_per_token(seconds: float, batch_size: int, new_tokens: int) -> float:
    """The blog's metric: wall time divided by every token generated in the batch."""
    return seconds * 1000.0 / (batch_size * new_tokens)
