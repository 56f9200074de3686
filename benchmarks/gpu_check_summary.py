"""The table of benchmarks/gpu_check.sh: every results file in its work folder so far.

    python benchmarks/gpu_check_summary.py WORK

gpu_check.sh rewrites summary.txt with this after every step, so that a run the device call's
limit ends still brings back the table of what ran. A results file a step left unreadable (killed
before its first cell) is a line saying so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bloomperf.store.results.files import read_results

NOT_RUNS = ("doctor", "topology", "predict")


def cell_lines(work: Path) -> tuple[list[str], int | None]:
    lines = [f"{'cell':<28} {'outcome':<8} {'ms/token':>9} {'peak GiB':>9} {'load s':>7}  note"]
    measured_ok = None
    for path in sorted(work.glob("*.json")):
        if path.stem in NOT_RUNS:
            continue
        try:
            run = read_results(path)
        except Exception as exc:  # a run killed before its first cell: say so, go on
            lines.append(f"{path.name}: unreadable ({exc})")
            continue
        for c in run.cells:
            ms = f"{c.ms_per_token:.3f}" if c.ms_per_token else "-"
            peak = f"{c.peak_memory_bytes / 2**30:.1f}" if c.peak_memory_bytes else "-"
            load = f"{c.load_time_s:.1f}" if c.load_time_s else "-"
            note = (c.message.splitlines() or [""])[0][:70]
            cell = f"{path.stem}:{c.id}"
            lines.append(f"{cell:<28} {c.outcome.value:<8} {ms:>9} {peak:>9} {load:>7}  {note}")
            if path.stem == "oom" and c.outcome.value == "ok":
                measured_ok = max(measured_ok or 0, c.batch_size)
    return lines, measured_ok


def predicted_boundary(work: Path) -> int | None:
    path = work / "predict.json"
    if not path.is_file() or not path.stat().st_size:
        return None
    try:
        rows = json.loads(path.read_text())["rows"]
    except (ValueError, KeyError):
        return None
    return rows[0]["boundary"] if rows else None


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    lines, measured_ok = cell_lines(work)
    lines.append(
        f"OOM boundary, accelerate bf16: largest batch measured OK {measured_ok}, "
        f"predicted {predicted_boundary(work)}"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
