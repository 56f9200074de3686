"""A rank of a test group that only reports which devices DeepSpeed's launcher gave it (not a
test): its CUDA variables, rank and local rank, written to $BLOOMPERF_PROBE_DIR/rank<N>.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "LOCAL_RANK", "WORLD_SIZE")

if __name__ == "__main__":
    report = {key: os.environ.get(key) for key in KEYS}
    out = Path(os.environ["BLOOMPERF_PROBE_DIR"]) / f"rank{os.environ['RANK']}.json"
    out.write_text(json.dumps(report))
