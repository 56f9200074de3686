"""The per-step timer ``generate`` calls as its stopping criterion: a synchronised mark at every
step boundary (prefill, then each decode step), never a stop, and no allocation per step."""

from __future__ import annotations

import itertools

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM

from bloomperf.measure import steptimer
from bloomperf.measure.steptimer import StepTimer


class Clock:
    """A clock that moves 1, 2, 3, ... seconds per read, and notes each read after a sync."""

    def __init__(self) -> None:
        self.reads = itertools.accumulate(itertools.count(0))
        self.events: list[str] = []

    def sync(self) -> None:
        self.events.append("sync")

    def read(self) -> float:
        self.events.append("read")
        return float(next(self.reads))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(steptimer.time, "perf_counter", fake.read)
    return fake


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_each_step_is_the_time_since_the_previous_mark_each_after_a_sync(
    clock: Clock, steps: int
) -> None:
    timer = StepTimer(clock.sync)
    assert timer.start() == 0.0
    ids = torch.zeros((3, 5), dtype=torch.long)
    for _ in range(steps):
        assert not timer(ids, None).any()
    # Marks at 0, 1, 3, 6, 10 s: steps of 1, 2, 3, 4 s.
    assert timer.step_ms() == [1000.0 * (k + 1) for k in range(steps)]
    assert clock.events == ["sync", "read"] * (steps + 1)
    assert timer.start() == sum(range(steps + 2)) and timer.step_ms() == []  # a fresh cycle


def test_the_never_stop_answer_is_kept_per_batch_and_device(clock: Clock) -> None:
    timer = StepTimer(clock.sync)
    timer.start()
    three, two = torch.zeros((3, 4), dtype=torch.long), torch.zeros((2, 4), dtype=torch.long)
    first = timer(three, None)
    assert timer(three, None) is first and first.dtype == torch.bool and first.shape == (3,)
    other = timer(two, None)
    assert other is not first and other.shape == (2,) and not other.any()
    meta = timer(torch.zeros((2, 4), dtype=torch.long, device="meta"), None)
    assert meta.device.type == "meta" and meta.shape == (2,)
    assert timer(two, None) is not other  # the last shape and device are the ones kept


def test_generate_marks_the_prefill_and_every_decode_step_and_never_stops_early() -> None:
    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=16, n_layer=1, n_head=2))
    syncs: list[int] = []
    timer = StepTimer(lambda: syncs.append(1))
    start = timer.start()
    ids = torch.randint(0, 64, (2, 3))
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=6,
        min_new_tokens=6,
        do_sample=False,
        stopping_criteria=timer.criteria(),
        pad_token_id=0,
    )
    assert out.shape == (2, 9)
    steps = timer.step_ms()
    assert len(steps) == 6 and len(syncs) == 7 and all(s >= 0 for s in steps)
    assert timer.marks[0] == start and sum(steps) == pytest.approx((timer.marks[-1] - start) * 1000)
