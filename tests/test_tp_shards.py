"""TP=2 really splits the weights: each rank of a real 2-rank auto-TP group (DeepSpeed's launcher,
gloo on CPU) holds 3·hidden/2 rows of query_key_value, and still gives the plain model's tokens.

The ``tp`` a backend reports is what it was asked for; the shard shape is what DeepSpeed did. One
case only (test_ds_backends.py runs the others), so the TP mutation canary stays quick."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bloomperf.dslaunch import cleanup_shm, rank_group_command, shm_segments
from bloomperf.models import MODEL_SHAPES, resolve_model

pytest.importorskip("deepspeed")


def test_each_tp_rank_holds_its_share_of_query_key_value(tmp_path: Path) -> None:
    tiny = resolve_model("tiny").path  # the suite's cache (conftest.py)
    hidden = MODEL_SHAPES["tiny"].hidden_size
    argv, extra_env = rank_group_command(2, {}, module="tests.ds_backend_probe")
    before = shm_segments()
    env = {
        **os.environ,
        **extra_env,
        "BLOOMPERF_PROBE_MODEL": str(tiny),
        "BLOOMPERF_PROBE_CASES": json.dumps([["ds-autotp", {}]]),
        "BLOOMPERF_PROBE_DIR": str(tmp_path),
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
    for rank in range(2):
        (result,) = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["details"]["qkv_shape"] == [3 * hidden // 2, hidden], rank
        assert result["bs1"]["equal"] and result["bs8"]["equal"], rank
