"""Clients started ahead (``ClientPool``): each imports while nothing is timed, is held until a
rate hands it its arguments, runs exactly those once, and leaves its log in the rate's. The
stand-in below speaks the real script's protocol (``vllm_client.py --hold``) with a sleep for
vLLM's import; tests/test_serving.py and test_serving_ab.py run the real client this way."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.harness.interleave import Settings
from bloomperf.harness.loadgen import (
    MOST_AHEAD,
    RESULT_NAME,
    RUN_ENDS,
    RUN_STARTS,
    ClientCommand,
    ClientPool,
    run_client,
)
from bloomperf.harness.serve_ab import client_runs
from bloomperf.harness.sweep import SweepSpec
from bloomperf.harness.vllm_client import HOLD, READY
from bloomperf.store.serving import Sla
from tests.leftovers import wait_gone

# ARGV: RESULT_DIR TAG [EXIT_CODE]. Held (--hold): "imports" for IMPORT_S, then READY, then one
# JSON line of arguments. Writes its pid and arguments into the result, prints the run's marks.
STAND_IN = """
import json, os, sys, time
from pathlib import Path
HOLD, READY = {hold!r}, {ready!r}
argv = sys.argv[1:]
if argv == [HOLD]:
    print("importing", flush=True)
    time.sleep(float(os.environ.get("IMPORT_S", "0.3")))
    print(READY, flush=True)
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    argv = json.loads(line)
print({starts!r} + "...", flush=True)
result = {{"duration": 0.1, "errors": [], "pid": os.getpid(), "argv": argv}}
Path(argv[0], {name!r}).write_text(json.dumps(result))
print({ends!r}, flush=True)
sys.exit(int(argv[2]) if len(argv) > 2 else 0)
"""


def write_stand_in(folder: Path) -> Path:
    path = folder / "stand_in.py"
    marks = {"starts": RUN_STARTS.decode(), "ends": RUN_ENDS.decode()}
    path.write_text(STAND_IN.format(hold=HOLD, ready=READY, name=RESULT_NAME, **marks))
    return path


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return write_stand_in(tmp_path)


def command(script: Path, folder: Path, tag: str, code: int = 0) -> ClientCommand:
    return ClientCommand(sys.executable, (str(folder), tag, str(code)), script=script)


def ran(folder: Path) -> dict:
    return json.loads((folder / RESULT_NAME).read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@settings(max_examples=6, deadline=None)
@given(ahead=st.integers(0, 3), rates=st.integers(1, 4))
def test_each_rate_runs_its_own_arguments_once_in_a_client_held_or_fresh(
    tmp_path_factory: pytest.TempPathFactory, ahead: int, rates: int
) -> None:
    """Whatever the number held ahead, every rate runs once in a process of its own with the
    arguments it handed over: the first ``ahead`` in held clients (their pids), the rest
    started fresh; each rate's log holds its client's whole output and no held log is left."""
    tmp = tmp_path_factory.mktemp("pool")
    script = write_stand_in(tmp)
    with ClientPool(Path(sys.executable), tmp / "held", script=script) as pool:
        pool.start(ahead)
        held_pids = [c.process.pid for c in pool.held]
        pids = []
        for rate in range(rates):
            folder = tmp / f"rate-{rate}"
            folder.mkdir()
            wanted = command(script, folder, f"rate {rate}")
            held = pool.take(wanted, 30.0)
            run_client(wanted, folder, folder / "client.log", 30.0, held=held)
            result = ran(folder)
            assert result["argv"] == list(wanted.args)
            pids.append(result["pid"])
            log = (folder / "client.log").read_text()
            assert log.count(READY) == (rate < ahead) and RUN_ENDS.decode() in log
    assert pids[:ahead] == held_pids[:rates] and len(set(pids)) == rates
    assert not list((tmp / "held").glob("*.log"))  # every held client's log went to its rate


def test_the_first_take_waits_until_every_held_client_has_imported(
    tmp_path: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No held client is still importing when the first rate's timed run starts."""
    monkeypatch.setenv("IMPORT_S", "1.0")
    with ClientPool(Path(sys.executable), tmp_path / "held", script=script) as pool:
        pool.start(3)
        started = time.monotonic()
        first = pool.take(command(script, tmp_path, "x"), 30.0)
        assert first is not None and time.monotonic() - started >= 0.5
        for client in [first, *pool.held]:
            assert READY in client.log.read_text() and client.process.poll() is None
        first.process.kill()


def test_held_at_most_most_ahead_and_none_left_after_close(tmp_path: Path, script: Path) -> None:
    with ClientPool(Path(sys.executable), tmp_path / "held", script=script) as pool:
        pool.start(MOST_AHEAD + 3)
        pool.start(2)  # already full: starts none
        pids = [c.process.pid for c in pool.held]
        assert len(pids) == MOST_AHEAD
    assert all(wait_gone(pid, 10) for pid in pids)


def test_a_client_that_died_or_never_got_ready_is_passed_over(
    tmp_path: Path, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held client that died is dropped; one not ready within the wait is stopped; a rate
    then starts its own. Another interpreter's client is never handed a rate."""
    with ClientPool(Path(sys.executable), tmp_path / "held", script=script) as pool:
        pool.start(2)
        dead, live = pool.held
        dead.process.kill()
        dead.process.wait()
        assert pool.take(command(script, tmp_path, "x"), 30.0) is live
        live.process.kill()
        monkeypatch.setenv("IMPORT_S", "60")
        pool.start(1)
        (slow,) = pool.held
        assert pool.take(command(script, tmp_path, "y"), 0.5) is None
        assert wait_gone(slow.process.pid, 10)
        monkeypatch.setenv("IMPORT_S", "0")
        pool.start(1)
        other = ClientCommand("/usr/bin/python3-other", (), script=script)
        assert pool.take(other, 30.0) is None and len(pool.held) == 1


def test_a_held_client_whose_run_fails_says_so_with_its_log(tmp_path: Path, script: Path) -> None:
    with ClientPool(Path(sys.executable), tmp_path / "held", script=script) as pool:
        pool.start(1)
        wanted = command(script, tmp_path, "x", code=3)
        with pytest.raises(RuntimeError, match=f"code 3; log tail:\n(.|\n)*{READY}"):
            run_client(wanted, tmp_path, tmp_path / "client.log", 30.0, held=pool.take(wanted, 30))


def test_a_held_clients_timed_run_is_heard_with_its_pid(tmp_path: Path, script: Path) -> None:
    heard: list[tuple[str, int, bool]] = []

    class Watch:
        def started(self, pid: int) -> None:
            heard.append(("started", pid, alive(pid)))

        def ended(self, pid: int) -> None:
            heard.append(("ended", pid, alive(pid)))

    with ClientPool(Path(sys.executable), tmp_path / "held", script=script) as pool:
        pool.start(1)
        wanted = command(script, tmp_path, "x")
        held = pool.take(wanted, 30.0)
        assert held is not None
        run_client(wanted, tmp_path, tmp_path / "client.log", 30.0, Watch(), held)
    assert [(what, pid) for what, pid, _ in heard] == [
        ("started", held.process.pid),
        ("ended", held.process.pid),
    ]


@given(
    rates=st.integers(1, 6),
    warmup=st.integers(0, 3),
    min_pairs=st.integers(1, 10),
)
def test_a_comparison_starts_ahead_only_the_runs_it_is_sure_to_make(
    rates: int, warmup: int, min_pairs: int
) -> None:
    """Each arm: its warm-ups (one rate each) and its first ``min_pairs`` sweeps of the listed
    rates; the warm-up's rate is the first listed (``serve_ab.warm_up``)."""
    spec = SweepSpec(
        rates=tuple(float(r + 1) for r in range(rates)),
        requests=4,
        sla=Sla(1.0, 1.0),
        client_python=Path(os.devnull),
        tokenizer=Path(os.devnull),
    )
    made = client_runs(spec, Settings(warmup=warmup, min_pairs=min_pairs, max_pairs=min_pairs))
    assert made == 2 * warmup + 2 * min_pairs * rates
