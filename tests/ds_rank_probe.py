"""A rank of a test group: joins the world through DeepSpeed, all-reduces, reports (not a test)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bloomperf.backends.ds_ranks import join_rank_group


def main() -> None:
    import torch
    import torch.distributed as dist

    join_rank_group("cpu")
    rank = dist.get_rank()
    total = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(total)
    report = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "sum": int(total.item()),
        "local_size": os.environ.get("LOCAL_SIZE"),
        "node_rank": os.environ.get("CROSS_RANK"),
        "pid": os.getpid(),
    }
    out = Path(os.environ["BLOOMPERF_PROBE_DIR"]) / f"rank{rank}.json"
    out.write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
