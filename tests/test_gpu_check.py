"""benchmarks/gpu_check.sh, the first check on a GPU machine: its CPU dry mode runs every step
(install aside) on the tiny model, so the script cannot rot while no GPU is at hand. The GPU run
itself stays unverified until a GPU machine runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
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
        "GPU_CHECK_WORK": str(tmp_path / "work"),
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
    doctor = json.loads((tmp_path / "work" / "doctor.json").read_text())
    assert {c["name"] for c in doctor["checks"]} >= {"nvml", "deepspeed-jit", "shm"}
    topology = json.loads((tmp_path / "work" / "topology.json").read_text())
    assert topology["topology"]["id"] == "cpu"
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
        "GPU_CHECK_WORK": str(out.parent / "work"),
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
    # The plan first: boxes with their kill margins inside, at least 10 % of the call's 600 s
    # left as slack, the JIT build's wait counted.
    assert log.startswith("plan (cuda, rehearsal of the h200 run): budget 600 s, slack kept")
    table = plan_table(log)
    assert list(table)[:5] == ["install", "doctor", "topology", "record-nvml", "accelerate"]
    assert "jit-wait" in table and list(table).index("jit-wait") + 1 == list(table).index(
        "ds-inference"
    )
    total = 0
    for label, (box, margin, cumulative, slack) in table.items():
        total += box
        assert 0 <= margin < box or box == margin == 0, label
        assert (cumulative, slack) == (total, 600 - total), label
    assert total <= 540, log[:2000]
    # Every step of the H200 run ran, in priority order: NVML and accelerate before ds-inference.
    steps = steps_of(log)

    def position(prefix: str) -> int:
        return next(i for i, s in enumerate(steps) if s.startswith(prefix))

    assert position("record NVML") < position("bloomperf run accelerate:")
    assert position("bloomperf run accelerate:") < position("bloomperf run ds-inference:")
    assert position("JIT-build") < position("bloomperf doctor")
    doctor = json.loads((tmp_path / "work" / "doctor.json").read_text())
    statuses = {c["name"]: c["status"] for c in doctor["checks"]}
    assert statuses["disk"] == statuses["ram"] == "ok", doctor
    disk = next(c for c in doctor["checks"] if c["name"] == "disk")
    assert "bloom-176b (2 layers)" in disk["reason"]
    topology = json.loads((tmp_path / "work" / "topology.json").read_text())
    assert topology["topology"]["id"] == "1xH200-141GB"
    assert "JIT build: arch 9.0+PTX, MAX_JOBS=8" in log
    # One group per batch size, each loading from the checkpoint itself: no DeepSpeed copy.
    for batch in (1, 8, 64):
        assert f"ds-inference fp16 x1: batches {batch}, 0 skipped; load hf, no copy" in log
    assert (
        "(RAM from --host-ram / BLOOMPERF_HOST_RAM)"
        in (next(c for c in doctor["checks"] if c["name"] == "ram")["reason"])
    )
    assert (
        (tmp_path / "out" / "progress.txt")
        .read_text()
        .splitlines()[-1]
        .endswith("finished: every step ended (0 failed)")
    )
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
    reverted = ('bloomperf doctor "${MODEL[@]}" \\\n', "bloomperf doctor \\\n")
    root = scratch_checkout(tmp_path, reverted)
    done = rehearse(root, tmp_path / "out", PHASES="main")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 1, log[-4000:]
    assert "failed step: doctor (exit 1)" in log
    assert re.search(r"fail +disk +--model: building bloom-176b with 70 layers", log), log


@pytest.mark.cpu
def test_a_plan_without_its_slack_is_refused_before_any_step(tmp_path: Path) -> None:
    done = rehearse(ROOT, tmp_path / "out", BUDGET_S="580")  # the plan's 530 s leave 8.6 %
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 2, log
    assert "=== [+" not in log
    assert "leaving less than 10 % of BUDGET_S=580: not started" in log


def plan_table(log: str) -> dict[str, tuple[int, int, int, int]]:
    """step -> (box, kill margin, cumulative, slack) from the plan the script prints first."""
    rows = re.findall(r"^  ([a-z-]+) +(\d+) +(\d+) +(\d+) +(-?\d+)$", log, re.MULTILINE)
    return {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}


@pytest.mark.cpu
def test_a_step_killed_at_its_box_leaves_the_earlier_steps_results(tmp_path: Path) -> None:
    """The real script on this CPU, accelerate's box cut to 4 s: it is stopped inside its box,
    the results of doctor and topology are already under $OUT (summary and archive rewritten at
    each step's end), and when the call's limit then kills the whole script (SIGKILL: no trap
    runs), progress.txt's last line says where it stopped."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "GPU_CHECK_DEVICE": "cpu",
        "PHASES": "main",
        "OUT": str(out),
        "PYTHON": sys.executable,
        "BATCHES": "1",
        "NEW_TOKENS": "2",
        "BUDGET_S": "3000",
        # Room for the steps before on a busy CPU; accelerate cannot even import torch in 4 s.
        "BOXES": "doctor=400,topology=200,accelerate=4",
        "GPU_CHECK_WORK": str(tmp_path / "work"),
    }
    script = subprocess.Popen(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    progress = out / "progress.txt"
    try:
        deadline = time.monotonic() + 600
        while "running predict" not in (progress.read_text() if progress.exists() else ""):
            assert script.poll() is None and time.monotonic() < deadline, progress.read_text()
            time.sleep(0.5)
    finally:
        os.killpg(script.pid, signal.SIGKILL)  # the call's limit: nothing gets to clean up
        script.wait()
    lines = progress.read_text().splitlines()
    assert any("ended doctor: rc=0" in line for line in lines), lines
    ended = next(line for line in lines if "ended accelerate" in line)
    found = re.search(r"rc=(\d+) after (\d+) s", ended)
    assert found is not None and found[1] in ("124", "137") and int(found[2]) <= 5, ended
    assert "running predict" in lines[-1] and "the call ended during predict" in lines[-1]
    with tarfile.open(out / "gpu-check.tgz") as archive:
        names = archive.getnames()
        doctor = json.load(archive.extractfile("work/doctor.json"))  # type: ignore[arg-type]
    assert "work/topology.json" in names and doctor["checks"], names
    assert (out / "summary.txt").read_text().startswith("cell ")
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-check.tgz",
        "log.txt",
        "progress.txt",
        "summary.txt",
    ]


@pytest.mark.cpu
def test_the_reference_phase_alone_installs_deepspeed_and_loads_without_a_copy(
    tmp_path: Path,
) -> None:
    done = rehearse(ROOT, tmp_path / "out", PHASES="ref")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 0, log[-4000:]
    steps = steps_of(log)
    assert steps[0].startswith("install ") and steps[0].split()[1].endswith("/wheels"), steps
    assert "would install" in log and "deepspeed" in log.split("would install", 1)[1][:300]
    assert "ds-inference fp16 x1: batches 64, 0 skipped; load hf, no copy" in log


@pytest.mark.cpu
def test_h200_rehearsal_fails_without_the_documented_host_ram(tmp_path: Path) -> None:
    """The fix reverted: without --host-ram bloomperf judges the H200's host RAM by a
    Firecracker guest's MemTotal, which starts far below 128 GiB: the DeepSpeed groups would be
    skipped there, and the rehearsal fails."""
    reverted = ('HOST_RAM_ARGS=(--host-ram "${GPU_CHECK_HOST_RAM:-128GiB}")', "HOST_RAM_ARGS=()")
    root = scratch_checkout(tmp_path, reverted)
    done = rehearse(root, tmp_path / "out", PHASES="ref")
    log = (tmp_path / "out" / "log.txt").read_text()
    assert done.returncode == 1, log[-4000:]
    assert re.search(
        r"rehearse: fail +ram: ds-inference fp16 x1 \(host RAM 0.0 GiB from MemTotal", log
    )
    assert "failed step: ds-inference (exit 1)" in log
