"""Launcher commands, hostfiles, shm cleanup and skip reasons of the DeepSpeed backends
(controller side: no ranks are started here)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from bloomperf.backends import backend_class
from bloomperf.backends.compat import installed_version, version_tuple
from bloomperf.catalog.devices import VisibleDevice
from bloomperf.catalog.leftovers import FOLDER
from bloomperf.catalog.topology import planned_topology
from bloomperf.config.backend import BackendOptions
from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.dslaunch import SHM_DIR, cleanup_shm, include_argument, rank_group_command
from bloomperf.harness.launch import GroupSpec, group_command
from bloomperf.harness.session import group_gpus

ROOT = Path(__file__).resolve().parent.parent

NO_OPTIONS = BackendOptions()
REFERENCE = version_tuple(installed_version("transformers") or "0") <= (4, 43, 4)


def test_single_node_command_is_the_deepspeed_launcher() -> None:
    argv, env = rank_group_command(2, LaunchOptions(), python="/py", port=29555)
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.runner"]
    assert argv[argv.index("--num_gpus") + 1] == "2"
    assert argv[argv.index("--master_port") + 1] == "29555"
    assert argv[-3:] == ["--no_local_rank", "--module", "bloomperf.harness.worker"]
    assert env["LOCAL_SIZE"] == "2"
    assert Path(env["TORCH_EXTENSIONS_DIR"]).is_absolute()


def test_every_rank_writes_unbuffered_on_one_node_and_on_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank's last lines reach the group's log when it dies: unbuffered, on CPU, on GPUs, and
    for remote ranks through the group's .deepspeed_env."""
    _, on_cpu = rank_group_command(2, LaunchOptions(), python="/py", port=29555)
    _, on_gpus = rank_group_command(2, LaunchOptions(), python="/py", port=29555, gpus=[4, 5])
    assert on_cpu["PYTHONUNBUFFERED"] == on_gpus["PYTHONUNBUFFERED"] == "1"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    _, remote = rank_group_command(2, LaunchOptions(hostfile=hostfile), python="/py", port=29555)
    assert "PYTHONUNBUFFERED=1" in Path(remote["DS_ENV_FILE"]).read_text().splitlines()


def test_a_several_node_groups_folder_is_one_the_next_runs_cleanup_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a work folder (as ``run --dry-run`` shows the command), the .deepspeed_env goes
    into a new folder in $TMPDIR, named so that the next run removes it once this process is
    gone (``bloomperf.catalog.leftovers``)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    _, env = rank_group_command(2, LaunchOptions(hostfile=hostfile), python="/py", port=29555)
    folder = Path(env["DS_ENV_FILE"]).parent
    assert folder.parent == tmp_path and folder.name.startswith("bloomperf-group-")
    named = FOLDER.fullmatch(folder.name)
    assert named is not None and int(named[1]) == os.getpid()


def test_a_group_without_gpus_is_refused_in_one_line() -> None:
    with pytest.raises(BloomperfError) as refused:
        include_argument([])
    assert str(refused.value) == "DeepSpeed launch: the group has no GPU"
    assert include_argument([4, 5]) == "localhost:4,5"


def test_wrong_rank_count_is_one_line() -> None:
    with pytest.raises(BloomperfError, match="GPUs: gives 3 ranks, but the group needs 2"):
        rank_group_command(2, LaunchOptions(), gpus=[0, 1, 2])


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
    assert (
        ds_inference.unmet_requirement("fp16", "cpu", NO_OPTIONS) == "fused kernels need a CUDA GPU"
    )
    on_gpu = ds_inference.unmet_requirement("fp16", "cuda", NO_OPTIONS)
    if REFERENCE:
        assert on_gpu is None
    else:
        assert on_gpu is not None and "transformers<=4.43.4" in on_gpu
        assert "install the reference profile" in on_gpu


def test_autotp_runs_anywhere_but_int8() -> None:
    autotp = backend_class("ds-autotp")
    assert autotp.unmet_requirement("fp32", "cpu", NO_OPTIONS) is None
    assert autotp.unmet_requirement("bf16", "cuda", NO_OPTIONS) is None
    assert "fused kernels" in str(autotp.unmet_requirement("int8", "cpu", NO_OPTIONS))


def test_zero_offload_reasons(tmp_path: Path) -> None:
    zero = backend_class("ds-zero")
    assert zero.unmet_requirement("bf16", "cpu", BackendOptions(zero_offload="cpu")) is None
    assert "nvme_path" in str(
        zero.unmet_requirement("bf16", "cpu", BackendOptions(zero_offload="nvme"))
    )
    assert "not one of" in str(
        zero.unmet_requirement("bf16", "cpu", BackendOptions(zero_offload="tape"))
    )
    # accelerate's --offload disk in the same run is no ds-zero setting
    assert zero.unmet_requirement("bf16", "cpu", BackendOptions(offload="disk")) is None


def test_world_sizes() -> None:
    autotp, zero = backend_class("ds-autotp"), backend_class("ds-zero")
    assert autotp.world_size("cpu", 0, NO_OPTIONS) == 1
    assert autotp.world_size("cpu", 0, BackendOptions(tp=2)) == 2
    assert autotp.world_size("cuda", 8, NO_OPTIONS) == 8
    assert zero.world_size("cuda", 4, NO_OPTIONS) == 4


# ---- finding 5: a group runs on, and is measured on, the GPUs bloomperf chose ----------------


def plan_group(backend: str, monkeypatch: pytest.MonkeyPatch, visible: str) -> GroupSpec:
    """The GroupSpec bloomperf builds for ``backend`` on an 8×A100 under CUDA_VISIBLE_DEVICES."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    topology = planned_topology("8xA100-80GB")
    world_size = backend_class(backend).world_size("cuda", len(topology.gpus), NO_OPTIONS)
    return GroupSpec(
        backend=backend,
        dtype="fp16",
        checkpoint=Path("/nowhere"),
        device="cuda",
        new_tokens=100,
        world_size=world_size,
        devices=group_gpus(topology, "cuda", False, backend, world_size),
    )


def deepspeed_rank_environment(argv: list[str], runner_env: dict[str, str], gpus: int) -> str:
    """CUDA_VISIBLE_DEVICES of rank 0, as DeepSpeed 0.19.8 computes it from ``argv``.

    DeepSpeed's own functions, in runner.main's order: parse_args, the CUDA_VISIBLE_DEVICES
    branch (quoted below: it only runs when the variable reaches the runner), the resource pool
    of a single machine (``gpus``: torch's device count there), parse_inclusion_exclusion,
    apply_num_nodes_and_gpus, encode_world_info; then launch.py's decoding and the CUDA
    accelerator's set_visible_devices_envs.
    """
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator
    from deepspeed.launcher import runner

    args = runner.parse_args(argv[argv.index("deepspeed.launcher.runner") + 1 :])
    visible = runner_env.get("CUDA_VISIBLE_DEVICES", "")
    filtered = len(args.include) or len(args.exclude) or args.num_nodes > 1 or args.num_gpus > 0
    if len(visible) and not filtered:  # else runner.main prints "... but ignoring it ..."
        args.include = f"localhost:{visible}"
    if args.num_nodes >= 0 or args.num_gpus >= 0:
        assert args.include == "" and args.exclude == ""  # runner.main raises otherwise
    active = runner.parse_inclusion_exclusion({"localhost": gpus}, args.include, args.exclude)
    active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    world_info = json.loads(base64.urlsafe_b64decode(runner.encode_world_info(active)))
    local_ids = world_info[next(iter(world_info))]  # launch.py, node_rank 0
    rank_env: dict[str, str] = {}
    CUDA_Accelerator().set_visible_devices_envs(rank_env, local_ids)
    return rank_env["CUDA_VISIBLE_DEVICES"]


def runner_environment(argv: list[str], extra_env: dict[str, str]) -> dict[str, str]:
    """The runner's environment: ours plus the extra, less what an ``env -u`` prefix unsets."""
    env = {**os.environ, **extra_env}
    if argv[:2] == ["env", "-u"]:
        env.pop(argv[2], None)
    return env


def test_ranks_get_the_users_gpus_through_deepspeeds_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = plan_group("ds-autotp", monkeypatch, "4,5,6,7")
    assert [d.index for d in spec.devices] == [4, 5, 6, 7]
    argv, extra_env = group_command(spec)
    assert argv[argv.index("--include") + 1] == "localhost:4,5,6,7"
    assert "--num_gpus" not in argv
    assert extra_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    env = runner_environment(argv, extra_env)
    assert "CUDA_VISIBLE_DEVICES" not in env  # so the runner counts all 8 GPUs
    assert deepspeed_rank_environment(argv, env, gpus=8) == "4,5,6,7"


def test_num_gpus_would_have_moved_the_ranks_to_gpus_0_to_3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finding itself, on DeepSpeed's code: the command bloomperf used to build."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    argv, extra_env = rank_group_command(4, LaunchOptions(), python="/py", port=29555)
    assert "--num_gpus" in argv
    env = runner_environment(argv, extra_env)
    assert deepspeed_rank_environment(argv, env, gpus=8) == "0,1,2,3"


def test_a_plain_worker_is_pinned_to_its_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = plan_group("accelerate", monkeypatch, "4,5,6,7")
    assert spec.world_size == 1 and [d.index for d in spec.devices] == [4, 5, 6, 7]
    argv, extra_env = group_command(spec)
    assert argv[1:] == ["-m", "bloomperf.harness.worker"]
    assert extra_env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_tp_below_the_gpu_count_uses_the_first_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,6,5,4")
    topology = planned_topology("8xA100-80GB")
    gpus = group_gpus(topology, "cuda", False, "ds-autotp", 2)
    assert [d.index for d in gpus] == [7, 6]  # CUDA's order: the first two the user listed
    with pytest.raises(BloomperfError, match="--tp 8: the group needs 8 GPUs, but only 4"):
        group_gpus(topology, "cuda", False, "ds-autotp", 8)


def test_mig_instances_run_plain_workers_but_no_deepspeed_ranks() -> None:
    mig = VisibleDevice(2, "MIG-5c4f1b3e-0000-4000-8000-000000000001")

    def spec(backend: str, world_size: int) -> GroupSpec:
        devices = (mig,) * world_size
        return GroupSpec(backend, "fp16", Path("/x"), "cuda", 100, world_size, devices=devices)

    assert group_command(spec("accelerate", 1))[1]["CUDA_VISIBLE_DEVICES"] == mig.mig_uuid
    assert (
        group_command(spec("ds-autotp", 1))[0][-1] == "bloomperf.harness.worker"
    )  # a plain worker too
    with pytest.raises(BloomperfError, match="cannot start ranks on the MIG instance MIG-5c4f"):
        group_command(spec("ds-autotp", 2))


def test_deepspeeds_launcher_really_starts_the_ranks_on_gpus_4_to_7(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The whole chain, run: bloomperf's argv (``env -u`` prefix included), DeepSpeed's runner,
    its launch.py, four ranks. DeepSpeed's CPU accelerator stands in for the CUDA one: told by
    LOCAL_SIZE that the machine has 8 devices, it sets CUDA_VISIBLE_DEVICES for the ranks with
    the same ``",".join(ids)`` as the CUDA accelerator."""
    spec = plan_group("ds-autotp", monkeypatch, "4,5,6,7")
    gpus = [d.index for d in spec.devices]
    argv, extra_env = rank_group_command(4, LaunchOptions(), module="tests.ds_env_probe", gpus=gpus)
    env = {
        **os.environ,
        **extra_env,
        "DS_ACCELERATOR": "cpu",
        "LOCAL_SIZE": "8",
        "BLOOMPERF_PROBE_DIR": str(tmp_path),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "ignoring it" not in done.stdout  # the runner never saw CUDA_VISIBLE_DEVICES
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert {r["CUDA_VISIBLE_DEVICES"] for r in reports} == {"4,5,6,7"}
    assert {r["CUDA_DEVICE_ORDER"] for r in reports} == {"PCI_BUS_ID"}
    assert sorted(r["LOCAL_RANK"] for r in reports) == ["0", "1", "2", "3"]
