"""The serving sweep's requests: prompt and generation lengths shaped like DeepSpeed-FastGen's
workloads, scaled to the served model's context.

FastGen benchmarked long prompts and short generations on 4,096-token models (prompts of about
1,200 and 2,600 tokens, generations of about 128 and 60), each length drawn from a normal
distribution around its mean. bloomperf keeps those shapes as fractions of the context, so a
512-token model gets prompts of about 150 or 325 tokens, and a 2,048-token BLOOM four times that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import unknown_name

FASTGEN_CONTEXT = 4096
SPREAD = 0.3  # the standard deviation as a share of the mean
MIN_PROMPT = 4
MIN_OUTPUT = 8  # enough streamed tokens for inter-token latencies to mean something


@dataclass(frozen=True)
class LengthShape:
    name: str
    prompt_mean: int  # tokens, at FastGen's 4,096-token context
    output_mean: int


SHAPES: dict[str, LengthShape] = {
    shape.name: shape
    for shape in (
        LengthShape("fastgen-1200-128", 1200, 128),
        LengthShape("fastgen-2600-60", 2600, 60),
    )
}
DEFAULT_SHAPE = "fastgen-1200-128"


@dataclass(frozen=True)
class RequestLengths:
    prompt_tokens: int
    output_tokens: int


def find_shape(name: str) -> LengthShape:
    if name not in SHAPES:
        raise BloomperfError(f"--workload: {unknown_name(name, list(SHAPES))}")
    return SHAPES[name]


def scaled_means(shape: LengthShape, context: int) -> tuple[float, float]:
    scale = context / FASTGEN_CONTEXT
    return shape.prompt_mean * scale, shape.output_mean * scale


def draw_lengths(shape: LengthShape, context: int, count: int, seed: int) -> list[RequestLengths]:
    """``count`` requests whose prompt plus generation always fit in ``context`` tokens."""
    prompt_mean, output_mean = scaled_means(shape, context)
    rng = np.random.default_rng(seed)
    prompts = rng.normal(prompt_mean, SPREAD * prompt_mean, count)
    outputs = rng.normal(output_mean, SPREAD * output_mean, count)
    drawn = []
    for prompt, output in zip(prompts, outputs, strict=True):
        out = max(MIN_OUTPUT, round(output))
        top = context - out - 1  # room for the BOS token the tokenizer may add
        drawn.append(RequestLengths(int(np.clip(round(prompt), MIN_PROMPT, top)), out))
    return drawn
