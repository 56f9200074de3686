"""How long ``bloomperf history merge`` takes as the history grows. A benchmark script, not a test.

Writes NIGHTS results files (the blog's 8 x A100 run, 25 KB each, one per night, spread over
four topologies as a nightly on four runners makes them) into an artifacts folder, then times
three merges in fresh processes: into an empty history, the same again (everything already
there), and a resume after half the nights were merged. Prints wall seconds and peak RSS of each.
Target: linear in nights, 3000 nights in under a minute.

    python benchmarks/merge_scale.py --nights 375,750,3000
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "tests" / "data" / "results" / "8xA100-SXM4-80GB.blog.results.json"
TOPOLOGIES = ("8xA100-SXM4-80GB", "4xA100-SXM4-80GB", "8xH100-SXM5-80GB", "2xA100-SXM4-80GB")


def write_nights(folder: Path, nights: int) -> None:
    """``nights`` results files, one artifact subfolder per topology as download-artifact does."""
    template = json.loads(TEMPLATE.read_text())
    first = date(2024, 1, 1)
    for n in range(nights):
        topology = TOPOLOGIES[n % len(TOPOLOGIES)]
        day = first + timedelta(days=n // len(TOPOLOGIES))
        run = dict(template, topology=topology, started_at=f"{day.isoformat()}T02:00:00+00:00")
        run["finished_at"] = f"{day.isoformat()}T03:00:00+00:00"
        target = folder / topology / f"{day.isoformat()}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(run))


def timed_merge(sources: list[Path], dest: Path) -> tuple[str, int]:
    """Wall and CPU seconds, peak RSS so far (MB), and the exit status of one merge in a fresh
    process (CPU seconds say more than wall ones on a shared machine)."""
    command = [sys.executable, "-m", "bloomperf", "history", "merge"]
    command += [*map(str, sources), "--history", str(dest)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        print(done.stderr.strip(), file=sys.stderr)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    figures = f"{wall:6.1f} s wall, {cpu:6.1f} s CPU, peak RSS {after.ru_maxrss / 1024:.0f} MB"
    return figures, done.returncode


def measure(nights: int, work: Path) -> None:
    artifacts = work / f"artifacts-{nights}"
    write_nights(artifacts, nights)
    dest = work / f"history-{nights}"
    first, code = timed_merge([artifacts], dest)
    print(f"{nights:>5} nights  into an empty history: {first}")
    again, code2 = timed_merge([artifacts], dest)
    print(f"{nights:>5} nights  again (all there):     {again}")
    # A resume: half of each topology's nights already merged (an interrupted merge).
    for folder in sorted(dest.iterdir()):
        for path in sorted(folder.glob("*.json"))[len(list(folder.glob("*.json"))) // 2 :]:
            path.unlink()
    resume, code3 = timed_merge([artifacts], dest)
    print(f"{nights:>5} nights  resumed after half:    {resume}  (exit {code}, {code2}, {code3})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", default="375,750,3000", help="comma-separated night counts")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bloomperf-merge-bench-"))
    try:
        for nights in (int(n) for n in args.nights.split(",")):
            measure(nights, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
