"""benchmarks/gpu_check.sh, the first check on a GPU machine: its CPU dry mode runs every step
(install aside) on the tiny model, so the script cannot rot while no GPU is at hand. The GPU run
itself stays unverified until a GPU machine runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.nvml_replay import nvml_error_here

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


# ---- the H200 rehearsal: the GPU run's own command lines against the H200's facts ------------


def gpukit() -> Path:
    """The offline wheel kit the GPU run installs: .gpukit/ (as on the GPU machine), else the
    shared one beside the checkout. Under CI=true a missing kit fails instead of skipping."""
    for kit in (ROOT / ".gpukit", ROOT.parent / "shared" / "gpukit"):
        if (kit / "wheels").is_dir() and (kit / "wheels-reference").is_dir():
            return kit
    if os.environ.get("CI") == "true":
        pytest.fail("no gpukit (.gpukit/ or ../shared/gpukit): .ci/setup fetches it")
    pytest.skip("no gpukit here (.gpukit/ or ../shared/gpukit)")


def rehearse(root: Path, out: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GPU_CHECK_REHEARSAL": "h200",
        "OUT": str(out),
        "PYTHON": sys.executable,
        "KIT": str(gpukit()),
        "GPU_CHECK_KEEP": "1",
        **settings,
    }
    script = root / "benchmarks" / "gpu_check.sh"
    return subprocess.run(
        ["bash", str(script)], cwd=root, env=env, capture_output=True, text=True, timeout=900
    )


def steps_of(log: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in log.splitlines() if line.startswith("=== [+")]


@pytest.mark.cpu
def test_h200_rehearsal_passes_every_step_a_cpu_can_judge(tmp_path: Path) -> None:
    done = rehearse(ROOT, tmp_path / "out")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 0, log[-4000:]
    # The plan first, within the budget; the JIT build overlapped, not in the sum.
    assert log.startswith("plan (cuda, rehearsal of the h200 run): budget 540 s\n")
    total = re.search(r"^  sum +(\d+) s of 540 s$", log, re.MULTILINE)
    assert total is not None and int(total[1]) <= 540, log[:1000]
    # Every step of the H200 run ran, in priority order: NVML and accelerate before ds-inference.
    steps = steps_of(log)

    def position(prefix: str) -> int:
        return next(i for i, s in enumerate(steps) if s.startswith(prefix))

    assert position("record NVML") < position("bloomperf run accelerate:")
    assert position("bloomperf run accelerate:") < position("bloomperf run ds-inference:")
    assert position("JIT-build") < position("bloomperf doctor")
    doctor = json.loads((tmp_path / "out" / "work" / "doctor.json").read_text())
    statuses = {c["name"]: c["status"] for c in doctor["checks"]}
    assert statuses["disk"] == statuses["ram"] == "ok", doctor
    disk = next(c for c in doctor["checks"] if c["name"] == "disk")
    assert "bloom-176b (2 layers)" in disk["reason"]
    topology = json.loads((tmp_path / "out" / "work" / "topology.json").read_text())
    assert topology["topology"]["id"] == "1xH200-141GB"
    assert "JIT build: arch 9.0+PTX, MAX_JOBS=8" in log
    assert "ds-inference fp16 x1: batches 1,8,64, 0 skipped" in log
    recorded = json.loads((tmp_path / "out" / "nvml-answers.json").read_text())
    assert recorded["devices"][0]["memory_total"] == 143771 * 2**20


def scratch_checkout(tmp_path: Path, edit: tuple[str, str]) -> Path:
    """The project with one edit to gpu_check.sh: everything else is linked to the real one."""
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    for name in ("bloomperf", "tests", "pyproject.toml"):
        (root / name).symlink_to(ROOT / name)
    for path in (ROOT / "benchmarks").iterdir():
        if path.name != "gpu_check.sh":
            (root / "benchmarks" / path.name).symlink_to(path)
    text = SCRIPT.read_text()
    assert edit[0] in text
    (root / "benchmarks" / "gpu_check.sh").write_text(text.replace(edit[0], edit[1]))
    return root


@pytest.mark.cpu
def test_h200_rehearsal_fails_when_doctor_sizes_the_whole_model(tmp_path: Path) -> None:
    """The defect the rehearsal exists for: doctor without the run's model arguments sizes the
    70-layer bloom-176b (352 GB) against the H200's 64 GiB disk and 128 GiB RAM, and fails."""
    reverted = (
        'bloomperf doctor "${MODEL[@]}" \\\n    --device',
        "bloomperf doctor \\\n    --device",
    )
    root = scratch_checkout(tmp_path, reverted)
    done = rehearse(root, tmp_path / "out", PHASES="main")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 1, log[-4000:]
    assert "failed step: doctor (exit 1)" in log
    assert re.search(r"fail +disk +--model: building bloom-176b with 70 layers", log), log


@pytest.mark.cpu
def test_a_plan_over_the_budget_is_refused_before_any_step(tmp_path: Path) -> None:
    done = rehearse(ROOT, tmp_path / "out", BUDGET_S="539")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 2, log
    assert "=== [+" not in log
    assert "over BUDGET_S=539: not started" in log
