"""The spine end to end on the tiny model: `bloomperf run`, workers, outcomes, no leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from bloomperf.harness.launch import ABORT_GRACE_S
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session
from bloomperf.store.results import Outcome
from bloomperf.store.results.files import read_results
from tests.pace import soon_after

QUICK = ["--new-tokens", "8", "--cycles", "2", "--no-lock"]


def bloomperf(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def worker_pids() -> set[int]:
    """Live worker processes started by this test process (others may run their own)."""
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "bloomperf.harness.worker" in " ".join(
                proc.cmdline()
            ):
                pids.add(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return pids


def test_run_measures_the_tiny_model_and_loads_once_per_group(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = bloomperf(
        "run", *QUICK, "--batch-sizes", "1,4,8", "--dtypes", "fp32", "--output", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "accelerate fp32" in done.stdout and "bs 8" in done.stdout
    data = json.loads(out.read_text())
    assert data["kind"] == "bloomperf-results" and data["complete"] is True
    assert data["model"]["name"] == "tiny" and Path(data["model"]["path"]).is_dir()
    cells = data["cells"]
    assert [c["batch_size"] for c in cells] == [1, 4, 8]
    for cell in cells:
        for key in (
            "backend",
            "dtype",
            "batch_size",
            "outcome",
            "ms_per_token",
            "samples_ms_per_token",
            "load_time_s",
            "peak_memory_bytes",
        ):
            assert key in cell
        assert cell["outcome"] == "ok"
        assert len(cell["samples_ms_per_token"]) == 2
        assert cell["ms_per_token"] > 0
        assert cell["peak_memory_bytes"] > 50 * 2**20  # a torch process holds tens of MB at least
        assert cell["load_memory"]["source"] == "rss"
    # Loaded once, counted by the controller: the same load serves every batch size.
    assert {c["details"]["load_count"] for c in cells} == {1}
    # ... and counted in the worker: backend.load ran once in it, whatever the controller did.
    assert {c["details"]["backend_loads"] for c in cells} == {1}
    assert len({c["load_time_s"] for c in cells}) == 1
    # Per-token cost falls with the batch: the batch really is in the inputs.
    assert cells[2]["ms_per_token"] < cells[0]["ms_per_token"]


def test_int8_and_disk_offload_run_through_accelerate(tmp_path: Path) -> None:
    out = tmp_path / "int8.json"
    # Batch 2 is in no baseline: this checks that the loads run, not a verdict.
    done = bloomperf(
        "run",
        *QUICK,
        "--batch-sizes",
        "2",
        "--dtypes",
        "int8",
        "--output",
        str(out),
        "--allow-no-baseline",
    )
    assert done.returncode == 0, done.stderr
    [cell] = read_results(out).cells
    assert cell.outcome is Outcome.OK
    out = tmp_path / "disk.json"
    offload = tmp_path / "offload"
    done = bloomperf(
        "run",
        *QUICK,
        "--batch-sizes",
        "2",
        "--dtypes",
        "fp32",
        "--offload",
        "disk",
        "--offload-folder",
        str(offload),
        "--output",
        str(out),
        "--allow-no-baseline",
    )
    assert done.returncode == 0, done.stderr
    [cell] = read_results(out).cells
    assert cell.outcome is Outcome.OK
    # Part of the weights stays in RAM, the rest is read from disk at every forward pass
    # (safetensors checkpoints are memory-mapped from where they are, so the folder may stay empty).
    assert set(cell.details["modules_per_device"]) == {"cpu", "disk"}


def test_cpu_oom_is_caught_and_the_next_cells_still_run(tmp_path: Path) -> None:
    out = tmp_path / "oom.json"
    done = bloomperf(
        "run",
        *QUICK,
        "--batch-sizes",
        "1,65536",
        "--dtypes",
        "fp32,bf16",
        "--memory-limit",
        "1500MiB",
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stderr  # an OOM is a measurement, not a crash
    cells = {c.id: c for c in read_results(out).cells}
    assert cells["accelerate-fp32-bs1"].outcome is Outcome.OK
    assert cells["accelerate-fp32-bs65536"].outcome is Outcome.OOM
    assert "allocate" in cells["accelerate-fp32-bs65536"].message
    assert cells["accelerate-bf16-bs1"].outcome is Outcome.OK
    assert cells["accelerate-bf16-bs65536"].outcome is Outcome.OOM


def test_after_an_oom_the_worker_is_restarted_before_the_next_cell(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    done = bloomperf(
        "run",
        *QUICK,
        "--batch-sizes",
        "1,65536,70000",
        "--dtypes",
        "fp32",
        "--probe",
        "--memory-limit",
        "1500MiB",
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    cells = read_results(out).cells
    assert [c.outcome for c in cells] == [Outcome.OK, Outcome.OOM, Outcome.OOM]
    assert [c.details["load_count"] for c in cells] == [1, 1, 2]


def test_deepspeed_rank_groups_run_through_the_launcher(tmp_path: Path) -> None:
    out = tmp_path / "ds.json"
    shm_before = set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"))
    done = bloomperf(
        "run",
        *QUICK,
        "--backends",
        "ds-autotp,ds-zero",
        "--dtypes",
        "fp32",
        "--tp",
        "2",
        "--batch-sizes",
        "1,3",
        "--allow-no-baseline",  # the CPU baseline has accelerate's cells only (docs/gate.md)
        "--output",
        str(out),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    cells = {c.id: c for c in read_results(out).cells}
    assert set(cells) == {
        "ds-autotp-fp32-bs1",
        "ds-autotp-fp32-bs3",
        "ds-zero-fp32-bs1",
        "ds-zero-fp32-bs3",
    }
    for cell in cells.values():
        assert cell.outcome is Outcome.OK, cell.message
        assert cell.details["load_count"] == 1
    assert cells["ds-autotp-fp32-bs1"].details["tp"] == 2  # batch 1 at TP=2: the alibi fix
    assert cells["ds-autotp-fp32-bs1"].details["kernel_inject"] is False
    zero = cells["ds-zero-fp32-bs3"]
    assert zero.details["ranks"] == 2
    assert zero.details["aggregate_ms_per_token"] == pytest.approx(zero.ms_per_token / 2)
    # Launcher + two ranks: the process tree's memory is more than one process's.
    assert zero.peak_memory_bytes is not None and zero.peak_memory_bytes > 2 * 200 * 2**20
    assert set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")) <= shm_before


def session(tmp_path: Path, **extra: str) -> Session:
    options = resolve_options(
        {
            "new_tokens": "200",
            "cycles": "1",
            "dtypes": "fp32",
            "output": str(tmp_path / "s.json"),
            **extra,
        },
        env={},
    )
    return Session.prepare(options)


SIGNALLED_AT: list[float] = []


def signal_worker_soon(sess: Session, signum: int, delay: float) -> None:
    def send() -> None:
        time.sleep(delay)
        SIGNALLED_AT.append(time.monotonic())
        assert sess.active is not None and sess.active.group is not None
        process = sess.active.group.process
        assert process is not None
        os.kill(process.pid, signum)

    threading.Thread(target=send, daemon=True).start()


def kill_mid_cycle(sess: Session, signum: int) -> Any:
    """Cycles run back to back until the signal has landed in one of them: the signal meets a
    running cycle on a machine of any speed, and no cycle needs to be long (a cycle of 3000
    tokens at batch 16 made this file's slowest minutes)."""

    def measure(one_cycle: Any, warmup: int, cycles: int) -> list[float]:
        signal_worker_soon(sess, signum, 0.3)
        deadline = time.monotonic() + 120  # the signal never landed: the cell reads ok, and fails
        figures = []
        while time.monotonic() < deadline:
            figures.append(one_cycle())  # raises once the worker is killed or stopped
        return figures

    return measure


def test_a_killed_worker_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    sess = session(tmp_path, new_tokens="50")
    before = worker_pids()
    try:
        killed = sess.measure_cell(
            Cell("accelerate", "fp32", 16), kill_mid_cycle(sess, signal.SIGKILL)
        )
        assert killed.outcome is Outcome.ERROR
        assert "killed by signal 9" in killed.message
        after = sess.measure_cell(Cell("accelerate", "fp32", 17))
        assert after.outcome is Outcome.OK
        assert after.details["load_count"] == 2
    finally:
        sess.stop()
    assert worker_pids() - before == set()


def test_a_hung_worker_times_out_and_its_group_is_killed(tmp_path: Path) -> None:
    sess = session(tmp_path, cell_timeout="4", new_tokens="50")
    before = worker_pids()
    try:
        hung = sess.measure_cell(
            Cell("accelerate", "fp32", 16), kill_mid_cycle(sess, signal.SIGSTOP)
        )
        elapsed = time.monotonic() - SIGNALLED_AT[-1]
        assert hung.outcome is Outcome.TIMEOUT
        # The limit, the group's grace, and what stopping it costs on this machine now.
        assert elapsed < soon_after(4 + ABORT_GRACE_S)
    finally:
        sess.stop()
    assert worker_pids() - before == set()
    saved = read_results(tmp_path / "s.json")
    assert [c.outcome for c in saved.cells] == [Outcome.TIMEOUT]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--backends", "nope"],
            "--backends: 'nope' is not accelerate, ds-inference, ds-autotp, ds-zero or vllm",
        ),
        (["--dtypes", "fp8"], "--dtypes: unknown value 'fp8' (valid: fp32, bf16, fp16, int8)"),
        (["--batch-sizes", "0"], "--batch-sizes: batch size must be a positive integer, got 0"),
        (["--batch-sizes", "-4"], "--batch-sizes: batch size must be a positive integer, got -4"),
        (["--model", "no-such-model"], "--model: 'no-such-model' is not a known shape"),
        (["--sharded", "/no/such/dir"], "--sharded: /no/such/dir is not a folder"),
        (["--load", "eager"], "--load: unknown value 'eager' (valid: unsharded, hf)"),
        (["--max-memory", "0:lots"], "--max-memory: '0:lots': 'lots' is not a size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    done = bloomperf("run", "--no-lock", *args, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needle in lines[0]
    assert "Traceback" not in done.stderr


def test_the_plugin_runs_the_matrix_with_pytest_benchmark(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.cpu
        def test_cpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)

        @pytest.mark.gpu
        def test_gpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    bench = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess(
        "-m",
        "cpu",
        "-v",
        "--bloomperf-new-tokens=8",
        "--bloomperf-cycles=3",
        "--bloomperf-batch-sizes=1,4",
        "--bloomperf-dtypes=fp32,bf16",
        "--bloomperf-no-lock",
        f"--benchmark-json={bench}",
        f"--bloomperf-output={pytester.path / 'r.json'}",
    )
    result.assert_outcomes(passed=4, deselected=12)  # the GPU matrix: 3 backends x 2 x 2
    result.stdout.fnmatch_lines(
        [
            "*test_cpu?accelerate-fp32-bs1? PASSED*",
            "*test_cpu?accelerate-bf16-bs4? PASSED*",
            "*bloomperf (cpu)*",
            "accelerate fp32*",
        ]
    )
    data = json.loads(bench.read_text())
    benchmarks = {b["param"]: b for b in data["benchmarks"]}
    assert set(benchmarks) == {
        "accelerate-fp32-bs1",
        "accelerate-fp32-bs4",
        "accelerate-bf16-bs1",
        "accelerate-bf16-bs4",
    }
    for bench_entry in benchmarks.values():
        cell = bench_entry["extra_info"]["bloomperf"]
        assert bench_entry["stats"]["rounds"] == 3
        assert len(cell["samples_ms_per_token"]) == 3  # the warm-up cycle is not a sample
        # pytest-benchmark's statistics are the worker's own synchronised cycle times.
        per_token = [s / 1000 * cell["batch_size"] * 8 for s in cell["samples_ms_per_token"]]
        assert bench_entry["stats"]["min"] == pytest.approx(min(per_token), rel=1e-9)
        assert bench_entry["extra_info"]["bloomperf_run"]["model"]["name"] == "tiny"
        # Per-step latency travels in extra_info too: 8 steps per timed cycle, prefill first.
        assert [len(s) for s in cell["samples_step_ms"]] == [8, 8, 8]
        assert 0 < cell["tpot_ms"] <= cell["tpot_p99_ms"] and cell["ttft_ms"] > 0
    # One load per (backend, dtype), counted in the worker group.
    loads = {b["extra_info"]["bloomperf"]["details"]["load_count"] for b in benchmarks.values()}
    assert loads == {1}
    # The file this live run wrote is what `bloomperf diff` gates on: complete, every cell read.
    diff = subprocess.run(
        [sys.executable, "-m", "bloomperf", "diff", str(bench)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "4 cells" in diff.stdout and "incomplete" not in diff.stdout, diff.stdout


def test_the_gpu_matrix_skips_with_nvmls_reason_without_a_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.gpu
        def test_gpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    from bloomperf.catalog.topology import detect_topology

    if detect_topology().device == "cuda":
        pytest.skip("a GPU is here: the GPU matrix runs instead of skipping")
    result = pytester.runpytest_subprocess("-m", "gpu", "-rs", "--bloomperf-batch-sizes=1")
    result.assert_outcomes(skipped=5)
    result.stdout.fnmatch_lines(["*no GPU: *NVML*"])
