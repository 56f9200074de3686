"""The nightly history folder: one results file per night, and each cell's series over them.

The convention is ``<dir>/<YYYY-MM-DD>.json`` for the night's run, ``<YYYY-MM-DD>-2.json``,
``-3`` … for further runs on the same date; the date is the run's own ``started_at``. A run is
added through the results schema (validated, written atomically) and never twice. What the nights
say (the level shifts) is ``bloomperf.analysis.changes``'s business.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import find_metric, metric_names
from bloomperf.core.storelock import store_lock
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import run_to_dict, save_run
from bloomperf.store.results.files import read_results

# Names of registered metrics (bloomperf.core.metrics) the history's pages treat apart: the
# headline, memory (whose source a page names), and a change of outcome (no metric).
METRIC_MS = "ms_per_token"
METRIC_MEMORY = "peak_memory"
METRIC_OUTCOME = "outcome"

NIGHT_NAME = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})(?:-(?P<n>[2-9]|[1-9]\d+))?\.json$")


@dataclass(frozen=True)
class Night:
    """One results file of the history folder."""

    label: str  # the file name without ``.json``: 2026-11-29, 2026-11-29-2
    path: Path
    run: RunResult


def night_date(run: RunResult, where: str) -> date:
    """The UTC calendar date the run started (``started_at`` in any offset): the same day as
    the UTC stamp in the default results file's name, whatever the machine's time zone."""
    text = run.started_at.strip()
    if not text:
        raise BloomperfError(f"{where}: the run has no started_at; give its night with --date")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BloomperfError(f"{where}: started_at {text!r} is not an ISO date-time") from None
    return (moment.astimezone(timezone.utc) if moment.tzinfo else moment).date()


def parse_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise BloomperfError(f"--date: {text!r} is not a date like 2026-11-29") from None


def night_file(folder: Path, day: date) -> Path:
    """The first free name for ``day``: ``2026-11-29.json``, then ``2026-11-29-2.json``, …"""
    path = folder / f"{day.isoformat()}.json"
    n = 2
    while path.exists():
        path = folder / f"{day.isoformat()}-{n}.json"
        n += 1
    return path


def add_to_history(result: Path, folder: Path, day: date | None = None) -> tuple[Path, bool]:
    """Copy a results file into the history; returns (its path there, whether it was added).

    The file is read and written back through the results schema, so a broken or foreign file
    never enters the history. A run that is already there (same content) is not added again:
    a re-run workflow step must not count one night twice.
    """
    run = read_results(result)
    day = day if day is not None else night_date(run, str(result))
    if folder.exists() and not folder.is_dir():
        raise BloomperfError(f"{folder}: is not a directory")
    content = run_to_dict(run)
    # Under the folder's lock: two runs added for one date at once get two names, not one.
    with store_lock(folder):
        for existing in sorted(folder.glob(f"{day.isoformat()}*.json")):
            if NIGHT_NAME.match(existing.name) and run_to_dict(read_results(existing)) == content:
                return existing, False
        path = night_file(folder, day)
        save_run(run, path)
    return path, True


def night_order(path: Path) -> tuple[str, int]:
    match = NIGHT_NAME.match(path.name)
    assert match is not None
    return match["date"], int(match["n"] or 1)


def load_history(folder: Path) -> list[Night]:
    """Every night of ``folder``, oldest first. A JSON file not named by the convention is an
    error rather than silently left out of the trend."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BloomperfError(f"{folder}: no such history directory")
    paths = []
    for path in folder.glob("*.json"):
        if path.name.startswith("."):
            continue  # a temporary file of an atomic write in progress
        if not NIGHT_NAME.match(path.name):
            raise BloomperfError(
                f"{path}: history files are named YYYY-MM-DD.json or YYYY-MM-DD-N.json"
            )
        paths.append(path)
    paths.sort(key=night_order)
    return [Night(label=p.stem, path=p, run=read_results(p)) for p in paths]


def history_folders(root: Path) -> list[Path]:
    """``root`` itself when it holds nights, else its subfolders that do (the root that
    ``history merge`` makes: one folder of nights per topology)."""
    root = Path(root)
    if not root.is_dir():
        raise BloomperfError(f"{root}: no such history directory")
    if any(NIGHT_NAME.match(p.name) for p in root.glob("*.json")):
        return [root]
    folders = [d for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob("[0-9]*.json"))]
    if not folders:
        raise BloomperfError(f"{root}: holds no nights (YYYY-MM-DD.json), nor folders of them")
    return folders


def topology_history(root: Path, topology: str) -> Path:
    """The folder of ``root`` that holds ``topology``'s nights: ``root`` itself, or the folder
    ``history merge`` named after it."""
    folders = history_folders(root)
    if folders == [Path(root)]:
        return folders[0]
    for folder in folders:
        if folder.name == topology:
            return folder
    names = ", ".join(f.name for f in folders)
    raise BloomperfError(f"{root}: holds no nights of topology {topology} (it holds: {names})")


# ---- series -----------------------------------------------------------------------------------


def metric_value(cell: CellResult, name: str) -> float | None:
    """A cell's figure for a registered metric: the median of its samples (of its cycles, for
    a per-cycle one); None where the cell did not run to completion or lacks the figure."""
    found = find_metric(name)
    if found is None:
        raise BloomperfError(f"metric: unknown {name!r} (valid: {', '.join(metric_names())})")
    samples = found.samples(cell) if cell.outcome == Outcome.OK else ()
    return statistics.median(samples) if samples else None


def cell_ids(nights: Sequence[Night]) -> list[str]:
    """Every cell id seen in the history, in the order they first appear."""
    return list(dict.fromkeys(cell.id for night in nights for cell in night.run.cells))


def find_cell(run: RunResult, cell: str) -> CellResult | None:
    return next((c for c in run.cells if c.id == cell), None)


def series(nights: Sequence[Night], cell: str, metric: str) -> list[tuple[int, float]]:
    """(night index, value) for the nights where the cell has a positive figure."""
    points = []
    for i, night in enumerate(nights):
        found = find_cell(night.run, cell)
        # A metric's samples are its positive ones: a figure found is positive.
        value = metric_value(found, metric) if found is not None else None
        if value is not None:
            points.append((i, value))
    return points


def outcome_series(nights: Sequence[Night], cell: str) -> list[tuple[int, str]]:
    points = []
    for i, night in enumerate(nights):
        found = find_cell(night.run, cell)
        if found is not None and found.outcome != Outcome.SKIPPED:
            points.append((i, found.outcome.value))
    return points
