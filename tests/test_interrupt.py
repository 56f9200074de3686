"""SIGTERM, SIGHUP and SIGQUIT inside ``sigterm_as_interrupt``: each raises ``Terminated`` (a
KeyboardInterrupt, so Ctrl-C's cleanup runs) naming the signal, a second stop signal during
that cleanup is ignored, the handlers from before come back at the block's end, and a block
outside the main thread changes nothing. ``interruption`` says what stopped the run and exits
128 + the signal's number, as a shell reports it. In process: the signals are raised at this
test's own interpreter."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from bloomperf.core.interrupt import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    interruption,
    sigterm_as_interrupt,
)

STOPS = [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]


@pytest.fixture(autouse=True)
def own_handlers() -> Iterator[list[int]]:
    """Each stop signal with a handler of this test's, put back as it was afterwards."""
    seen: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    before = {stop: signal.signal(stop, note) for stop in STOPS}
    yield seen
    for stop, handler in before.items():
        signal.signal(stop, handler)


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
def test_a_stop_signal_raises_terminated_naming_it(stop: signal.Signals) -> None:
    with pytest.raises(Terminated) as raised, sigterm_as_interrupt():
        signal.raise_signal(stop)
    assert isinstance(raised.value, KeyboardInterrupt)
    assert raised.value.signum == stop and str(raised.value) == stop.name


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
def test_a_second_stop_signal_during_the_cleanup_is_ignored(
    stop: signal.Signals, own_handlers: list[int]
) -> None:
    cleaned = False
    with pytest.raises(Terminated), sigterm_as_interrupt():
        try:
            signal.raise_signal(stop)
        finally:
            for again in STOPS:
                signal.raise_signal(again)  # no Terminated here, and no handler of ours
            cleaned = True
    assert cleaned and own_handlers == []


def test_the_handlers_from_before_the_block_come_back(own_handlers: list[int]) -> None:
    with sigterm_as_interrupt():
        pass
    for stop in STOPS:
        signal.raise_signal(stop)
    assert own_handlers == STOPS
    with pytest.raises(Terminated), sigterm_as_interrupt():
        signal.raise_signal(signal.SIGHUP)
    signal.raise_signal(signal.SIGTERM)
    assert own_handlers == [*STOPS, signal.SIGTERM]


def test_outside_the_main_thread_the_block_changes_no_handler() -> None:
    handlers: list[object] = []

    def enter() -> None:
        with sigterm_as_interrupt():
            handlers.extend(signal.getsignal(stop) for stop in STOPS)

    before = [signal.getsignal(stop) for stop in STOPS]
    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert handlers == before


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
def test_a_terminated_run_says_the_signal_and_exits_128_plus_its_number(
    stop: signal.Signals,
) -> None:
    assert interruption(Terminated(stop)) == (f"terminated ({stop.name})", 128 + int(stop))


def test_ctrl_c_is_interrupted_with_130_and_a_bare_terminated_is_sigterm() -> None:
    assert interruption(KeyboardInterrupt()) == ("interrupted", 130) and EXIT_INTERRUPTED == 130
    assert Terminated().signum == signal.SIGTERM and EXIT_TERMINATED == 143
    assert interruption(Terminated()) == ("terminated (SIGTERM)", 143)
