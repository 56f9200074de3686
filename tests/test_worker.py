"""The worker's own path, in process on the tiny model: what the timed cycle synchronises, the
devices it waits for, and the output check that keeps garbage from being timed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from bloomperf.backends.accelerate import AccelerateBackend
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import resolve_options
from bloomperf.harness.protocol import WorkerSpec
from bloomperf.harness.session import Session
from bloomperf.harness.worker import Worker
from bloomperf.store.results import Outcome

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def tiny() -> Path:
    return resolve_model("tiny").path


class RecordedAccelerate(AccelerateBackend):
    """The real accelerate backend, with the moments it synchronises and generates recorded."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def synchronize(self) -> None:
        super().synchronize()
        self.events.append(("synchronize", time.perf_counter()))

    def generate(self, *args: Any) -> torch.Tensor:
        self.events.append(("generate", time.perf_counter()))
        output = super().generate(*args)
        self.events.append(("generated", time.perf_counter()))
        return output

    def next_token_logits(self, *args: Any) -> torch.Tensor:
        self.events.append(("check", time.perf_counter()))
        return super().next_token_logits(*args)


def worker_for(checkpoint: Path) -> tuple[Worker, RecordedAccelerate]:
    spec = WorkerSpec(
        "accelerate", "fp32", str(checkpoint), "cpu", new_tokens=NEW_TOKENS, control=""
    )
    worker = Worker(spec)
    backend = RecordedAccelerate()
    worker.backend = backend
    return worker, backend


def test_a_cycle_synchronises_before_and_after_generate_and_times_only_that(tiny: Path) -> None:
    worker, backend = worker_for(tiny)
    worker.load()
    worker.begin(2)
    assert [name for name, _ in backend.events][-1] == "check"  # the output check: in begin
    backend.events.clear()
    seconds = float(worker.cycle()["seconds"])
    names = [name for name, _ in backend.events]
    # Synchronised before generate starts and after it returns (and at every step boundary
    # in between: the step timer's marks); nothing else runs inside the timed span.
    assert names[:2] == ["synchronize", "generate"]
    assert names[-2:] == ["generated", "synchronize"]
    assert set(names[2:-2]) == {"synchronize"} and len(names[2:-2]) == NEW_TOKENS
    (_, synced), (_, started) = backend.events[:2]
    (_, finished), (_, synced_after) = backend.events[-2:]
    # The timed span runs from the first synchronisation to the last: generate inside it.
    assert finished - started <= seconds <= synced_after - synced + 0.01


def spread_over_two_gpus(tiny: Path) -> torch.nn.Module:
    """The tiny model on the meta device with the device map accelerate's own planner gives it
    over two small "GPUs", as from_pretrained(device_map=...) leaves it on a dispatched model."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(tiny)))
    model.tie_weights()
    device_map = infer_auto_device_map(
        model,
        max_memory={0: "600KB", 1: "600KB", "cpu": "1GB"},
        no_split_module_classes=["BloomBlock"],
    )
    assert set(device_map.values()) >= {0, 1}
    model.hf_device_map = device_map
    return model


def test_the_devices_synchronised_are_every_gpu_of_accelerates_map(tiny: Path) -> None:
    model = spread_over_two_gpus(tiny)
    backend = AccelerateBackend()
    backend.model = model
    backend._device = torch.device("cuda:0")
    assert backend.cuda_devices() == (0, 1)
    backend = AccelerateBackend()
    backend.model, backend._device = model, torch.device("cpu")
    model.hf_device_map = {"transformer": "cpu", "lm_head": "disk"}
    assert backend.cuda_devices() == ()


def test_synchronize_waits_for_each_gpu_of_the_model(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Backend.synchronize asks of CUDA for a model spread over GPUs 0 and 1: a wait for
    each (torch.cuda.synchronize() alone waits for the current device; a timer read after it
    misses the other GPU's queued kernels). No GPU here, so torch.cuda's answers are recorded;
    test_synchronize_waits_for_queued_kernels proves the wait itself on a GPU."""
    backend = AccelerateBackend()
    backend.model, backend._device = spread_over_two_gpus(tiny), torch.device("cuda:0")
    waited: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    backend.synchronize()
    assert waited == [0, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_synchronize_waits_for_queued_kernels() -> None:
    backend = AccelerateBackend()
    backend.model = torch.nn.Linear(2, 2).to("cuda:0")
    backend._device = torch.device("cuda:0")
    torch.cuda._sleep(10**9)  # about half a second of GPU cycles, queued: returns at once
    assert not torch.cuda.current_stream(0).query()
    backend.synchronize()
    assert torch.cuda.current_stream(0).query()


def degenerate_copy(tiny: Path, folder: Path, spoil: str) -> Path:
    """The tiny checkpoint with its weights made degenerate, saved as a real checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if spoil == "nan" and name.endswith("h.0.mlp.dense_4h_to_h.weight"):
                parameter.fill_(float("nan"))
            if spoil == "zero":
                parameter.zero_()  # every logit equal: greedy decoding emits id 0 forever
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        ("nan", "garbage output: 2048 of 2048 next-token logits are NaN or infinite"),
        ("zero", f"garbage output: all {2 * NEW_TOKENS} new tokens are id 0"),
    ],
)
def test_a_degenerate_model_is_an_error_and_never_timed(
    tiny: Path, tmp_path: Path, spoil: str, message: str
) -> None:
    checkpoint = degenerate_copy(tiny, tmp_path / spoil, spoil)
    options = resolve_options(
        {
            "model": str(checkpoint),
            "new_tokens": str(NEW_TOKENS),
            "cycles": "2",
            "dtypes": "fp32",
            "output": str(tmp_path / "r.json"),
        },
        env={},
    )
    session = Session.prepare(options)
    try:
        cell = session.measure_cell(Cell("accelerate", "fp32", 2))
    finally:
        session.stop()
    assert cell.outcome is Outcome.ERROR
    assert cell.message.startswith(f"GarbageOutput: {message}"), cell.message
    assert cell.samples_ms_per_token == ()
