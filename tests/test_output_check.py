"""The output check's verdict and message: which rows are not finite, and their padding."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.harness.output_check import ROWS_NAMED, GarbageOutput, check_logits


@st.composite
def batches(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, set[int]]:
    """Next-token logits of a left-padded batch, some rows spoilt, and which."""
    rows, vocab = draw(st.integers(1, 20)), draw(st.integers(1, 6))
    logits = torch.randn(rows, vocab)
    bad = draw(st.sets(st.integers(0, rows - 1)))
    for row in bad:
        column = draw(st.integers(0, vocab - 1))
        logits[row, column] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    pads = draw(st.lists(st.integers(0, 5), min_size=rows, max_size=rows))
    mask = torch.tensor([[0] * p + [1] * (6 - p) for p in pads])
    return logits, mask, bad


@settings(max_examples=60, deadline=None)
@given(batches())
def test_the_message_names_each_spoilt_row_and_its_pad_tokens(
    batch: tuple[torch.Tensor, torch.Tensor, set[int]],
) -> None:
    logits, mask, bad = batch
    if not bad:
        check_logits(logits, mask)
        return
    with pytest.raises(GarbageOutput) as raised:
        check_logits(logits, mask)
    message = str(raised.value)
    count = int((~torch.isfinite(logits)).sum())
    assert message.startswith(
        f"garbage output: {count} of {logits.numel()} next-token logits are NaN or infinite, "
        f"in {len(bad)} of {logits.shape[0]} rows: "
    )
    named = {int(r): int(p) for r, p in re.findall(r"row (\d+) \((\d+) pad tokens\)", message)}
    assert named == {r: int((mask[r] == 0).sum()) for r in sorted(bad)[:ROWS_NAMED]}
    rest = len(bad) - ROWS_NAMED
    assert message.endswith(f" and {rest} more") == (rest > 0)


def test_without_the_mask_the_rows_are_named_alone() -> None:
    logits = torch.zeros(3, 4)
    logits[1, 2] = float("nan")
    with pytest.raises(GarbageOutput, match=r"1 of 12 .*, in 1 of 3 rows: row 1$"):
        check_logits(logits)


def test_logits_of_another_shape_are_counted_without_rows() -> None:
    logits = torch.zeros(2, 3, 4)
    logits[0, 0, 0] = float("inf")
    with pytest.raises(GarbageOutput, match=r"^garbage output: 1 of 24 next-token logits [^,]*$"):
        check_logits(logits)
