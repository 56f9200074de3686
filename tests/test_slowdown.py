"""The injected slowdown makes each call the asked-for percentage slower, and waits precisely."""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
import torch

from bloomperf.core.errors import BloomperfError
from bloomperf.measure import slowdown
from bloomperf.measure.slowdown import install_slowdown, wait_for

PERCENT = 10.0  # as benchmarks/detection_power.py injects; not 100, where the wait equals the call
UNDISTURBED_WAITS = 15


class Sleeper(torch.nn.Module):
    """A forward pass of a known duration, each one's own length recorded from inside."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.linear = torch.nn.Linear(4, 4)
        self.inner_seconds: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        time.sleep(self.seconds)
        out: torch.Tensor = self.linear(x)
        self.inner_seconds.append(time.perf_counter() - start)
        return out


def seconds_of(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every delay the slowdown asks wait_for for; the real wait_for still waits it. A delay
    compared with the wrapped call's own inner duration is exact on any machine, where a whole
    slowed call timed from outside also holds the load's run-queue waits (measured here at
    load 10: up to 20 ms after a 30 ms generate, a +10 % slowdown read as +77 %)."""
    asked: list[float] = []

    def recorded_wait_for(seconds: float) -> None:
        asked.append(seconds)
        wait_for(seconds)

    monkeypatch.setattr(slowdown, "wait_for", recorded_wait_for)
    return asked


def assert_stretched(
    inner: list[float], delays: list[float], outer: list[float], percent: float
) -> None:
    """One delay per call, ``percent`` of that call's own duration, and each call really lasted
    that much longer (never less; any more is the machine's, see test_wait_for_is_precise).
    The median share: a call preempted between the wrapper's clock and the call's own also
    counts the other process's turn (a few ms, now and then, on a loaded machine)."""
    assert len(delays) == len(inner)
    shares = [delay / seconds for delay, seconds in zip(delays, inner, strict=True)]
    assert statistics.median(shares) == pytest.approx(percent / 100.0, rel=0.01), shares
    for seconds, delay, total in zip(
        inner[-len(outer) :], delays[-len(outer) :], outer, strict=True
    ):
        assert total >= seconds + delay


@pytest.fixture
def one_thread() -> Iterator[None]:
    # Two intra-op threads on two busy cores spin against each other (generate then takes 30x
    # longer); one thread measures the model, not the scheduler.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("percent", [5.0, 10.0, 50.0])
def test_forward_takes_percent_longer(percent: float, delays: list[float]) -> None:
    slowed = Sleeper(0.02)
    install_slowdown(slowed, percent)
    x = torch.ones(2, 4)
    outer = [seconds_of(lambda: slowed(x)) for _ in range(5)]
    assert_stretched(slowed.inner_seconds, delays, outer, percent)


def test_output_is_unchanged() -> None:
    model = Sleeper(0.0)
    x = torch.randn(3, 4)
    before = model(x)
    install_slowdown(model, 20.0)
    assert torch.equal(model(x), before)


def test_real_bloom_generate_takes_percent_longer(one_thread: None, delays: list[float]) -> None:
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    config = BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4)
    plain = BloomForCausalLM(config).eval()
    slowed = copy.deepcopy(plain)
    inner: list[float] = []  # each real generate's own duration, inside the slowed one
    real_generate = slowed.generate

    def timed_generate(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        output = real_generate(*args, **kwargs)
        inner.append(time.perf_counter() - start)
        return output

    slowed.generate = timed_generate
    install_slowdown(slowed, PERCENT)
    ids = torch.randint(4, 1000, (4, 8))
    kwargs = {
        "attention_mask": torch.ones_like(ids),
        "max_new_tokens": 10,
        "min_new_tokens": 10,
        "do_sample": False,
        "pad_token_id": 3,
    }
    with torch.inference_mode():
        assert torch.equal(slowed.generate(ids, **kwargs), plain.generate(ids, **kwargs))
        outer = [seconds_of(lambda: slowed.generate(ids, **kwargs)) for _ in range(5)]
    # The whole call is stretched by PERCENT of itself, once: not by the whole call (what a
    # 100 % slowdown would hide), nor per forward pass (a fifth of generate's time here).
    assert_stretched(inner, delays, outer, PERCENT)


def test_zero_percent_installs_nothing() -> None:
    model = Sleeper(0.0)
    install_slowdown(model, 0.0)
    assert not model._forward_hooks and not model._forward_pre_hooks


@pytest.mark.parametrize("bad", [-1.0, -1e-9, 1000.0001, 1e6, float("nan")])
def test_bad_percent_is_refused(bad: float) -> None:
    with pytest.raises(BloomperfError) as refused:
        install_slowdown(Sleeper(0.0), bad)
    assert str(refused.value) == f"slowdown_percent: must be between 0 and 1000, found {bad}"


def test_the_largest_percent_is_installed() -> None:
    """Both ends of the range are accepted: 0 installs nothing, 1000 (ten times) a hook."""
    model = Sleeper(0.0)
    install_slowdown(model, 1000.0)
    assert model._forward_hooks or model._forward_pre_hooks


@pytest.mark.parametrize("seconds", [0.0002, 0.003, 0.03])
def test_wait_for_is_precise(seconds: float) -> None:
    """Never short, and within microseconds when the machine lets it: judged on the waits during
    which this thread never waited for a CPU (the kernel's run-queue figures say which; at load
    10 on this 2-core VM, a third to a half of them), by their median (a VM's steal time is in
    no figure). A spun end overshoots by about 1 us, and by 10-20 us after a 30 ms sleep (a tick
    lands in the spin); a slept end by the thread's timer slack (50 us) and its wake-up: 89-272
    us seen here. The bound is the timer slack."""
    overshoots, undisturbed = [], []
    deadline = time.perf_counter() + 20.0
    while len(undisturbed) < UNDISTURBED_WAITS and time.perf_counter() < deadline:
        queue_before = run_queue_seconds()
        start = time.perf_counter()
        wait_for(seconds)
        overshoots.append(time.perf_counter() - start - seconds)
        if run_queue_seconds() == queue_before:
            undisturbed.append(overshoots[-1])
    assert min(overshoots) >= 0.0
    load = (
        f"{len(undisturbed)} of {len(overshoots)} waits never queued for a CPU; median "
        f"overshoot of all {statistics.median(overshoots) * 1e6:.0f} us; load {os.getloadavg()}"
    )
    assert len(undisturbed) == UNDISTURBED_WAITS, load
    assert statistics.median(undisturbed) < timer_slack_seconds(), load


def timer_slack_seconds() -> float:
    """How late the kernel may wake this process from a sleep (prctl's timer slack)."""
    with open("/proc/self/timerslack_ns") as slack:
        return int(slack.read()) / 1e9


def run_queue_seconds() -> float:
    """How long this thread has waited for a CPU so far: the kernel's schedstat run delay."""
    with open("/proc/thread-self/schedstat") as stats:
        return int(stats.read().split()[1]) / 1e9


def test_the_models_cuda_devices_are_each_gpu_holding_a_part_once_in_index_order() -> None:
    """Read from the parameters' devices (constructed here: no GPU is needed to name one)."""
    held = ["cuda:3", "cpu", "cuda:1", "meta", "cuda:3", "cuda"]
    model = SimpleNamespace(
        parameters=lambda: [SimpleNamespace(device=torch.device(d)) for d in held]
    )
    assert slowdown._cuda_devices(model) == [  # type: ignore[arg-type]
        torch.device("cuda"),
        torch.device("cuda", 1),
        torch.device("cuda", 3),
    ]
    assert slowdown._cuda_devices(torch.nn.Linear(2, 2)) == []


class Reentrant(torch.nn.Module):
    """Calls itself once from inside (a re-entered top module), advancing a clock of its own."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.depth = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.depth += 1
        self.clock[0] += 0.010
        if self.depth == 1:
            x = self(x)
        self.clock[0] += 0.030
        return x


def test_each_forward_waits_its_own_share_even_when_re_entered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    asked: list[float] = []
    monkeypatch.setattr(slowdown, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(slowdown, "wait_for", asked.append)
    model = Reentrant(clock)
    install_slowdown(model, 50.0)
    model(torch.ones(1))
    # The inner call lasted 40 ms, the outer one 80 ms (its own 40 and the inner call's).
    assert asked == pytest.approx([0.020, 0.040], abs=1e-9)


class FakeClock:
    """perf_counter that moves 0.1 ms per reading, and sleep that moves it by what it is asked."""

    def __init__(self) -> None:
        self.now = 50.0
        self.slept: list[float] = []
        self.readings = 0

    def perf_counter(self) -> float:
        self.now += 1e-4
        self.readings += 1
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("seconds", [0.0, 0.0005, slowdown.SPIN_SECONDS, 0.01, 0.25])
def test_a_wait_sleeps_all_but_its_last_moments_and_spins_those(
    monkeypatch: pytest.MonkeyPatch, seconds: float
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(slowdown, "time", clock)
    start = clock.now
    wait_for(seconds)
    spin = slowdown.SPIN_SECONDS
    assert clock.slept == ([seconds - spin] if seconds > spin else [])
    assert clock.now >= start + seconds  # never less than asked
    spun = clock.readings - 1  # the first reading sets the end
    assert spun <= (min(seconds, spin) / 1e-4) + 2  # and no reading more than it takes
