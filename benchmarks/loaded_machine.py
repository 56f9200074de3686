"""What a deliberately loaded machine does to an A/A `ab` and to a planted bisect.

Runs a ``bloomperf`` executable (this one, or another checkout's, to compare before and after a
change) on the tiny model while two busy loops load the CPU the workers run on:

* ``--load steady``: the loops spin for the whole run;
* ``--load burst``: they run only while arm B's worker generates (a planted ``sitecustomize`` in
  `ab`; in `bisect`, the package of one version in the middle of the range wakes them): every
  burst hits one arm of a pair, the case pairing cannot cancel;
* ``--load none``: nothing added (the machine's own load still counts).

It prints each verdict with its figures and ``/proc/loadavg`` before and after, e.g.:

    python benchmarks/loaded_machine.py ab --load burst
    python benchmarks/loaded_machine.py bisect --load burst --bloomperf /other/.venv/bin/bloomperf
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
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
def load(kind: str) -> Iterator[dict[str, str]]:
    """The environment the run gets: the stopped loops' group for a burst, nothing else."""
    if kind == "none":
        yield {}
        return
    with spinners(2, limit_s=1800, stopped=kind == "burst") as pgid:
        yield {NOISE_ENV: str(pgid)} if kind == "burst" else {}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("ab", "bisect"))
    parser.add_argument("--load", choices=("none", "steady", "burst"), default="burst")
    parser.add_argument("--bloomperf", default=str(Path(sys.executable).parent / "bloomperf"))
    parser.add_argument("--max-pairs", type=int, default=30)
    parser.add_argument("--tolerance", type=float, help="[ab: 0.1, bisect: 0.3]")
    parser.add_argument("--max-time", type=float, default=90.0, help="seconds per cell, loads in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bloomperf-loaded-") as folder:
        before = loadavg()
        result = (ab if args.what == "ab" else bisect)(args, Path(folder))
        print(json.dumps({"load": args.load, "loadavg": [before, loadavg()], **result}))


if __name__ == "__main__":
    main()
