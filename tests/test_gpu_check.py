"""benchmarks/gpu_check.sh, the first check on a GPU machine: its CPU dry mode runs every step
(install aside) on the tiny model, so the script cannot rot while no GPU is at hand. The GPU run
itself stays unverified until a GPU machine runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from nvml_replay import nvml_error_here

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def test_gpu_check_is_valid_bash() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.cpu
def test_cpu_dry_mode_runs_every_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "GPU_CHECK_DEVICE": "cpu",
        "OUT": str(out),
        "PYTHON": sys.executable,
        "BATCHES": "1,2",
        "NEW_TOKENS": "4",
        "BUDGET_S": "1500",
        "GPU_CHECK_KEEP": "1",
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    log = (out / "log.txt").read_text()
    assert done.returncode == 0, log[-4000:]
    summary = (out / "summary.txt").read_text()
    outcomes = {line.split()[0]: line.split()[1] for line in summary.splitlines()[1:-1]}
    for cell in (
        "accelerate:accelerate-bf16-bs1",
        "accelerate:accelerate-int8-bs2",
        "ds-zero:ds-zero-bf16-bs2",
        "ds-autotp:ds-autotp-bf16-bs1",  # fp16: GPU only
        "oom:accelerate-bf16-bs4",
    ):
        assert outcomes[cell] == "ok", summary
    # The fused kernels need a GPU: bloomperf skips them with the reason, as on any CPU.
    assert outcomes["ds-inference:ds-inference-fp16-bs1"] == "skipped", summary
    assert summary.splitlines()[-1].startswith("OOM boundary, accelerate bf16: largest batch")
    doctor = json.loads((out / "work" / "doctor.json").read_text())
    assert {c["name"] for c in doctor["checks"]} >= {"nvml", "deepspeed-jit", "shm"}
    assert json.loads((out / "work" / "topology.json").read_text())["topology"]["id"] == "cpu"
    with tarfile.open(out / "gpu-check.tgz") as archive:
        names = archive.getnames()
    # Worker logs: each run's logs folder sits beside its results (<results>.json.logs/).
    assert any(n.endswith(".log") and ".json.logs/worker-" in n for n in names), names
    assert "work/accelerate.json" in names and "work/predict.json" in names
    assert "=== [+" in log and "done in" in log
    # The NVML recorder ran: here, without NVML, it said why in one line and wrote nothing.
    recorded = out / "nvml-answers.json"
    why = nvml_error_here()
    if why is None:
        assert json.loads(recorded.read_text())["recorded"]["by"] == "benchmarks/record_nvml.py"
    else:
        assert f"record_nvml: no NVML on this machine: {why}\n" in log
        assert not recorded.exists()
