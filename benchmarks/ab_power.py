"""Detection power of ``bloomperf ab`` (``python benchmarks/detection_power.py --ab``).

Each trial is one real ``ab`` comparison of one cell (the engine of ``bloomperf ab``: both arms'
worker groups alive, cycles alternated in randomly ordered pairs, adaptive stopping) between arm
A, this environment, and an arm B of one kind:

* ``A/A``: B is the same environment (a false alarm is a "slower" verdict);
* ``+5 %``, ``+10 %``: B's ``PYTHONPATH`` holds a ``sitecustomize`` that makes every
  ``generate`` of that worker process do that much more CPU work (measured in the thread's CPU
  time, so that other load slows it as it slows the model) — a change in the environment,
  reaching the workers as a package change would.

The kinds take turns trial by trial. Reported per kind: the verdicts, the median B/A, pairs and
seconds per trial, and the machine's noise while the trials ran (the cycle-to-cycle CV of arm A
and the spread of the per-pair log-ratios of the A/A trials).

    python benchmarks/detection_power.py --ab --trials 10
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER
from bloomperf.catalog.checkpoints import default_cache_dir, resolve_model
from bloomperf.harness.interleave import Comparison, Settings, arm_spec, compare_group
from bloomperf.harness.launch import GroupSpec
from bloomperf.harness.matrix import Group
from bloomperf.harness.overlay import Arm, PackageSource, prepare_arm

PERCENT_ENV = "BLOOMPERF_INJECTED_SLOWDOWN_PERCENT"
SITECUSTOMIZE = f'''"""Injected by benchmarks/ab_power.py: generate does PERCENT % more CPU work."""
import functools
import os
import time

from transformers.generation.utils import GenerationMixin

_percent = float(os.environ["{PERCENT_ENV}"])
_generate = GenerationMixin.generate


@functools.wraps(_generate)
def generate(self, *args, **kwargs):
    start = time.thread_time()
    output = _generate(self, *args, **kwargs)
    # Burn CPU until this thread has used PERCENT % more CPU time: extra work that other load
    # slows down exactly as it slows the model's own (a wall-clock wait would not be, and on a
    # busy machine its spin overshoots by a scheduler slice: "10 %" measured as +20 %).
    used = time.thread_time() - start
    end = time.thread_time() + used * _percent / 100.0
    while time.thread_time() < end:
        pass
    return output


GenerationMixin.generate = generate
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ab", action="store_true", help="(this mode)")
    parser.add_argument("--trials", type=int, default=10, help="trials per kind [10]")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--backend", default="accelerate")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--slowdowns", default="5,10", help="percent, comma-separated")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--confidence", type=float, default=0.99)
    parser.add_argument("--max-time", type=float, default=600.0, help="seconds per trial")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def prepare_arms(percent: float, folder: Path) -> dict[str, Arm]:
    """Arm A: this environment; arm B: the same, plus the injected slowdown when ``percent``."""
    source = PackageSource()
    cache = default_cache_dir()
    settings_b = {"PYTHONPATH": str(folder), PERCENT_ENV: str(percent)} if percent else {}
    return {
        "a": prepare_arm("a", sys.executable, {}, (), source, cache),
        "b": prepare_arm("b", sys.executable, settings_b, (), source, cache),
    }


def run_trial(
    arms: dict[str, Arm], args: argparse.Namespace, base: GroupSpec, seed: int
) -> Comparison:
    settings = Settings(
        tolerance=args.tolerance,
        confidence=args.confidence,
        max_time_s=args.max_time,
        seed=seed,
    )
    group = Group(args.backend, args.dtype, (args.batch_size,))
    specs = {name: arm_spec(base, arm) for name, arm in arms.items()}
    (comparison,) = compare_group(specs, group, settings, lambda log, elapsed: None)
    return comparison


def noise_of(comparisons: list[Comparison]) -> dict[str, float]:
    """Cycle CV of arm A, and the robust spread (1.4826 MAD) of A/A per-pair log-ratios."""
    cvs, spreads = [], []
    for c in comparisons:
        a = [s.ms_per_token for s in c.samples if s.arm == "a"]
        b = [s.ms_per_token for s in c.samples if s.arm == "b"]
        if len(a) > 1:
            cvs.append(statistics.stdev(a) / statistics.fmean(a))
        logs = [math.log(y / x) for x, y in zip(a, b, strict=True)]
        if len(logs) > 1:
            centre = statistics.median(logs)
            spreads.append(1.4826 * statistics.median(abs(v - centre) for v in logs))
    return {
        "cycle_cv": statistics.median(cvs) if cvs else math.nan,
        "pair_log_ratio_sd": statistics.median(spreads) if spreads else math.nan,
    }


def summarise(kind: str, comparisons: list[Comparison]) -> dict[str, Any]:
    ok = [c for c in comparisons if c.estimate is not None]
    return {
        "kind": kind,
        "trials": len(comparisons),
        "verdicts": {
            v: sum(c.verdict == v for c in comparisons)
            for v in (SAME, SLOWER, FASTER, INCONCLUSIVE)
        },
        "failed": sum(c.estimate is None for c in comparisons),
        "median_ratio": statistics.median(c.estimate.ratio for c in ok if c.estimate)
        if ok
        else None,
        "median_pairs": statistics.median(c.estimate.pairs for c in ok if c.estimate)
        if ok
        else None,
        "median_seconds": statistics.median(c.elapsed_s for c in comparisons),
        "max_seconds": max(c.elapsed_s for c in comparisons),
        **noise_of(comparisons),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = resolve_model(args.model, None, None)
    base = GroupSpec(
        backend=args.backend,
        dtype=args.dtype,
        checkpoint=model.path,
        device="cpu",
        new_tokens=args.new_tokens,
        load_timeout_s=600.0,
        cell_timeout_s=600.0,
    )
    kinds = [("A/A", 0.0)] + [(f"+{p}%", float(p)) for p in args.slowdowns.split(",") if p]
    results: dict[str, list[Comparison]] = {kind: [] for kind, _ in kinds}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bloomperf-ab-power-") as folder:
        (Path(folder) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        arms = {kind: prepare_arms(percent, Path(folder)) for kind, percent in kinds}
        for trial in range(args.trials):
            for kind, _ in kinds:
                c = run_trial(arms[kind], args, base, trial)
                results[kind].append(c)
                figures = (
                    f"{c.estimate.ratio:.3f} over {c.estimate.pairs} pairs"
                    if c.estimate
                    else c.message
                )
                print(
                    f"  trial {trial + 1}/{args.trials} {kind:>5}: {c.verdict} ({figures}, "
                    f"{c.elapsed_s:.0f} s; {time.monotonic() - started:.0f} s in all)",
                    file=sys.stderr,
                    flush=True,
                )
    summary = {
        "model": args.model,
        "cell": f"{args.backend}-{args.dtype}-bs{args.batch_size}",
        "new_tokens": args.new_tokens,
        "tolerance": args.tolerance,
        "confidence": args.confidence,
        "max_time_s": args.max_time,
        "wall_s": round(time.monotonic() - started, 1),
        "kinds": [summarise(kind, results[kind]) for kind, _ in kinds],
    }
    print_table(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def print_table(summary: dict[str, Any]) -> None:
    print(
        f"bloomperf ab detection power: {summary['model']} {summary['cell']}, "
        f"{summary['new_tokens']} new tokens, tolerance {summary['tolerance'] * 100:g} %, "
        f"{summary['confidence'] * 100:g} % intervals, at most {summary['max_time_s']:g} s per "
        f"trial; {summary['wall_s']:.0f} s in all"
    )
    print()
    print(
        "| B | trials | slower | same | faster | inconclusive | median B/A | median pairs "
        "| median s | max s | cycle CV | pair log-ratio sd |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in summary["kinds"]:
        v = k["verdicts"]
        ratio = f"{k['median_ratio']:.3f}" if k["median_ratio"] else "–"
        print(
            f"| {k['kind']} | {k['trials']} | {v['slower']} | {v['same']} | {v['faster']} | "
            f"{v['inconclusive']} | {ratio} | {k['median_pairs']} | {k['median_seconds']:.0f} | "
            f"{k['max_seconds']:.0f} | {k['cycle_cv'] * 100:.0f} % | "
            f"{k['pair_log_ratio_sd'] * 100:.0f} % |"
        )


if __name__ == "__main__":
    sys.exit(main())
