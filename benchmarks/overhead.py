"""Does bloomperf add overhead to what it times? A benchmark script, not a test.

For each model and batch size, alternately:
  A. bloomperf's ms/token for the cell (worker process, protocol, memory sampler, everything);
  B. a bare loop in a fresh process: load the same saved checkpoint with transformers, then
     synchronise → perf_counter → generate → synchronise → perf_counter, nothing else.
Both use the same thread count (1 per process, bloomperf's CPU default) and the same inputs.
Prints the ratio A / B per round and its median. Target: median ratio ≤ 1.02.

    python benchmarks/overhead.py --models tiny,bloom-560m --batch-sizes 1,8 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bloomperf.matrix import Cell
from bloomperf.models import resolve_model
from bloomperf.options import resolve_options
from bloomperf.run import Session


def bare_loop(path: str, batch_size: int, new_tokens: int, cycles: int) -> list[float]:
    """The reference: ms/token of plain synchronised generate calls on the saved model."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from bloomperf.backends.accelerate import AccelerateBackend
    from bloomperf.backends.base import LoadRequest
    from bloomperf.workload import Workload, build_inputs, ms_per_token

    tokenizer = AutoTokenizer.from_pretrained(path)
    backend = AccelerateBackend()
    backend.load(LoadRequest(Path(path), "fp32", "cpu"))
    inputs = build_inputs(tokenizer, batch_size, backend.input_device)
    kwargs = Workload(new_tokens=new_tokens).generate_kwargs()
    samples = []
    for i in range(cycles + 1):
        backend.synchronize()
        start = time.perf_counter()
        backend.generate(inputs["input_ids"], inputs["attention_mask"], kwargs)
        backend.synchronize()
        seconds = time.perf_counter() - start
        if i:  # the first call is the warm-up, as in bloomperf
            samples.append(ms_per_token(seconds, batch_size, new_tokens))
    return samples


def run_bare(path: str, batch_size: int, new_tokens: int, cycles: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    code = (
        "import json, sys; from benchmarks.overhead import bare_loop; "
        f"print(json.dumps(bare_loop({path!r}, {batch_size}, {new_tokens}, {cycles})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return statistics.median(json.loads(out.stdout.strip().splitlines()[-1]))


def run_bloomperf(model: str, batch_size: int, new_tokens: int, cycles: int) -> float:
    options = resolve_options(
        {
            "model": model,
            "dtypes": "fp32",
            "batch_sizes": str(batch_size),
            "new_tokens": str(new_tokens),
            "cycles": str(cycles),
            "device": "cpu",
        },
        env={},
    )
    session = Session.prepare(options)
    try:
        cell = session.measure_cell(Cell("accelerate", "fp32", batch_size))
    finally:
        session.stop()
    assert cell.ms_per_token is not None, cell.message
    return cell.ms_per_token


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,bloom-560m")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    print(f"{'model':<12} {'batch':>5} {'bloomperf':>12} {'bare loop':>12} {'ratio':>7}")
    verdicts = []
    for model in args.models.split(","):
        path = str(resolve_model(model).path)
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            ratios = []
            for _ in range(args.rounds):  # alternate A and B so drift hits both alike
                a = run_bloomperf(model, batch_size, args.new_tokens, args.cycles)
                b = run_bare(path, batch_size, args.new_tokens, args.cycles)
                ratios.append(a / b)
                print(
                    f"{model:<12} {batch_size:>5} {a:>9.3f} ms {b:>9.3f} ms {a / b:>7.3f}",
                    flush=True,
                )
            median = statistics.median(ratios)
            verdicts.append((model, batch_size, median))
            print(f"{model:<12} {batch_size:>5} {'median ratio':>25} {median:>7.3f}", flush=True)
    print("\nmedian ratio bloomperf / bare loop (target <= 1.02):")
    for model, batch_size, median in verdicts:
        print(f"  {model} bs{batch_size}: {median:.3f}")
    return 0 if all(m <= 1.02 for _, _, m in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
