"""The measurement protocol, observed: every call the worker makes, in order.

A test backend (a real ``Backend`` subclass, registered in the backend registry for the test)
records each call the worker makes of it; the clock, the tokenizer, the input builder, tensor
allocations and every log line or print are recorded into the same list. The controller's own
cycle loops (``measure_plainly``, and the plugin's pytest-benchmark ``pedantic`` loop) drive the
worker as they do in a run. The tests assert:

* warm-up cycles first, then the measured cycles, and only the measured cycles' times come back;
* each cycle is: synchronise, clock, generate, synchronise, clock; inside ``generate`` only the
  step timer's synchronise-and-clock at each step boundary;
* nothing else inside the timed region: no tokenisation, no input building or allocation, no
  logging or printing.

Then the same recorder runs under the real accelerate backend on the tiny model.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._device import _device_constructors as device_constructors

from bloomperf import backends
from bloomperf.backends.accelerate import AccelerateBackend
from bloomperf.backends.base import Backend, LoadRequest
from bloomperf.catalog import workload
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.harness import worker as worker_module
from bloomperf.harness.protocol import OP_BEGIN, OP_CYCLE, OP_END, WorkerSpec
from bloomperf.harness.runner import measure_plainly
from bloomperf.harness.worker import Worker
from bloomperf.measure.rank_peaks import reset_own_peak
from bloomperf.plugin import pedantic_measure

NEW_TOKENS = 5
EVENTS: list[str] = []  # every recorded call, in order (one test at a time uses it)
OUTSIDE_GENERATE_ALLOWED = ("sync", "clock")


def record(name: str) -> None:
    EVENTS.append(name)


class Recording:
    """The calls a backend gets from the worker, recorded (mixed into a real backend)."""

    def synchronize(self) -> None:
        super().synchronize()  # type: ignore[misc]
        record("sync")

    def generate(self, *args: Any) -> torch.Tensor:
        record("generate")
        output: torch.Tensor = super().generate(*args)  # type: ignore[misc]
        record("generated")
        return output

    def prepare(self, request: LoadRequest) -> None:
        record("prepare")
        super().prepare(request)  # type: ignore[misc]

    def load(self, request: LoadRequest) -> None:
        record("load")
        super().load(request)  # type: ignore[misc]
        record("loaded")

    def next_token_logits(self, *args: Any) -> torch.Tensor:
        record("check")
        logits: torch.Tensor = super().next_token_logits(*args)  # type: ignore[misc]
        return logits


class CountingBackend(Backend):
    """A backend without a model: each step of ``generate`` picks the next token as a function
    of the previous one and calls the stopping criteria as transformers' generate does."""

    name = "counting"
    dtypes = ("fp32",)

    def prepare(self, request: LoadRequest) -> None:
        """Nothing to import."""

    def load(self, request: LoadRequest) -> None:
        self.model = "counting"
        self._device = torch.device("cpu")
        self.vocab = 250

    def generate(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generate_kwargs: dict[str, Any]
    ) -> torch.Tensor:
        criteria = generate_kwargs["stopping_criteria"]
        tokens = input_ids
        for _ in range(generate_kwargs["max_new_tokens"]):
            following = (tokens[:, -1:] * 7 + 3) % self.vocab
            tokens = torch.cat([tokens, following], dim=1)
            criteria(tokens, None)
        return tokens

    def next_token_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        return torch.linspace(0.0, 1.0, input_ids.shape[0] * self.vocab).reshape(-1, self.vocab)


class RecordingCounting(Recording, CountingBackend):
    name = "recording-counting"


class RecordingAccelerate(Recording, AccelerateBackend):
    name = "recording-accelerate"


REGISTERED = {
    "recording-counting": f"{__name__}:RecordingCounting",
    "recording-accelerate": f"{__name__}:RecordingAccelerate",
}


class RecordingStream:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        record("write")
        return int(self.stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class RecordingHandler(logging.Handler):
    def emit(self, record_: logging.LogRecord) -> None:
        record("log")


class RecordingTokenizer:
    """The real tokenizer, with each use recorded."""

    def __init__(self, tokenizer: Any) -> None:
        self.__dict__["tokenizer"] = tokenizer

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        record("tokenize")
        return self.tokenizer(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.tokenizer, name)
        if callable(attribute):
            record("tokenize")
        return attribute

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.tokenizer, name, value)


def recorded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        record(name)
        return function(*args, **kwargs)

    return call


ALLOCATIONS = ("tensor", "zeros", "ones", "empty", "full", "cat", "stack", "as_tensor", "arange")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    for name, where in REGISTERED.items():
        monkeypatch.setitem(backends.BACKEND_CLASSES, name, where)
    clock = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", recorded("clock", clock))
    monkeypatch.setattr(workload, "build_inputs", recorded("inputs", workload.build_inputs))
    # torch caches the factory functions a `with torch.device(...)` block redirects, once per
    # process: filled while they are patched, it would hold the wrappers, and later in this
    # process every meta-device model (the planners') would be built for real, 14 GB for the
    # 176B's embedding alone. Filled here, before the patch, it keeps torch's own.
    device_constructors()
    for name in ALLOCATIONS:
        monkeypatch.setattr(torch, name, recorded("alloc", getattr(torch, name)))
    # The cell's memory phase starts where the worker resets the peaks: recorded, so that a
    # test can see that nothing the cell's preparation allocates falls inside it.
    monkeypatch.setattr(worker_module, "reset_own_peak", recorded("reset-peak", reset_own_peak))
    monkeypatch.setattr(torch.Tensor, "to", recorded("alloc", torch.Tensor.to))
    monkeypatch.setattr(torch.Tensor, "clone", recorded("alloc", torch.Tensor.clone))
    monkeypatch.setattr(sys, "stdout", RecordingStream(sys.stdout))
    monkeypatch.setattr(sys, "stderr", RecordingStream(sys.stderr))
    handler = RecordingHandler(logging.DEBUG)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    EVENTS.clear()
    yield EVENTS
    root.removeHandler(handler)
    root.setLevel(level)
    EVENTS.clear()


@pytest.fixture(scope="module")
def tiny() -> Path:
    return resolve_model("tiny").path


def started_worker(backend: str, checkpoint: Path) -> Worker:
    spec = WorkerSpec(backend, "fp32", str(checkpoint), "cpu", new_tokens=NEW_TOKENS, control="")
    worker = Worker(spec)
    assert type(worker.backend).name == backend  # the registry's class, as a run would get
    worker.load()
    worker.tokenizer = RecordingTokenizer(worker.tokenizer)
    return worker


def timed_cycles(
    worker: Worker, measure: Callable[[Callable[[], float], int, int], list[float]], warmup: int
) -> tuple[list[float], list[float], list[list[str]]]:
    """A cell as the controller runs it: (every cycle's seconds, those returned, each cycle's
    recorded calls)."""
    every: list[float] = []
    calls: list[list[str]] = []

    def one_cycle() -> float:
        EVENTS.clear()
        seconds = float(worker.act(OP_CYCLE, 2)["seconds"])
        calls.append(list(EVENTS))
        every.append(seconds)
        return seconds

    worker.act(OP_BEGIN, 2)
    returned = measure(one_cycle, warmup, 3)
    worker.act(OP_END, 2)
    return every, returned, calls


def timed_region(calls: list[str]) -> list[str]:
    """The calls from the cycle's first clock read to its last."""
    first = calls.index("clock")
    last = len(calls) - 1 - calls[::-1].index("clock")
    return calls[first : last + 1]


def check_cycle(calls: list[str]) -> None:
    assert calls[:3] == ["sync", "clock", "generate"], calls
    region = timed_region(calls)
    start, end = region.index("generate"), region.index("generated")
    assert region[start + 1 : end].count("generate") == 0
    # Outside generate: synchronise, clock before it; synchronise, clock after it. Nothing else.
    assert region[:start] == ["clock"], region
    assert region[end:] == ["generated", "sync", "clock"], region
    inside = region[start + 1 : end]
    # Inside: the step timer's synchronise and clock at each step boundary, one per new token;
    # whatever the model itself allocates, never a tokenizer, an input builder or a log line.
    marks = [c for c in inside if c in OUTSIDE_GENERATE_ALLOWED]
    assert marks == ["sync", "clock"] * NEW_TOKENS, inside
    assert not {"tokenize", "inputs", "log", "write", "check"} & set(inside), inside


# Disabled, the fixture times nothing (the cycles are run by hand): its warning says just that.
@pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")
@pytest.mark.parametrize("loop", ["run", "plugin", "plugin --benchmark-disable"])
@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_warm_up_cycles_come_first_and_only_measured_cycles_are_returned(
    recorder: list[str], tiny: Path, request: pytest.FixtureRequest, loop: str, warmup: int
) -> None:
    """`run`'s plain loop and the plugin's pytest-benchmark loop alike, the latter also as
    ``--benchmark-disable`` leaves it (the fixture's own ``disabled`` flag set)."""
    worker = started_worker("recording-counting", tiny)
    measure = measure_plainly
    if loop != "run":
        benchmark = request.getfixturevalue("benchmark")
        benchmark.disabled = loop.endswith("--benchmark-disable")
        measure = pedantic_measure(benchmark)
    every, returned, calls = timed_cycles(worker, measure, warmup)
    assert len(every) == warmup + 3 and len(calls) == warmup + 3
    assert returned == every[warmup:]
    for cycle in calls:
        check_cycle(cycle)


def test_the_cell_is_prepared_outside_any_cycle(recorder: list[str], tiny: Path) -> None:
    worker = started_worker("recording-counting", tiny)
    EVENTS.clear()
    worker.act(OP_BEGIN, 3)
    prepared = list(EVENTS)
    assert "inputs" in prepared and "tokenize" in prepared and "check" in prepared
    # The peaks are reset once, after everything the preparation does (the inputs, the output
    # check's forward pass): the cell's peak is its cycles', not its preparation's.
    assert prepared.count("reset-peak") == 1 and prepared[-1] == "reset-peak", prepared
    assert worker.inputs["input_ids"].shape[0] == 3
    EVENTS.clear()
    reply = worker.act(OP_CYCLE, 3)
    check_cycle(list(EVENTS))
    assert len(reply["step_ms"]) == NEW_TOKENS
    # The step times add up to the cycle (the step timer's first mark is the cycle's start).
    assert sum(reply["step_ms"]) / 1000.0 <= reply["seconds"]


@pytest.mark.parametrize("backend", ["recording-counting", "recording-accelerate"])
def test_the_load_time_covers_the_backends_load_and_nothing_else(
    recorder: list[str], tiny: Path, backend: str
) -> None:
    """Imports and preparation (``prepare``) come before the clock; the clock reads bracket
    ``load`` alone, each after a synchronisation."""
    spec = WorkerSpec(backend, "fp32", str(tiny), "cpu", new_tokens=NEW_TOKENS, control="")
    worker = Worker(spec)
    EVENTS.clear()
    seconds = worker.load()
    region = timed_region(list(EVENTS))
    # Whatever the backend's own load allocates lies between "load" and "loaded".
    assert region[:2] == ["clock", "load"] and region[-3:] == ["loaded", "sync", "clock"], EVENTS
    assert region.count("clock") == 2 and "prepare" not in region, EVENTS
    before = EVENTS[: EVENTS.index("clock")]
    assert "prepare" in before and before[-1] == "sync", EVENTS
    assert seconds > 0


def test_the_same_protocol_under_the_real_accelerate_backend(
    recorder: list[str], tiny: Path
) -> None:
    worker = started_worker("recording-accelerate", tiny)
    every, returned, calls = timed_cycles(worker, measure_plainly, 1)
    assert len(calls) == 4 and returned == every[1:]
    for cycle in calls:
        check_cycle(cycle)
