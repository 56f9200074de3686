"""`bloomperf ab --serve`'s rules without a server: each metric judged in its own direction,
a figure one arm lacks, and the results entries (tests/test_serving_ab.py runs real servers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.paired import FASTER, SAME, SLOWER
from bloomperf.cli.ab_report import comparison_json, render_metric_table
from bloomperf.harness.interleave import PairLog, Settings
from bloomperf.harness.loadgen import RESULT_NAME, RUN_ENDS, RUN_STARTS, ClientCommand, run_client
from bloomperf.harness.matrix import Cell
from bloomperf.harness.serve_ab import (
    MISSING_FACTOR,
    LoadWatch,
    failed,
    load_probes,
    pair_values,
    server_roots,
    server_width,
    turn,
)
from bloomperf.harness.server import Server, ServerSpec
from bloomperf.harness.sweep import Endpoint, Managed
from bloomperf.store.results import Outcome
from bloomperf.store.serving import EFFECTIVE, ITL_P99, TTFT_P99
from tests.builders import ok_cell

CELL = Cell("serve-fastgen-1200-128", "fp32", 1)
SETTINGS = Settings(tolerance=0.4, confidence=0.75, min_pairs=3, max_pairs=3)


def judged(metric: str, a: list[float], b: list[float]) -> str | None:
    log = PairLog(CELL, SETTINGS, metric=metric)
    for x, y in zip(a, b, strict=True):
        log.add_pair({"a": x, "b": y}, ("a", "b"))
    return log.comparison("max-pairs", 0.0, {}).verdict


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(0.05, 0.55), noise=st.lists(st.floats(0.97, 1.03), min_size=3, max_size=3))
def test_a_lower_effective_throughput_in_b_is_worse(factor: float, noise: list[float]) -> None:
    """Higher is better: B serving a fraction of A's requests/s is "slower" (worse), not the
    "faster" a lower ms/token would be; the same fall in a latency is better."""
    a = [6.0, 5.0, 7.0]
    b = [x * factor * n for x, n in zip(a, noise, strict=True)]
    assert judged(EFFECTIVE, a, b) == SLOWER
    assert judged(ITL_P99, a, b) == FASTER


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(1.7, 20.0))
def test_a_higher_effective_throughput_or_a_lower_p99_in_b_is_better(factor: float) -> None:
    a = [6.0, 5.0, 7.0]
    assert judged(EFFECTIVE, a, [x * factor * 1.01 for x in a]) == FASTER
    assert judged(TTFT_P99, [x * factor for x in a], a) == FASTER


def test_equal_arms_are_the_same_whichever_way_the_metric_is_better() -> None:
    for metric in (EFFECTIVE, TTFT_P99):
        assert judged(metric, [6.0, 5.0, 7.0], [6.1, 4.95, 7.05]) == SAME


def test_a_sweep_that_met_the_sla_at_no_rate_counts_as_far_worse() -> None:
    """B's sweep had no effective throughput (FastGen's 0): its pair counts B as MISSING_FACTOR
    times lower; a latency one arm lacks was not measured, and a figure neither has: no pair."""
    figures = {
        "a": {EFFECTIVE: (6.0,), TTFT_P99: (300.0,)},
        "b": {TTFT_P99: (900.0,), ITL_P99: (50.0,)},
    }
    values = pair_values(figures)
    assert values[EFFECTIVE] == {"a": 6.0, "b": 6.0 / MISSING_FACTOR}
    assert values[TTFT_P99] == {"a": 300.0, "b": 900.0}
    assert ITL_P99 not in values
    assert pair_values({"a": {}, "b": {}}) == {}
    # Whichever arm lacks it: swapping the arms swaps every pair.
    swapped = pair_values({"a": figures["b"], "b": figures["a"]})
    assert swapped == {name: {"a": v["b"], "b": v["a"]} for name, v in values.items()}
    three = [6.0 / MISSING_FACTOR, 4.0 / MISSING_FACTOR, 6.0 / MISSING_FACTOR]
    assert judged(EFFECTIVE, [6.0, 4.0, 6.0], three) == SLOWER


def test_the_arms_alternate_at_every_other_rate() -> None:
    assert [turn(("b", "a"), i) for i in range(3)] == [("b", "a"), ("a", "b"), ("b", "a")]


def test_a_serving_entry_names_its_metric_and_its_values_and_reads_in_plain_words() -> None:
    log = PairLog(CELL, SETTINGS, metric=EFFECTIVE)
    for a, b in ((6.0, 2.0), (5.0, 2.5), (7.0, 2.0)):
        log.add_pair({"a": a, "b": b}, ("a", "b"))
    comparison = log.comparison("max-pairs", 1.0, {})
    entry = comparison_json(comparison)
    assert entry["metric"] == EFFECTIVE and entry["verdict"] == SLOWER
    assert 2 / 7 <= entry["ratio"] <= 0.5 and entry["high"] < 0.51  # B/A, in its own units
    assert [s["value"] for s in entry["samples"] if s["arm"] == "b"] == [2.0, 2.5, 2.0]
    assert "ms_per_token" not in entry["samples"][0]
    table = render_metric_table([comparison], SETTINGS)
    assert "eff. req/s" in table and "| worse" in table and "6 req/s" in table


# A client stand-in that prints the real client's marks (CLIENT_MAIN's line-buffered stdout)
# around a timed part, with quiet parts before and after, then writes a result.
MARKED_CLIENT = """
import json, sys, time
from pathlib import Path
print("Starting initial single prompt test run...", flush=True)
time.sleep(0.4)
print({starts!r} + "...", flush=True)
time.sleep(0.3)
Path(sys.argv[1]).write_text(json.dumps({{"duration": 0.3, "errors": []}}))
print("=" * 9 + " " + {ends!r} + " " + "=" * 9, flush=True)
time.sleep({after})
"""


class Heard:
    """A RunWatch that notes, at each call, the time, the pid, the log so far and whether the
    client was still running."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.calls: list[tuple[str, float, int, str, bool]] = []

    def note(self, what: str, pid: int) -> None:
        try:
            running = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            running = False
        self.calls.append((what, time.monotonic(), pid, self.log.read_text(), running))

    def started(self, pid: int) -> None:
        self.note("started", pid)

    def ended(self, pid: int) -> None:
        self.note("ended", pid)


def marked_client(tmp_path: Path, *, ends: bool = True, after: float = 0.4) -> ClientCommand:
    """The stand-in's command; ``after``: how long it lives on past its end mark."""
    code = MARKED_CLIENT.format(
        starts=RUN_STARTS.decode(),
        ends=RUN_ENDS.decode() if ends else "Something else",
        after=after,
    )
    script = tmp_path / f"marked-{ends}-{after}.py"
    script.write_text(code)
    return ClientCommand(sys.executable, (str(tmp_path / RESULT_NAME),), script=script)


def test_a_watch_hears_the_clients_timed_run_start_and_end_while_it_runs(
    tmp_path: Path,
) -> None:
    """The window a serving pair's load is read over is the client's timed run: heard after
    its start mark is in the log (not at its start-up or its test request), ended after its end
    mark and before it exits, each with the client's pid."""
    log = tmp_path / "client.log"
    log.write_text("an earlier rate's lines: " + RUN_STARTS.decode() + "\n")  # appended after
    heard = Heard(log)
    started = time.monotonic()
    run = run_client(marked_client(tmp_path), tmp_path, log, 60.0, heard)
    assert run.requests == () and run.duration_s == 0.3
    (one, at_start, pid, log_then, _), (two, at_end, pid_end, log_later, running) = heard.calls
    assert (one, two) == ("started", "ended") and pid == pid_end
    assert log_then.count(RUN_STARTS.decode()) == 2 and RUN_ENDS.decode() not in log_then
    assert RUN_ENDS.decode() in log_later and running  # heard while the client still ran
    assert started + 0.4 <= at_start and started + 0.7 <= at_end  # the sleeps before each
    # A client that exits at once after its end mark (within one look) is still heard to end.
    for index in range(5):
        prompt = Heard(tmp_path / f"prompt-{index}.log")
        run_client(marked_client(tmp_path, after=0.0), tmp_path, prompt.log, 60.0, prompt)
        assert [call[0] for call in prompt.calls] == ["started", "ended"]


def test_a_client_that_never_marks_its_end_gives_no_window_and_one_that_hangs_is_killed(
    tmp_path: Path,
) -> None:
    heard = Heard(tmp_path / "client.log")
    run_client(marked_client(tmp_path, ends=False), tmp_path, heard.log, 60.0, heard)
    assert [call[0] for call in heard.calls] == ["started"]
    script = tmp_path / "hung.py"
    starts = RUN_STARTS.decode()
    script.write_text(f"import time; print('{starts}', flush=True); time.sleep(60)")
    hung = ClientCommand(sys.executable, (), script=script)
    heard = Heard(tmp_path / "hung.log")
    with pytest.raises(TimeoutError, match="client ran over 1 s"):
        run_client(hung, tmp_path, heard.log, 1.0, heard)
    pid = heard.calls[0][2]
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


# ---- what each arm's probe watches, in process ----------------------------------------------


def managed(tmp_path: Path, name: str, threads: int | None) -> Managed:
    spec = ServerSpec(sys.executable, tmp_path, tmp_path / f"{name}.log", threads=threads)
    return Managed(Server(spec))


def test_each_arms_probe_measures_its_server_and_counts_the_others_as_ours(tmp_path: Path) -> None:
    a, b = managed(tmp_path, "a", threads=3), managed(tmp_path, "b", threads=None)
    cpus = len(os.sched_getaffinity(0))
    assert server_roots(a) == [] and server_roots(Endpoint("http://127.0.0.1:1")) == []
    assert server_width(Endpoint("http://127.0.0.1:1"), cpus) == cpus  # vLLM's choice: all
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in "ab"]
    try:
        a.server.process, b.server.process = sleepers  # as Server.start leaves them
        probes = load_probes({"a": a, "b": b})
        pid_a, pid_b = (p.pid for p in sleepers)
        assert (list(probes["a"].measured()), list(probes["a"].also_ours())) == ([pid_a], [pid_b])
        assert (list(probes["b"].measured()), list(probes["b"].also_ours())) == ([pid_b], [pid_a])
        # The engine's threads (else every CPU) and the client's one.
        assert (probes["a"].width, probes["b"].width) == (4, cpus + 1)
        assert probes["a"].cpus == probes["b"].cpus == cpus
        watch = LoadWatch(probes["a"])
        watch.ended(os.getpid())  # no start seen: no load invented
        assert watch.load is None
        watch.started(os.getpid())
        watch.ended(os.getpid())
        assert watch.load is not None and watch.load.wall_s >= 0
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_failed_arm_is_named_with_its_outcome_and_keeps_what_was_measured() -> None:
    cell = Cell("vllm", "bf16", 1)
    kept = {"b": ok_cell(1.0)}
    started = time.monotonic()
    done = failed(cell, "a", "timeout", "no answer within 900 s", kept, started)
    assert (done.cell, done.outcome, done.verdict, done.estimate, done.samples) == (
        cell,
        Outcome.TIMEOUT,
        None,
        None,
        (),
    )
    assert (done.stopped, done.arms) == ("failed", kept)
    assert done.message == "arm A: timeout: no answer within 900 s"
    assert 0 <= done.elapsed_s <= time.monotonic() - started
