"""Does bloomperf add overhead to what it times? A benchmark script, not a test.

Each round starts two fresh processes on the same saved checkpoint and alternates their
cycles (A B, B A, A B, …) so that the machine's drift hits both alike:
  A. bloomperf's own path for the cell: ``Session.measure_cell`` → worker group → protocol →
     worker → backend, memory sampler and all; the cycle's time is the one bloomperf reports;
  B. a bare process: the same backend loaded with transformers, then synchronise →
     perf_counter → generate → synchronise → perf_counter, nothing else, one cycle per request.
Both use one thread (bloomperf's CPU default) and the same inputs. A round's ratio is
median(A) / median(B); fresh processes every round, because a process's own speed differs
from another's by a few percent (memory layout) and only new pairs average that out.
Prints every round and the median ratio per cell. Target: median ratio <= 1.02.

    python benchmarks/overhead.py --models tiny,bloom-560m --batch-sizes 1,8 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.workload import ms_per_token
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.02


def serve_bare(path: str, batch_size: int, new_tokens: int) -> None:
    """B's process: load, then time one synchronised generate per line read from stdin."""
    from transformers import AutoTokenizer

    from bloomperf.backends.accelerate import AccelerateBackend
    from bloomperf.backends.base import LoadRequest
    from bloomperf.catalog.workload import build_inputs, generate_kwargs

    tokenizer = AutoTokenizer.from_pretrained(path)
    backend = AccelerateBackend()
    backend.load(LoadRequest(Path(path), "fp32", "cpu"))
    inputs = build_inputs(tokenizer, batch_size, backend.input_device)
    kwargs = generate_kwargs(new_tokens)
    print("ready", flush=True)
    for _ in sys.stdin:
        backend.synchronize()
        start = time.perf_counter()
        backend.generate(inputs["input_ids"], inputs["attention_mask"], kwargs)
        backend.synchronize()
        print(time.perf_counter() - start, flush=True)


class BareProcess:
    def __init__(self, path: str, batch_size: int, new_tokens: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.update(
            CUDA_VISIBLE_DEVICES="",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            TRANSFORMERS_VERBOSITY="error",
        )
        code = (
            "from benchmarks.overhead import serve_bare; "
            f"serve_bare({path!r}, {batch_size}, {new_tokens})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        if self._read_line() != "ready":
            raise RuntimeError("bare process did not start")

    def _read_line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"bare process exited ({self.process.wait()})")
        return line.strip()

    def cycle(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return float(self._read_line())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def one_round(
    model: str, path: str, batch_size: int, new_tokens: int, cycles: int
) -> tuple[float, float]:
    """Median ms/token of A and of B, their cycles alternated."""
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
    bare = BareProcess(path, batch_size, new_tokens)
    bare_seconds: list[float] = []

    def alternate(one_cycle: Callable[[], float], warmup: int, n: int) -> list[float]:
        for _ in range(warmup):
            one_cycle()
            bare.cycle()
        timed = []
        for i in range(n):
            if i % 2:
                bare_seconds.append(bare.cycle())
                timed.append(one_cycle())
            else:
                timed.append(one_cycle())
                bare_seconds.append(bare.cycle())
        return timed

    session = Session.prepare(options)
    try:
        cell = session.measure_cell(Cell("accelerate", "fp32", batch_size), alternate)
    finally:
        session.stop()
        bare.close()
    if cell.ms_per_token is None:
        raise RuntimeError(f"bloomperf cell failed: {cell.message}")
    bare_ms = [ms_per_token(s, batch_size, new_tokens) for s in bare_seconds]
    return cell.ms_per_token, statistics.median(bare_ms)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,bloom-560m")
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=9)
    args = parser.parse_args()
    print(f"{'model':<12} {'batch':>5} {'bloomperf':>12} {'bare loop':>12} {'ratio':>7}")
    verdicts = []
    for model in args.models.split(","):
        path = str(resolve_model(model).path)
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            ratios = []
            for _ in range(args.rounds):
                a, b = one_round(model, path, batch_size, args.new_tokens, args.cycles)
                ratios.append(a / b)
                print(
                    f"{model:<12} {batch_size:>5} {a:>9.3f} ms {b:>9.3f} ms {a / b:>7.3f}",
                    flush=True,
                )
            median = statistics.median(ratios)
            verdicts.append((model, batch_size, median))
            print(f"{model:<12} {batch_size:>5} {'median ratio':>25} {median:>7.3f}", flush=True)
    print(f"\nmedian ratio bloomperf / bare loop (target <= {TARGET}):")
    for model, batch_size, median in verdicts:
        print(f"  {model} bs{batch_size}: {median:.3f}")
    return 0 if all(m <= TARGET for _, _, m in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
