"""TP=2 and ZeRO-3 really split the weights: each rank of a real 2-rank auto-TP group (DeepSpeed's
launcher, gloo on CPU) holds 3·hidden/2 rows of query_key_value, each ZeRO-3 rank half of its
elements (ZeRO's own ds_numel / ds_tensor), and both still give the plain model's tokens.

The ``tp`` a backend reports is what it was asked for; the shard shape is what DeepSpeed did. One
case only (test_ds_backends.py runs the others), so the TP mutation canary stays quick."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.catalog.caches import worker_caches
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.cli.shard import shard_command
from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.dslaunch import cleanup_shm, rank_group_command, shm_segments

pytest.importorskip("deepspeed")


def run_probe(cases: list[list[object]], out: Path) -> list[dict[str, Any]]:
    """Run the probe's cases on a real 2-rank group; each rank's single result."""
    tiny = resolve_model("tiny").path  # the suite's cache (conftest.py)
    argv, extra_env = rank_group_command(2, LaunchOptions(), module="tests.ds_backend_probe")
    before = shm_segments()
    env = {
        **os.environ,
        **extra_env,
        "BLOOMPERF_PROBE_MODEL": str(tiny),
        "BLOOMPERF_PROBE_CASES": json.dumps(cases),
        "BLOOMPERF_PROBE_DIR": str(out),
        "CUDA_VISIBLE_DEVICES": "",
    }
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=900,
            start_new_session=True,
        )
    finally:
        cleanup_shm(before)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    results = []
    for rank in range(2):
        (result,) = json.loads((out / f"rank{rank}.json").read_text())
        assert result["bs1"]["equal"] and result["bs8"]["equal"], rank
        results.append(result)
    return results


def test_each_tp_rank_holds_its_share_of_query_key_value(tmp_path: Path) -> None:
    hidden = MODEL_SHAPES["tiny"].hidden_size
    for result in run_probe([["ds-autotp", {}]], tmp_path):
        assert result["details"]["qkv_shape"] == [3 * hidden // 2, hidden]


def test_each_zero_rank_holds_half_of_each_parameter(tmp_path: Path) -> None:
    hidden = MODEL_SHAPES["tiny"].hidden_size
    for result in run_probe([["ds-zero", {}]], tmp_path):
        # ZeRO-3's own record: query_key_value's 3·hidden x hidden weights, half on each rank.
        whole = 3 * hidden * hidden
        assert result["details"]["partition"] == {
            "ds_numel": whole,
            "rank_numel": whole // 2,
            "device": "cpu",
        }


# ---- bloomperf shard --device cuda: DeepSpeed's runner is told which GPUs -------------------


@given(
    visible=st.lists(st.integers(0, 15), min_size=2, max_size=8, unique=True),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_shard_on_gpus_includes_the_visible_gpus_never_num_gpus(
    visible: list[int], data: st.DataObject
) -> None:
    """Whatever GPUs CUDA_VISIBLE_DEVICES leaves, shard's ranks run on the first tp of them:
    DeepSpeed's own runner parser reads ``--include localhost:<ids>`` and no GPU count (its
    ``--num_gpus`` drops CUDA_VISIBLE_DEVICES and takes GPUs 0..tp-1)."""
    from deepspeed.launcher.runner import parse_args

    tp = data.draw(st.integers(2, len(visible)))
    argv, env = shard_command(tp, visible)
    assert argv[:3] == ["env", "-u", "CUDA_VISIBLE_DEVICES"]
    runner = argv.index("deepspeed.launcher.runner")
    parsed = parse_args(argv[runner + 1 :])
    assert parsed.include == "localhost:" + ",".join(map(str, visible[:tp]))
    assert parsed.num_gpus == -1 and "--num_gpus" not in argv
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_shard_refuses_more_ranks_than_visible_gpus_and_keeps_num_gpus_on_cpu() -> None:
    with pytest.raises(BloomperfError, match="--tp 4: only 2 GPUs are visible"):
        shard_command(4, [0, 1])
    argv, env = shard_command(2, None)
    assert "--num_gpus" in argv and "--include" not in argv and env["LOCAL_SIZE"] == "2"
    assert shard_command(1, [3])[0][-1] == "bloomperf.cli.shard"


@given(visible=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True))
def test_shard_at_tp1_on_gpus_runs_on_the_first_visible_gpu_by_nvml_index(
    visible: list[int],
) -> None:
    """One plain process, no launcher: it gets the first visible GPU by its NVML index, in PCI
    order (CUDA's default FASTEST_FIRST may number the GPUs otherwise)."""
    argv, env = shard_command(1, visible)
    assert argv[-1] == "bloomperf.cli.shard" and "deepspeed.launcher.runner" not in argv
    gpu = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(visible[0])}
    # Like every rank group, it builds DeepSpeed's op in bloomperf's extensions folder.
    assert env == {**worker_caches(), **gpu}
    assert shard_command(1, None)[1] == worker_caches()  # on CPU run_shard hides every GPU
