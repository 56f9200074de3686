"""Progress on slow work: heartbeat lines off a terminal for building, loading and cells."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bloomperf.catalog.caches import extensions_dir
from bloomperf.core import progress
from bloomperf.store.results import Outcome
from bloomperf.store.results.files import read_results


def test_bloomperf_run_prints_build_and_load_progress_before_the_first_cell(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "BLOOMPERF_CACHE": str(tmp_path / "cache"),
        "TORCH_EXTENSIONS_DIR": str(extensions_dir()),  # a fresh cache, not a fresh op build
        "BLOOMPERF_HEARTBEAT_S": "0.1",
    }
    command = [sys.executable, "-m", "bloomperf", "run", "--no-lock", "--model", "tiny"]
    command += ["--backends", "accelerate", "--dtypes", "fp32", "--batch-sizes", "1,2"]
    command += ["--new-tokens", "5", "--cycles", "1", "--output", str(tmp_path / "r.json")]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    stamp = r"^\d\d:\d\d:\d\dZ bloomperf: "

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    build = first(stamp + r"building tiny \(2 layers\): [\d.]+ MB to write$")
    cell = first(stamp + r"cell 1/2: accelerate-fp32-bs1$")
    loading = first(stamp + r"loading accelerate fp32 \.\.\.$")
    beat = first(stamp + r"loading accelerate fp32: \d+ s")  # a load takes over 0.1 s
    measured = first(r"^  \[1/2\] accelerate-fp32-bs1 +[\d.]+ ms/token  \(about \d+ s left\)$")
    assert build < cell < loading < beat < measured
    assert re.search(r"^  \[2/2\] accelerate-fp32-bs2 +[\d.]+ ms/token$", done.stderr, re.M)


def test_byte_progress_reports_rate_and_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", "0.5")
    progress.set_sink(lines.append)
    try:
        bar = progress.ByteProgress("building x", 4_000_000)
        time.sleep(0.55)
        bar.advance(1_000_000)
        started = time.monotonic()
        bar.advance(1_000_000)  # within the interval: no line
        within = time.monotonic() - started < 0.5  # as measured: a busy machine may stall here
        bar.close()
    finally:
        progress.set_sink(None)
    assert lines[0].endswith("bloomperf: building x: 4.0 MB to write")
    assert len(lines) == 2 or (not within and len(lines) == 3), lines
    assert re.search(
        r"building x: 1.0 MB of 4.0 MB \(25 %\), [\d.]+ MB/s, about \d+ s left$", lines[1]
    )


def test_heartbeat_quotes_the_latest_state_of_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "worker.log"
    log.write_text("starting\nLoading weights:  10%|#\rLoading weights:  90%|#########\r")
    lines: list[str] = []
    monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", "0.1")
    progress.set_sink(lines.append)
    try:
        with progress.heartbeat("loading a b", lambda: progress.last_line(log)):
            deadline = time.monotonic() + 60  # three beats, however slowly the thread is run
            while len(lines) < 3:
                assert time.monotonic() < deadline, lines
                time.sleep(0.01)
    finally:
        progress.set_sink(None)
    assert lines[0].endswith("bloomperf: loading a b ...")
    assert lines[1].endswith("loading a b: 0 s; last log line: Loading weights:  90%|#########")
    # The thread stopped with the block (joined: a state, not a quiet spell waited out).
    assert "bloomperf-heartbeat" not in {t.name for t in threading.enumerate()}


# ---- worker logs --------------------------------------------------------------------------------


def run_tiny(tmp_path: Path, *extra: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BLOOMPERF_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    env["TORCH_EXTENSIONS_DIR"] = str(extensions_dir())  # DeepSpeed's op built once, shared
    command = [sys.executable, "-m", "bloomperf", "run", "--no-lock", "--backends", "accelerate"]
    command += ["--dtypes", "fp32", "--batch-sizes", "1", "--new-tokens", "3", "--cycles", "1"]
    command += ["--output", str(tmp_path / "r.json"), *map(str, extra)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_a_clean_run_keeps_its_logs_beside_the_results_and_no_temporary_folder(
    tmp_path: Path,
) -> None:
    done = run_tiny(tmp_path, "--model", "tiny")
    assert done.returncode == 0, done.stderr
    logs = list((tmp_path / "r.json.logs").glob("worker-accelerate-fp32-*.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 0
    assert list(tmp_path.glob("bloomperf-worker-*")) == []


def test_a_failing_cell_names_its_log_and_quotes_the_tail(tmp_path: Path) -> None:
    from bloomperf.catalog.checkpoints import resolve_model

    built = resolve_model("tiny", None, tmp_path / "cache").path
    broken = tmp_path / "broken-tiny"
    shutil.copytree(built, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    done = run_tiny(tmp_path, "--model", str(broken))
    assert done.returncode == 1, done.stderr
    (cell,) = read_results(tmp_path / "r.json").cells
    assert cell.outcome is Outcome.ERROR
    assert "SafetensorError" in cell.message  # the worker's own report first
    match = re.search(r"\nworker log: (\S+)$", cell.message, re.M)
    assert match is not None, cell.message
    log = Path(match[1])
    assert log.parent == tmp_path / "r.json.logs" and log.is_file()
    quoted = cell.message[match.end() :].removeprefix("\nlog tail:\n")
    assert quoted.strip() == log.read_text().strip()[-len(quoted.strip()) :]


# ---- --ds-config -------------------------------------------------------------------------------


def test_ds_config_is_merged_over_the_zero_defaults_and_recorded(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    config = tmp_path / "ds.json"
    config.write_text(
        '{"zero_optimization": {"stage3_param_persistence_threshold": 12345}, "steps_per_print": 7}'
    )
    # --allow-no-baseline: the CPU baseline has accelerate's cells only (docs/gate.md).
    zero = ("--model", "tiny", "--backends", "ds-zero", "--allow-no-baseline")
    done = run_tiny(tmp_path, *zero, "--ds-config", config)
    assert done.returncode == 0, done.stderr
    (cell,) = read_results(tmp_path / "r.json").cells
    assert cell.outcome is Outcome.OK, cell.message
    used = cell.details["ds_config"]
    assert used["zero_optimization"]["stage"] == 3  # a default kept
    assert used["zero_optimization"]["stage3_param_persistence_threshold"] == 12345
    assert used["steps_per_print"] == 7
    config.write_text("[1, 2]")
    done = run_tiny(tmp_path, *zero, "--ds-config", config)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"{config}: a DeepSpeed config must be a JSON object")
