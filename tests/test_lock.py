"""The device lock, held and contested by two real processes."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import bloomperf.catalog.topology
from bloomperf.catalog.topology import Gpu, gpu_topology
from bloomperf.cli import build_parser
from bloomperf.cli.calibrate import calibrate_command
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.lock import hold_device_lock, lock_path
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import lock_key
from tests.nvml_replay import NvmlReplay

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from bloomperf.harness.lock import hold_device_lock
    with hold_device_lock(sys.argv[1], folder=Path(sys.argv[2])):
        print("held", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
    """
)


def start_holder(key: str, folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, key, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = start_holder("GPU-aaaa,GPU-bbbb", tmp_path)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def test_second_run_refuses_with_the_first_runs_pid(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    with (
        pytest.raises(BloomperfError, match=rf"PID {holder.pid}\) holds GPU GPU-bbbb") as info,
        hold_device_lock("GPU-bbbb,GPU-cccc", folder=tmp_path),
    ):
        pass
    assert info.value.exit_code == 2
    assert "--no-lock" in str(info.value) and "\n" not in str(info.value)
    # The refused run took nothing: GPU-cccc is still free for a third run.
    with hold_device_lock("GPU-cccc", folder=tmp_path):
        pass


def test_disjoint_devices_do_not_conflict(holder: subprocess.Popen[str], tmp_path: Path) -> None:
    with hold_device_lock("GPU-cccc", folder=tmp_path):
        assert lock_path(tmp_path, "GPU-cccc").read_text().strip() == str(os.getpid())


def test_no_lock_runs_anyway(holder: subprocess.Popen[str], tmp_path: Path) -> None:
    entered = False
    with hold_device_lock("GPU-aaaa", enabled=False, folder=tmp_path):
        entered = True  # the holder has GPU-aaaa: a lock taken here would have refused
    assert entered
    with pytest.raises(BloomperfError), hold_device_lock("GPU-aaaa", folder=tmp_path):
        pass  # the holder really holds it


def test_released_on_normal_exit(holder: subprocess.Popen[str], tmp_path: Path) -> None:
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "released"
    with hold_device_lock("GPU-aaaa,GPU-bbbb", folder=tmp_path):
        pass


def test_no_stale_lock_after_sigkill(holder: subprocess.Popen[str], tmp_path: Path) -> None:
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    with hold_device_lock("GPU-aaaa", folder=tmp_path):
        pass


def test_cpu_lock_names_the_cpu(tmp_path: Path) -> None:
    proc = start_holder("cpu", tmp_path)
    try:
        with (
            pytest.raises(BloomperfError, match=rf"PID {proc.pid}\) holds the CPU"),
            hold_device_lock("cpu", folder=tmp_path),
        ):
            pass
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_device_names_never_become_paths(tmp_path: Path) -> None:
    path = lock_path(tmp_path, "../../etc/passwd")
    assert path.parent == tmp_path and "/" not in path.name


def test_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me")
    lock_path(tmp_path, "cpu").symlink_to(target)
    with (
        pytest.raises(BloomperfError, match="cannot open the lock file"),
        hold_device_lock("cpu", folder=tmp_path),
    ):
        pass
    assert target.read_text() == "keep me"


def test_unwritable_lock_folder_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(BloomperfError, match="cannot create the lock folder"),
        hold_device_lock("cpu", folder=blocker / "locks"),
    ):
        pass


# ---- which GPUs a run locks ------------------------------------------------------------------


def test_a_run_locks_exactly_the_gpus_its_groups_use() -> None:
    """--tp 4 on 8 visible GPUs: the DeepSpeed groups use GPUs 0-3 and leave 4-7 free; an
    accelerate group spreads over every visible GPU and locks them all."""
    gpus = tuple(Gpu(i, "NVIDIA A100-SXM4-80GB", 80 * 1024**3, 12, f"GPU-{i:04}") for i in range(8))
    topology = gpu_topology(gpus, nodes=1, driver="535.104.05", cuda="12.2")
    tp4 = RunConfig(backends=("ds-autotp", "ds-zero"), tp=4, device="cuda")
    assert lock_key(topology, tp4) == "GPU-0000,GPU-0001,GPU-0002,GPU-0003"
    with_accelerate = replace(tp4, backends=("accelerate", "ds-autotp"))
    assert lock_key(topology, with_accelerate) == ",".join(g.uuid for g in gpus)
    assert lock_key(topology) == ",".join(g.uuid for g in gpus)  # no plan: everything visible
    mig = (Gpu(3, "NVIDIA A100-SXM4-80GB", 10 * 1024**3, 12, "GPU-0003", "MIG-abcd"),)
    assert lock_key(gpu_topology(mig, 1, "", ""), RunConfig(backends=("accelerate",))) == "GPU-0003"
    # --device cpu on a GPU host: the CPU, not the GPUs a GPU run would wait for.
    for backends in (("accelerate",), ("ds-autotp", "ds-zero")):
        assert lock_key(topology, RunConfig(backends=backends, device="cpu")) == "cpu"
    assert lock_key(gpu_topology((), 1, "", ""), RunConfig(backends=("accelerate",))) == "cpu"
    # A served comparison (no groups to plan): the CPU, or every GPU vLLM would see.
    assert lock_key(topology, device="cpu") == "cpu"
    assert lock_key(topology, device="cuda") == ",".join(g.uuid for g in gpus)


def test_calibrate_and_run_on_the_same_gpus_exclude_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run holds its GPUs (by UUID, as `bloomperf run` locks them); `bloomperf calibrate` on the
    same GPUs is refused before it measures anything. Topology detection runs bloomperf's real
    NVML code on the recorded answers of a 4 x A100 machine."""
    monkeypatch.setattr(
        bloomperf.catalog.topology, "load_nvml", lambda: NvmlReplay.load("4xA100-SXM4-80GB")
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("BLOOMPERF_LOCK_DIR", str(tmp_path))
    argv = ["--device", "cuda", "--model", "tiny", "--backends", "accelerate", "--dtypes", "bf16"]
    topology = bloomperf.catalog.topology.detect_topology()
    run_key = lock_key(topology, resolve_options({"device": "cuda", "backends": "accelerate"}))
    assert run_key.count("GPU-") == 4
    args = build_parser().parse_args(["calibrate", *argv, "--repeats", "2"])
    proc = start_holder(run_key, tmp_path)
    try:
        with pytest.raises(BloomperfError, match=rf"PID {proc.pid}\) holds GPU GPU-") as info:
            calibrate_command(args, io.StringIO(), io.StringIO())
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert info.value.exit_code == 2
