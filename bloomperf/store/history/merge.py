"""``bloomperf history merge SRC… --history DEST``: the nights of several runners in one history.

A history root holds one folder per topology, named by the run's own ``topology`` id (what the
run measured, never the label of the runner that happened to run it)::

    DEST/8xA100-SXM4-80GB/2026-11-29.json
    DEST/4xA100-SXM4-80GB/2026-11-29.json

each folder a history as ``bloomperf.store.history.nights`` describes. A SRC is a results file, or
a folder whose ``*.json`` files, and those of its direct subfolders, are results files: a history
folder, a history root, or the folder ``actions/download-artifact`` fills with one subfolder per
artifact.

A run is identified by its topology and its ``started_at``. The same run arriving twice (an
artifact downloaded again, a merge re-run) is stored once, so merging twice changes nothing. A
file that claims the identity of a run already seen but differs in content is a conflict: the
merge is refused (exit 2) naming both files, before anything is written.

Every source is read and checked before the first write; each night is then written with the one
atomic writer. An interrupted merge leaves DEST with whole nights only (the ones already written),
its earlier nights untouched, and running the merge again completes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.storelock import store_locks
from bloomperf.store.history.nights import NIGHT_NAME, load_history, night_date, night_file
from bloomperf.store.results import RunResult
from bloomperf.store.results.codec import run_to_dict, save_run
from bloomperf.store.results.files import read_results


@dataclass(frozen=True)
class Incoming:
    """One run to merge, and the file it came from."""

    source: Path
    run: RunResult
    day: date


@dataclass(frozen=True)
class Merged:
    """What a merge did to one topology's folder."""

    folder: Path
    added: tuple[Path, ...]
    already: int


def source_files(source: Path) -> list[Path]:
    """The results files a SRC names: itself, or the ``*.json`` in it and its direct subfolders
    (deeper ones, such as pytest-benchmark's storage in a history folder, are not nights)."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise BloomperfError(f"{source}: no such results file or folder")
    found = [*source.glob("*.json"), *source.glob("*/*.json")]
    return sorted(p for p in found if not p.name.startswith("."))  # skip atomic-write leftovers


def read_incoming(path: Path) -> Incoming:
    run = read_results(path)
    match = NIGHT_NAME.match(path.name)
    # A history file's name is its night (it may have been added with --date); otherwise the
    # run's own start date decides.
    day = date.fromisoformat(match["date"]) if match else night_date(run, str(path))
    return Incoming(source=path, run=run, day=day)


def run_key(run: RunResult) -> tuple[str, str] | None:
    """The identity of a run; None for one without a start time (matched on content only)."""
    started = run.started_at.strip()
    return (run.topology, started) if started else None


def gather(sources: Sequence[Path]) -> list[Incoming]:
    """Every run of the sources, once; a conflicting duplicate among them is refused.

    Linear in runs: a run is compared only with those of its own bucket (same identity), never
    with every other run (3000 nights took 35 min when each was compared with all the others).
    """
    runs: list[Incoming] = []
    seen = RunIndex()
    for source in sources:
        for path in source_files(source):
            incoming = read_incoming(path)
            if not seen.holds(incoming.run, incoming.source):
                seen.add(incoming.run, incoming.source)
                runs.append(incoming)
    runs.sort(key=lambda i: (i.run.topology, i.day, i.run.started_at))
    return runs


def bucket_key(run: RunResult) -> tuple[str, ...]:
    """Runs that may be the same run share this: their identity, or for a run without one the
    parts of its content that two equal runs share."""
    key = run_key(run)
    if key is not None:
        return key
    return (run.topology, "", run.finished_at, str(len(run.cells)))


class RunIndex:
    """Runs already seen, by bucket: "is this run among them?" costs one bucket, not all."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, ...], list[tuple[RunResult, Path]]] = {}

    def add(self, run: RunResult, where: Path) -> None:
        self._buckets.setdefault(bucket_key(run), []).append((run, where))

    def holds(self, run: RunResult, where: Path) -> bool:
        """True for a run seen already; a conflict (same identity, other content) raises."""
        bucket = self._buckets.get(bucket_key(run), [])
        return any(is_same_run(run, where, other, source) for other, source in bucket)


def is_same_run(run: RunResult, where: Path, other: RunResult, other_where: Path) -> bool:
    """True for the same run twice; False for two runs; a conflict raises."""
    # Equal records are equal documents; only unequal ones need their stored form compared
    # (the costly part: a few ms per run).
    same_content = run == other or run_to_dict(run) == run_to_dict(other)
    key = run_key(run)
    if key is not None and key == run_key(other) and not same_content:
        raise BloomperfError(
            f"{where}: conflicts with {other_where}: the same run "
            f"({key[0]}, started {key[1]}) with different content; refusing to merge"
        )
    return same_content


def plan_merge(runs: Sequence[Incoming], dest: Path) -> dict[str, list[Incoming]]:
    """Per topology, the runs DEST lacks; raises on a conflict with a night already there.
    Called under the folders' locks, which made each folder that did not exist yet."""
    by_topology: dict[str, list[Incoming]] = {}
    for incoming in runs:
        by_topology.setdefault(incoming.run.topology, []).append(incoming)
    missing: dict[str, list[Incoming]] = {}
    for topology in sorted(by_topology):
        folder = dest / topology
        stored = RunIndex()
        for night in load_history(folder):
            stored.add(night.run, night.path)
        missing[topology] = [i for i in by_topology[topology] if not stored.holds(i.run, i.source)]
    return missing


def merge_histories(sources: Sequence[Path], dest: Path) -> list[Merged]:
    """Merge the runs of ``sources`` into the history root ``dest`` (see the module docstring)."""
    if dest.exists() and not dest.is_dir():
        raise BloomperfError(f"--history {dest}: is not a directory")
    runs = gather(sources)
    if not runs:
        raise BloomperfError(f"{', '.join(map(str, sources))}: holds no results files")
    # Every topology folder this merge writes is locked from the plan to the last write, so
    # concurrent merges (one per runner) and adds each see the nights the others wrote.
    with store_locks([dest / t for t in {i.run.topology for i in runs}]):
        return write_merge(runs, dest)


def write_merge(runs: Sequence[Incoming], dest: Path) -> list[Merged]:
    missing = plan_merge(runs, dest)
    merged = []
    for topology, new in missing.items():
        folder = dest / topology
        added = []
        for incoming in new:
            path = night_file(folder, incoming.day)
            save_run(incoming.run, path)
            added.append(path)
        total = sum(1 for i in runs if i.run.topology == topology)
        merged.append(Merged(folder=folder, added=tuple(added), already=total - len(added)))
    return merged
