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

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.config.run import LaunchOptions
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
