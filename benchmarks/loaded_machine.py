"""What a deliberately loaded machine does to an A/A `ab` and to a planted bisect.

Runs a ``bloomperf`` executable (this one, or another checkout's, to compare before and after a
change) on the tiny model while two busy loops load the CPU the workers run on:

* ``--load steady``: the loops spin for the whole run;
* ``--load burst``: they run only while arm B's worker generates (a planted ``sitecustomize`` in
  `ab`; in `bisect`, the package of one version in the middle of the range wakes them): every
  burst hits one arm of a pair, the case pairing cannot cancel;
* ``--load random`` (``ab-serve``): three loops on every CPU, woken and stopped at random for 1
  to 6 s each (``--seed``): a server's run lasts a second or two of its client's ten, and a
  burst lands on one arm's run, on both, or on neither;
* ``--load none``: nothing added (the machine's own load still counts).

It prints each verdict with its figures and ``/proc/loadavg`` before and after, e.g.:

    python benchmarks/loaded_machine.py ab --load burst
    python benchmarks/loaded_machine.py bisect --load burst --bloomperf /other/.venv/bin/bloomperf
    python benchmarks/loaded_machine.py ab-serve --load random --seed 1 --requests 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bloomperf.catalog.checkpoints import resolve_model
from tests.noise import HOOK, NOISE_ENV, plant_noise_hook, spinners
from tests.wheels import build_wheel, slowdown_package


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@contextlib.contextmanager
def load(kind: str, seed: int = 0) -> Iterator[dict[str, str]]:
    """The environment the run gets: the stopped loops' group for a burst, nothing else."""
    if kind == "none":
        yield {}
        return
    if kind == "random":
        with spinners(3, limit_s=1800, stopped=True, anywhere=True) as pgid:
            stop = threading.Event()
            toggler = threading.Thread(target=toggle, args=(pgid, seed, stop), daemon=True)
            toggler.start()
            try:
                yield {}
            finally:
                stop.set()
                toggler.join()
        return
    with spinners(2, limit_s=1800, stopped=kind == "burst") as pgid:
        yield {NOISE_ENV: str(pgid)} if kind == "burst" else {}


def toggle(pgid: int, seed: int, stop: threading.Event) -> None:
    """Wake the loops and stop them again, each for 1 to 6 s drawn from ``seed``."""
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(1.0, 6.0)):
        os.killpg(pgid, signal.SIGCONT)
        if stop.wait(rng.uniform(1.0, 6.0)):
            break
        os.killpg(pgid, signal.SIGSTOP)


def common(folder: Path) -> list[str]:
    model = str(resolve_model("tiny", None, None).path)
    return ["--model", model, "--cache-dir", str(folder / "cache"), "--batch-sizes", "1"]


def run(command: list[str], env: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    done = subprocess.run(command, env={**os.environ, **env}, cwd="/", check=False)
    return done.returncode, time.monotonic() - started


def ab(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    hook = plant_noise_hook(folder / "hook")
    output = folder / "ab.json"
    command = [args.bloomperf, "ab", *common(folder), "--dtypes", "fp32", "--new-tokens", "5"]
    command += ["--tolerance", str(args.tolerance or 0.1), "--max-pairs", str(args.max_pairs)]
    command += ["--max-time", str(args.max_time)]
    command += ["--no-lock", "--output", str(output)]
    if args.load == "burst":
        command += ["--b-env", f"PYTHONPATH={hook}"]
    with load(args.load) as env:
        code, elapsed = run(command, env)
    (cell,) = json.loads(output.read_text())["cells"]
    keys = ("verdict", "ratio", "low", "high", "pairs", "pairs_measured", "pairs_set_aside")
    return {"exit": code, "elapsed_s": round(elapsed), **{k: cell.get(k) for k in keys}}


def bisect(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    house = folder / "wheels"
    for minor in range(4):
        slowdown_package(house, "bpnoisy", f"1.{minor}", slow=minor >= 3)
    if args.load == "burst":  # 1.2 is as fast as 1.0, but its measurement is hit by the loops
        files = {"bpnoisy/__init__.py": HOOK, "bpnoisy-hook.pth": "import bpnoisy\n"}
        build_wheel(house, "bpnoisy", "1.2", files)
    output = folder / "bisect.json"
    command = [args.bloomperf, "bisect", "bpnoisy", "1.0", "1.3", "--find-links", str(house)]
    command += [*common(folder), "--dtypes", "fp32", "--new-tokens", "8"]
    command += ["--tolerance", str(args.tolerance or 0.3)]
    command += ["--confidence", "0.95", "--max-pairs", str(args.max_pairs)]
    command += ["--max-time", str(args.max_time)]
    command += ["--no-lock", "--output", str(output)]
    with load(args.load) as env:
        code, elapsed = run(command, env)
    document = json.loads(output.read_text())
    steps = [
        f"{s['version']}: {s['verdict']} {s['ratio'] or 0:.3f} ({s['pairs']} pairs)"
        for s in document["steps"]
    ]
    named = document.get("first_slower")
    return {"exit": code, "elapsed_s": round(elapsed), "first_slower": named, "steps": steps}


def ab_serve(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Two servers started alike (the serving venv, tiny-serving), three pairs at 75 %."""
    output = folder / "ab.json"
    command = [args.bloomperf, "ab", "--serve", "--rates", "inf", "--refine", "0"]
    command += ["--requests", str(args.requests), "--min-pairs", "3", "--max-pairs", "3"]
    command += ["--confidence", "0.75", "--no-lock", "--output", str(output)]
    with load(args.load, args.seed) as env:
        code, elapsed = run(command, env)
    verdicts = {}
    for cell in json.loads(output.read_text())["cells"]:
        figures = (
            f"{cell['ratio']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"
            if cell["ratio"]
            else "no interval"
        )
        aside = cell.get("pairs_set_aside", 0)
        verdicts[cell["metric"]] = f"{cell['verdict']} {figures}, {aside} of 3 pairs set aside"
    return {"exit": code, "elapsed_s": round(elapsed), "verdicts": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("ab", "bisect", "ab-serve"))
    parser.add_argument("--load", choices=("none", "steady", "burst", "random"), default="burst")
    parser.add_argument("--seed", type=int, default=1, help="random: when the loops run")
    parser.add_argument("--requests", type=int, default=32, help="ab-serve: requests per run")
    parser.add_argument("--bloomperf", default=str(Path(sys.executable).parent / "bloomperf"))
    parser.add_argument("--max-pairs", type=int, default=30)
    parser.add_argument("--tolerance", type=float, help="[ab: 0.1, bisect: 0.3]")
    parser.add_argument("--max-time", type=float, default=90.0, help="seconds per cell, loads in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bloomperf-loaded-") as folder:
        before = loadavg()
        measure = {"ab": ab, "bisect": bisect, "ab-serve": ab_serve}[args.what]
        result = measure(args, Path(folder))
        print(json.dumps({"load": args.load, "loadavg": [before, loadavg()], **result}))


if __name__ == "__main__":
    main()
