"""The output check's verdict and message: which rows are not finite, and their padding."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bloomperf.harness.output_check import (
    ROWS_NAMED,
    GarbageOutput,
    check_logits,
    check_new_tokens,
)


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
    listed = ", ".join(f"row {r} ({named[r]} pad tokens)" for r in sorted(named))
    assert f"rows: {listed}" in message
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


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 4),
    columns=st.integers(1, 5),
    ids=st.lists(st.integers(0, 3), min_size=20, max_size=20),
)
@example(rows=2, columns=3, ids=[2] * 20)  # garbage
@example(rows=1, columns=1, ids=[2] * 20)  # one token: nothing to tell
@example(rows=2, columns=3, ids=[2] * 5 + [3] * 15)  # the last token differs
def test_new_tokens_are_garbage_exactly_when_more_than_one_and_all_the_same_id(
    rows: int, columns: int, ids: list[int]
) -> None:
    """One token alone says nothing; two or more all of one id, in any row, is the symptom of
    a kernel that writes nothing (the message says how many and which id)."""
    tokens = torch.tensor(ids[: rows * columns]).reshape(rows, columns)
    same = len(set(ids[: rows * columns])) == 1
    if rows * columns > 1 and same:
        with pytest.raises(GarbageOutput) as raised:
            check_new_tokens(tokens)
        assert str(raised.value) == (
            f"garbage output: all {rows * columns} new tokens are id {ids[0]}"
        )
    else:
        check_new_tokens(tokens)


@pytest.mark.parametrize("spoilt", [ROWS_NAMED - 1, ROWS_NAMED, ROWS_NAMED + 1, 3 * ROWS_NAMED])
def test_rows_past_the_eighth_are_counted_not_named(spoilt: int) -> None:
    logits = torch.zeros(3 * ROWS_NAMED, 2)
    logits[:spoilt, 0] = float("nan")
    with pytest.raises(GarbageOutput) as raised:
        check_logits(logits)
    named = ", ".join(f"row {r}" for r in range(min(spoilt, ROWS_NAMED)))
    more = f" and {spoilt - ROWS_NAMED} more" if spoilt > ROWS_NAMED else ""
    assert str(raised.value).endswith(f"in {spoilt} of {3 * ROWS_NAMED} rows: {named}{more}")
