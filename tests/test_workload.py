"""The blog's workload in the real worker (in-process, tiny model on CPU): the batch is in the
inputs, exactly N new tokens even when the model meets EOS at once, a short output is refused."""

from __future__ import annotations

import pytest

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.harness.protocol import WorkerSpec
from bloomperf.harness.worker import Worker

NEW_TOKENS = 8


@pytest.fixture(scope="module")
def worker() -> Worker:
    tiny = resolve_model("tiny").path  # the suite's cache (conftest.py)
    spec = WorkerSpec("accelerate", "fp32", str(tiny), "cpu", new_tokens=NEW_TOKENS, control="")
    worker = Worker(spec)
    worker.load()
    return worker


def eos_at_first_step(worker: Worker) -> int:
    """Make the model's first greedy token of batch 1 its EOS token; return the old EOS id."""
    worker.begin(1)
    model = worker.backend.model
    first = model.generate(**worker.inputs, max_new_tokens=1, do_sample=False)[0, -1]
    old = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = int(first)
    return int(old)


def test_the_batch_is_in_the_inputs(worker: Worker) -> None:
    for batch in (1, 3):
        worker.begin(batch)
        assert worker.inputs["input_ids"].shape[0] == batch
        assert worker.cycle()["seconds"] > 0


def test_exactly_n_tokens_even_when_the_model_meets_eos_at_once(worker: Worker) -> None:
    old = eos_at_first_step(worker)
    try:
        # Without min_new_tokens, generate would stop after 1 token; the cycle would then
        # either fail or cost 1 token while ms/token counts N.
        assert worker.cycle()["seconds"] > 0
    finally:
        worker.backend.model.generation_config.eos_token_id = old


def test_an_output_short_of_n_tokens_fails_the_cycle(worker: Worker) -> None:
    old = eos_at_first_step(worker)
    forced = worker.generate_kwargs.pop("min_new_tokens")
    try:
        with pytest.raises(RuntimeError, match=f"produced 1 tokens instead of {NEW_TOKENS}"):
            worker.cycle()
    finally:
        worker.generate_kwargs["min_new_tokens"] = forced
        worker.backend.model.generation_config.eos_token_id = old


def test_workload_forces_min_new_tokens() -> None:
    from bloomperf.catalog.workload import generate_kwargs

    kwargs = generate_kwargs(100)
    assert kwargs["min_new_tokens"] == kwargs["max_new_tokens"] == 100
    assert kwargs["do_sample"] is False


def test_the_timed_region_lies_between_two_synchronisations(worker: Worker) -> None:
    # Spies around the real methods (they still run): the order of calls inside one cycle.
    calls: list[str] = []
    backend = worker.backend
    real_sync, real_generate = backend.synchronize, backend.generate

    def synchronize() -> None:
        calls.append("synchronize")
        real_sync()

    def generate(*args: object) -> object:
        calls.append("generate")
        output = real_generate(*args)  # type: ignore[arg-type]
        calls.append("generated")
        return output

    worker.begin(1)
    backend.synchronize, backend.generate = synchronize, generate  # type: ignore[method-assign]
    try:
        worker.cycle()
    finally:
        del backend.synchronize, backend.generate
    # The step timer synchronises at each step boundary inside generate, before its clock read.
    steps = ["synchronize"] * NEW_TOKENS
    assert calls == ["synchronize", "generate", *steps, "generated", "synchronize"]


def test_ms_per_token_divides_by_every_token_of_the_batch() -> None:
    from bloomperf.catalog.workload import ms_per_token

    # The blog's metric: 8 rows x 100 new tokens in 2 s is 2.5 ms per token.
    assert ms_per_token(2.0, 8, 100) == pytest.approx(2.5)
    assert ms_per_token(2.0, 1, 100) == pytest.approx(20.0)


@pytest.mark.parametrize("batch", [1, 3, 8, 11, 20])
def test_each_row_is_the_blogs_prompt_in_turn_left_padded(worker: Worker, batch: int) -> None:
    """Row i holds prompt i mod 8 of the blog's scripts, its padding on the left: the last
    position of every row is a real token, so generation continues each prompt itself."""
    from bloomperf.catalog.workload import PROMPTS

    worker.begin(batch)
    ids, mask = worker.inputs["input_ids"], worker.inputs["attention_mask"]
    rows = [
        worker.tokenizer.decode(row[m.bool()], skip_special_tokens=True)
        for row, m in zip(ids, mask, strict=True)
    ]
    assert rows == [PROMPTS[i % len(PROMPTS)] for i in range(batch)]
    assert bool(mask[:, -1].all())
    # Left padding: within a row, once a real token starts, no padding follows.
    assert bool((mask[:, 1:] >= mask[:, :-1]).all())
    assert bool(mask.all()) == (batch == 1)  # rows of unequal length: padding to place
