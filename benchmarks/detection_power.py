"""Detection power, measured: how often bloomperf flags a known slowdown, and an unchanged run.

A real backend on a real model (the tiny BLOOM on CPU by default) is loaded into several worker
groups through bloomperf's own run path (``GroupRunner`` → worker process → backend): a
reference, a second unchanged one (A/A), and one per injected slowdown (the test-only
``slowdown_percent`` option: every ``generate`` takes that much longer, see
``bloomperf.measure.slowdown``). Each trial measures one cell on the reference (the baseline's
cycles) and then on every other group, in an order that rotates between trials so that a burst
of load on the machine does not always hit the same group; each is judged against the baseline
exactly as ``bloomperf diff`` judges it (``estimate_ratio`` on the cycles of both sides, then
``classify_ratio`` with the tolerance). Each group loads once: a trial costs only its cycles.

    python benchmarks/detection_power.py --trials 100
    python benchmarks/detection_power.py --device cuda --model bloom-560m --batch-size 8

Targets: on CPU, >= 95 % of 10 % slowdowns flagged with <= 1 % false alarms on A/A;
on GPU the same for 5 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bloomperf.analysis.stats import REGRESSED, classify_ratio, estimate_ratio, measure_noise
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.workload import ms_per_token
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.launch import GroupSpec
from bloomperf.harness.runner import GroupRunner
from bloomperf.store.results import Outcome

AA = "A/A"


@dataclass
class Arm:
    """One worker group and the verdicts its cells got."""

    name: str
    slowdown_percent: float
    runner: GroupRunner
    samples: list[tuple[float, ...]] = field(default_factory=list)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--backend", default="accelerate")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--slowdowns", default="5,10", help="percent, comma-separated")
    parser.add_argument("--tolerances", default="0.02,0.03,0.05", help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--ab",
        action="store_true",
        help="measure bloomperf ab instead (interleaved A/B with adaptive stopping; the slowdown "
        "injected into arm B's environment): see benchmarks/ab_power.py",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="alternate the arms' cycles inside each trial (A B C D A B C D …), so drift "
        "between trials hits every arm alike",
    )
    return parser.parse_args(argv)


def start_arm(name: str, percent: float, args: argparse.Namespace, checkpoint: Path) -> Arm:
    spec = GroupSpec(
        backend=args.backend,
        dtype=args.dtype,
        checkpoint=checkpoint,
        device=args.device,
        new_tokens=args.new_tokens,
        slowdown_percent=percent or None,
        load_timeout_s=1800.0,
        cell_timeout_s=600.0,
    )
    return Arm(name, percent, GroupRunner(spec, warmup=args.warmup, cycles=args.cycles))


def measure(arm: Arm, batch_size: int) -> tuple[float, ...]:
    cell = arm.runner.run_cell(batch_size)
    if cell.outcome is not Outcome.OK:
        raise BloomperfError(f"{arm.name}: cell {cell.id} {cell.outcome.value}: {cell.message}")
    if cell.details.get("load_count") != 1:
        raise BloomperfError(f"{arm.name}: the worker group was reloaded; figures not comparable")
    return cell.samples_ms_per_token


def measure_interleaved(arms: list[Arm], batch_size: int) -> list[tuple[float, ...]]:
    """One cell per arm with their cycles alternated, through each arm's real run path.

    Each arm's ``run_cell`` hands its cycle function to ``measure``; the arms are nested so
    that the innermost level holds every arm's cycle function and alternates them, rotating
    the order each round so no arm always runs first.
    """
    cycle_fns: list[Callable[[], float]] = []
    collected: list[list[float]] = []

    def level(i: int) -> None:
        if i == len(arms):
            for one_cycle in cycle_fns:
                for _ in range(arms[0].runner.warmup):
                    one_cycle()
            collected.extend([] for _ in arms)
            for round_ in range(arms[0].runner.cycles):
                order = list(range(len(arms)))
                order = order[round_ % len(order) :] + order[: round_ % len(order)]
                for k in order:
                    collected[k].append(cycle_fns[k]())
            return

        def measure_arm(one_cycle: Callable[[], float], warmup: int, cycles: int) -> list[float]:
            cycle_fns.append(one_cycle)
            level(i + 1)
            return collected[i]

        cell = arms[i].runner.run_cell(batch_size, measure_arm)
        if cell.outcome is not Outcome.OK:
            raise BloomperfError(f"{arms[i].name}: {cell.outcome.value}: {cell.message}")

    level(0)
    return [tuple(c) for c in collected]  # seconds per cycle


def run_trials(args: argparse.Namespace) -> tuple[Arm, list[Arm]]:
    checkpoint = resolve_model(args.model, None, None).path
    percents = [float(p) for p in args.slowdowns.split(",") if p]
    reference = start_arm("reference", 0.0, args, checkpoint)
    others = [start_arm(AA, 0.0, args, checkpoint)]
    others += [start_arm(f"+{p:g}%", p, args, checkpoint) for p in percents]
    try:
        started = time.monotonic()
        for trial in range(args.trials):
            if args.interleave:
                arms = [reference, *others]
                seconds = measure_interleaved(arms, args.batch_size)
                for arm, values in zip(arms, seconds, strict=True):
                    arm.samples.append(
                        tuple(ms_per_token(v, args.batch_size, args.new_tokens) for v in values)
                    )
            else:
                reference.samples.append(measure(reference, args.batch_size))
                shift = trial % len(others)
                for arm in others[shift:] + others[:shift]:
                    arm.samples.append(measure(arm, args.batch_size))
            if (trial + 1) % 10 == 0:
                elapsed = time.monotonic() - started
                print(f"  {trial + 1}/{args.trials} trials, {elapsed:.0f} s", file=sys.stderr)
    finally:
        for arm in [reference, *others]:
            arm.runner.stop()
    return reference, others


def flag_rate(reference: Arm, arm: Arm, tolerance: float) -> float:
    flagged = sum(
        classify_ratio(estimate_ratio(measured, baseline), tolerance) == REGRESSED
        for baseline, measured in zip(reference.samples, arm.samples, strict=True)
    )
    return flagged / len(arm.samples)


def median_ratio(reference: Arm, arm: Arm) -> float:
    return statistics.median(
        estimate_ratio(measured, baseline).ratio
        for baseline, measured in zip(reference.samples, arm.samples, strict=True)
    )


def report(args: argparse.Namespace, reference: Arm, others: list[Arm]) -> dict[str, Any]:
    tolerances = [float(t) for t in args.tolerances.split(",") if t]
    noise = measure_noise(reference.samples)
    figures: dict[str, Any] = {
        "model": args.model,
        "device": args.device,
        "cell": f"{args.backend}-{args.dtype}-bs{args.batch_size}",
        "new_tokens": args.new_tokens,
        "cycles": args.cycles,
        "trials": args.trials,
        "reference_median_ms_per_token": statistics.median(
            statistics.median(s) for s in reference.samples
        ),
        "cycle_cv": noise.cycle_cv,
        "run_cv": noise.run_cv,
        "suggested_tolerance": noise.suggested_tolerance,
        "median_ratio": {arm.name: median_ratio(reference, arm) for arm in others},
        "flagged": {
            f"{t:g}": {arm.name: flag_rate(reference, arm, t) for arm in others} for t in tolerances
        },
    }
    print_table(figures, others)
    return figures


def print_table(figures: dict[str, Any], others: list[Arm]) -> None:
    names = [arm.name for arm in others]
    print(
        f"Detection power: {figures['model']} on {figures['device']}, {figures['cell']}, "
        f"{figures['new_tokens']} new tokens, {figures['cycles']} cycles per side, "
        f"{figures['trials']} trials"
    )
    print(
        f"reference {figures['reference_median_ms_per_token']:.3f} ms/token; noise: cycle CV "
        f"{figures['cycle_cv'] * 100:.1f} %, trial-to-trial CV {figures['run_cv'] * 100:.1f} %, "
        f"suggested tolerance {figures['suggested_tolerance'] * 100:g} %"
    )
    ratios = " | ".join(f"{figures['median_ratio'][n]:.3f}" for n in names)
    print()
    print("| tolerance | " + " | ".join(f"{n} flagged" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for tolerance, rates in figures["flagged"].items():
        cells = " | ".join(f"{rates[n] * 100:.0f} %" for n in names)
        print(f"| {float(tolerance) * 100:g} % | {cells} |")
    print(f"| (median measured ratio) | {ratios} |")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--ab" in argv:  # bloomperf ab's interleaved comparisons: benchmarks/ab_power.py
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from benchmarks.ab_power import main as ab_main

        return ab_main(argv)
    args = parse_args(argv)
    try:
        reference, others = run_trials(args)
        figures = report(args, reference, others)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    except BloomperfError as exc:
        print(f"detection_power: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
