"""Launcher commands, hostfiles, shm cleanup and skip reasons of the DeepSpeed backends
(controller side: no ranks are started here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bloomperf.backends import backend_class
from bloomperf.backends.compat import installed_version, version_tuple
from bloomperf.dslaunch import (
    SHM_DIR,
    cleanup_shm,
    decode_nodes,
    rank_group_command,
    read_hostfile,
)
from bloomperf.errors import BloomperfError

REFERENCE = version_tuple(installed_version("transformers") or "0") <= (4, 43, 4)


def test_single_node_command_is_the_deepspeed_launcher() -> None:
    argv, env = rank_group_command(2, {"master_port": 29555}, python="/py")
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.runner"]
    assert argv[argv.index("--num_gpus") + 1] == "2"
    assert argv[argv.index("--master_port") + 1] == "29555"
    assert argv[-3:] == ["--no_local_rank", "--module", "bloomperf.worker"]
    assert env["LOCAL_SIZE"] == "2"
    assert Path(env["TORCH_EXTENSIONS_DIR"]).is_absolute()


def test_remote_hostfile_goes_through_deepspeeds_multinode_runner(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nworker-1 slots=8\n\nworker-2 slots=8\n")
    argv, env = rank_group_command(
        16, {"hostfile": str(hostfile), "launcher": "openmpi"}, python="/py"
    )
    assert "--no_ssh" not in argv and "bloomperf.dslaunch" not in argv
    assert argv[argv.index("--hostfile") + 1] == str(hostfile)
    assert argv[argv.index("--master_addr") + 1] == "worker-1"
    assert argv[argv.index("--launcher") + 1] == "openmpi"
    assert "LOCAL_SIZE" not in env  # set per node by the launcher


def test_local_hostfile_starts_one_launcher_per_node(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n127.0.0.1 slots=2\n")
    argv, _ = rank_group_command(4, {"hostfile": str(hostfile)}, python="/py")
    assert argv[:3] == ["/py", "-m", "bloomperf.dslaunch"]
    nodes = decode_nodes(argv[3:])
    assert [node[node.index("--node_rank") + 1] for node in nodes] == ["0", "1"]
    assert all("--no_ssh" in node for node in nodes)
    assert len({node[node.index("--master_port") + 1] for node in nodes}) == 1


def test_num_nodes_option_trims_the_hostfile(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    argv, _ = rank_group_command(1, {"hostfile": str(hostfile), "num_nodes": 1}, python="/py")
    (node,) = decode_nodes(argv[3:])
    assert node[node.index("--num_nodes") + 1] == "1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'HOST slots=N' lines"),
        ("node1 slots=2; rm -rf /\n", "expected 'HOST slots=N'"),
        ("$(reboot) slots=1\n", "expected 'HOST slots=N'"),
        ("node1 slots=0\n", "expected 'HOST slots=N'"),
        ("node1 slots=1\nnode1 slots=1\n", "listed twice"),
    ],
)
def test_bad_hostfiles_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text(text)
    with pytest.raises(BloomperfError, match=message) as info:
        read_hostfile(hostfile)
    assert "\n" not in str(info.value)


def test_missing_hostfile_and_wrong_rank_count(tmp_path: Path) -> None:
    with pytest.raises(BloomperfError, match="hostfile not found"):
        rank_group_command(2, {"hostfile": str(tmp_path / "nope")})
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=1\n")
    with pytest.raises(BloomperfError, match="gives 1 ranks, but the group needs 2"):
        rank_group_command(2, {"hostfile": str(hostfile)})


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm")
def test_cleanup_shm_removes_only_unused_new_segments() -> None:
    tag = f"bloomperf_test_{os.getpid()}"
    left = SHM_DIR / f"deepspeed_allreduce_buffer_{tag}_left"
    held = SHM_DIR / f"deepspeed_allreduce_buffer_{tag}_held"
    old = SHM_DIR / f"deepspeed_allreduce_buffer_{tag}_old"
    old.write_bytes(b"x")
    before = {str(old)}
    left.write_bytes(b"x")
    held.write_bytes(b"x")
    try:
        with open(held, "rb"):  # a live rank still has it open
            removed = cleanup_shm(before)
        assert str(left) in removed and not left.exists()
        assert held.exists() and old.exists()
    finally:
        for path in (left, held, old):
            path.unlink(missing_ok=True)


def test_fused_kernels_are_skipped_on_cpu_with_the_reason() -> None:
    ds_inference = backend_class("ds-inference")
    assert ds_inference.unmet_requirement("fp16", "cpu", {}) == "fused kernels need a CUDA GPU"
    on_gpu = ds_inference.unmet_requirement("fp16", "cuda", {})
    if REFERENCE:
        assert on_gpu is None
    else:
        assert on_gpu is not None and "transformers<=4.43.4" in on_gpu
        assert "install the reference profile" in on_gpu


def test_autotp_runs_anywhere_but_int8() -> None:
    autotp = backend_class("ds-autotp")
    assert autotp.unmet_requirement("fp32", "cpu", {}) is None
    assert autotp.unmet_requirement("bf16", "cuda", {}) is None
    assert "fused kernels" in str(autotp.unmet_requirement("int8", "cpu", {}))


def test_zero_offload_reasons(tmp_path: Path) -> None:
    zero = backend_class("ds-zero")
    assert zero.unmet_requirement("bf16", "cpu", {"zero_offload": "cpu"}) is None
    assert "nvme_path" in str(zero.unmet_requirement("bf16", "cpu", {"zero_offload": "nvme"}))
    assert "not one of" in str(zero.unmet_requirement("bf16", "cpu", {"zero_offload": "tape"}))
    # accelerate's --offload disk in the same run is no ds-zero setting
    assert zero.unmet_requirement("bf16", "cpu", {"offload": "disk"}) is None


def test_world_sizes() -> None:
    autotp, zero = backend_class("ds-autotp"), backend_class("ds-zero")
    assert autotp.world_size("cpu", 0, {}) == 1
    assert autotp.world_size("cpu", 0, {"tp": 2}) == 2
    assert autotp.world_size("cuda", 8, {}) == 8
    assert zero.world_size("cuda", 4, {}) == 4


def test_dslaunch_fanout_propagates_a_failing_node() -> None:
    import subprocess

    ok = [sys.executable, "-c", "import time; time.sleep(30)"]
    bad = [sys.executable, "-c", "raise SystemExit(3)"]
    argv = [sys.executable, "-m", "bloomperf.dslaunch", "--node--", *ok, "--node--", *bad]
    result = subprocess.run(argv, timeout=25)
    assert result.returncode == 3
