"""`bloomperf ab --serve` against real vLLM servers (the serving venv, tiny-serving): a server
that takes one sequence at a time is judged worse than the default one, and a server started
the same way as the default is not. Each comparison starts its two servers at once, warms each
up with one run, and runs three pairs of one-rate sweeps (32 requests all at once): about two
minutes each, alone on the machine (-m serial: tests/conftest.py); the refused argument judges
no time and runs beside other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.analysis.paired import SLOWER
from bloomperf.core.lockdir import LOCK_DIR_ENV
from bloomperf.store.serving import EFFECTIVE, ITL_P99, TTFT_P99
from tests.leftovers import marked_env, marked_processes

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-serving" / "bin" / "python"

if not PYTHON.exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{PYTHON} is missing: BLOOMPERF_PROFILE=serving bash .ci/setup")
    pytest.skip(
        "no serving venv (BLOOMPERF_PROFILE=serving bash .ci/setup)", allow_module_level=True
    )

# Everything at once (rate inf): the default server batches the 32 requests, one sequence at a
# time queues them. Three pairs at 75 %: the smallest sample whose interval can decide (the
# interval is then [min, max] of the pairs), so "worse" needs all three pairs to say so. 32
# requests, not 8: a p99 over 8 streams' gaps is a handful of gaps, and two servers started
# alike read 0.6 to 8 times each other's p99 ITL (docs/serving.md); the run itself is still a
# second or two of a client's ten.
REQUESTS = 32
SWEEP = ["--rates", "inf", "--requests", str(REQUESTS), "--refine", "0"]
PAIRS = ["--min-pairs", "3", "--max-pairs", "3", "--confidence", "0.75"]
BLOOMPERF = [sys.executable, "-m", "bloomperf"]
# What vLLM's server (uvicorn) prints once it answers.
READY_LINE = "Application startup complete"


def serving_ab(tmp: Path, *args: str) -> tuple[int, dict, str]:
    output = tmp / "ab.json"
    done = run_ab(tmp, *args, "--output", str(output))
    assert output.exists(), done.stdout + done.stderr
    return done.returncode, json.loads(output.read_text()), done.stdout + done.stderr


def run_ab(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BLOOMPERF, "ab", "--serve", *SWEEP, *PAIRS, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        # A lock of its own (the machine's may be CI's), marked to find its processes after.
        env={**marked_env(tmp / "mark"), LOCK_DIR_ENV: str(tmp / "locks")},
        cwd=ROOT,
        check=False,
    )


def verdicts(document: dict) -> dict[str, str]:
    return {entry["metric"]: entry["verdict"] for entry in document["cells"]}


@pytest.mark.serial  # judges measured time: alone, after the parallel pass
def test_a_server_taking_one_sequence_at_a_time_is_judged_worse(tmp_path: Path) -> None:
    code, document, output = serving_ab(tmp_path, "--b-engine-args", "--max-num-seqs 1")
    found = verdicts(document)
    assert code == 1, output
    # Queued behind each other, B's requests wait: its effective throughput falls and its p99
    # TTFT rises (its ITL may even fall: a lone sequence is not batched with others).
    assert found[EFFECTIVE] == SLOWER or found[TTFT_P99] == SLOWER, output
    assert set(found) == {EFFECTIVE, TTFT_P99, ITL_P99}
    assert document["kind"] == "bloomperf-ab" and document["complete"]
    assert document["differences"]["engine_args"] == {"a": "", "b": "--max-num-seqs 1"}
    for arm in ("a", "b"):
        sweeps = document["sweeps"][arm]
        assert len(sweeps["repeats"]) == 2 and sweeps["rates"][0]["completed"] == REQUESTS
    effective = next(e for e in document["cells"] if e["metric"] == EFFECTIVE)
    assert sorted(s["pair"] for s in effective["samples"]) == [0, 0, 1, 1, 2, 2]
    # Each sample's load was read over its client's run (which lies inside the window), on the
    # CPUs both servers and the client share.
    for sample in effective["samples"]:
        sweep = document["sweeps"][sample["arm"]]
        rates = sweep["repeats"][sample["pair"] - 1]["rates"] if sample["pair"] else sweep["rates"]
        load = sample["load"]
        assert load["cpus"] == len(os.sched_getaffinity(0)) and load["other_cpu_s"] is not None
        assert load["wall_s"] >= rates[0]["duration_s"]
    assert "'max_num_seqs': 1" in (tmp_path / "ab.b.server.log").read_text()  # vLLM's own word
    assert "| worse" in output
    # Each server warmed up once, first, and that run is in no pair.
    assert document["settings"]["warmup"] == 1
    progress = [line.strip() for line in output.splitlines() if line.strip().startswith("arm ")]
    warmed = sorted(line.split(", SLA")[0] for line in progress[:2])
    assert warmed == [f"arm {arm} (warm-up): rate inf/s: ok" for arm in "AB"]
    assert not any("warm-up" in line for line in progress[2:]) and len(progress) == 8


@pytest.mark.serial  # judges measured time: alone, after the parallel pass
def test_a_server_started_the_same_way_is_not_judged_worse(tmp_path: Path) -> None:
    code, document, output = serving_ab(tmp_path)
    assert code == 0, output
    assert SLOWER not in verdicts(document).values(), output
    assert "differs: (no difference)" in output


def test_an_engine_argument_arm_b_refuses_is_one_line_and_leaves_no_server(tmp_path: Path) -> None:
    output = tmp_path / "ab.json"
    done = run_ab(tmp_path, "--b-engine-args", "--no-such-engine-flag 3", "--output", str(output))
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "--b-engine-args: vLLM refused them" in last and "no-such-engine-flag" in last
    assert not marked_processes(tmp_path / "mark", wait_s=10)  # arm A's server stopped too
    # Said when B's server exited, not after A's load: A's server never got to answer.
    assert READY_LINE not in (tmp_path / "ab.a.server.log").read_text()
