"""The serving sweep's request lengths: FastGen's two shapes by name (any other refused, naming
them), their means scaled from FastGen's 4,096-token context to the model's, drawn around those
means with a spread of 30 % from the seed alone, each prompt at least 4 tokens and at most what
leaves room for its generation and a BOS token, each generation at least 8 tokens. The
expectations are FastGen's figures, written here again."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.catalog.serving_workload import draw_lengths, find_shape, scaled_means
from bloomperf.core.errors import BloomperfError

FASTGEN = {"fastgen-1200-128": (1200, 128), "fastgen-2600-60": (2600, 60)}


@pytest.mark.parametrize("name", sorted(FASTGEN))
def test_each_fastgen_shape_is_found_by_name_with_its_means(name: str) -> None:
    shape = find_shape(name)
    assert (shape.name, shape.prompt_mean, shape.output_mean) == (name, *FASTGEN[name])


@pytest.mark.parametrize("name", ["fastgen-1200", "FASTGEN-1200-128", "", "sharegpt"])
def test_any_other_workload_is_refused_naming_both(name: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        find_shape(name)
    text = str(refused.value)
    assert text.startswith("--workload: ") and all(known in text for known in FASTGEN)


@given(st.sampled_from(sorted(FASTGEN)), st.integers(64, 1 << 17))
def test_the_means_scale_with_the_context(name: str, context: int) -> None:
    prompt, output = FASTGEN[name]
    assert scaled_means(find_shape(name), context) == pytest.approx(
        (prompt * context / 4096, output * context / 4096)
    )


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(FASTGEN)), st.integers(16, 8192), st.integers(0, 2**32 - 1))
def test_every_request_fits_its_context_and_the_seed_alone_decides_them(
    name: str, context: int, seed: int
) -> None:
    drawn = draw_lengths(find_shape(name), context, 50, seed)
    assert len(drawn) == 50 and drawn == draw_lengths(find_shape(name), context, 50, seed)
    for request in drawn:
        assert request.output_tokens >= 8 and request.prompt_tokens >= 4
        assert request.prompt_tokens + request.output_tokens + 1 <= context
    assert drawn != draw_lengths(find_shape(name), context, 50, seed + 1)


@pytest.mark.parametrize("name", sorted(FASTGEN))
def test_lengths_spread_30_percent_around_the_scaled_means(name: str) -> None:
    """At 16 times FastGen's context nothing is clipped: 4,000 draws' means and spreads."""
    context = 16 * 4096
    drawn = draw_lengths(find_shape(name), context, 4000, seed=7)
    for lengths, mean in (
        ([r.prompt_tokens for r in drawn], FASTGEN[name][0] * 16),
        ([r.output_tokens for r in drawn], FASTGEN[name][1] * 16),
    ):
        assert statistics.fmean(lengths) == pytest.approx(mean, rel=0.03)
        assert statistics.stdev(lengths) / mean == pytest.approx(0.3, rel=0.1)


def test_a_prompt_is_clipped_to_exactly_the_room_left_and_never_under_4_tokens() -> None:
    """A context so small that draws fall outside both bounds: some prompts sit on each bound,
    none beyond."""
    long = draw_lengths(find_shape("fastgen-2600-60"), 64, 2000, seed=3)
    assert max(r.prompt_tokens - (64 - r.output_tokens - 1) for r in long) == 0
    short = draw_lengths(find_shape("fastgen-1200-128"), 16, 2000, seed=3)
    assert min(r.prompt_tokens for r in short) == 4
    assert min(r.output_tokens for r in long) == 8
