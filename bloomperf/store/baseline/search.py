"""Finding a baseline: by topology and model along the search order of ``baseline_folders``,
or by the file or topology a user names."""

from __future__ import annotations

from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.paths import real_path
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.baseline.folders import describe_search, search_folders, writable_baselines_dir


def default_baselines_dir() -> Path:
    """Where ``baseline accept`` writes without ``--baselines`` (see ``baseline_folders``)."""
    return writable_baselines_dir()


def baseline_file_name(topology: str, model: str) -> str:
    """``8xA100-SXM4-80GB.bloom-176b.json``: one name per (topology, model) pair, and never one
    name for two pairs. The names' own "." (a topology ``a.b``) and a hub id's "/" are written
    as ``~d`` and ``~s`` ("~" is in no name, ``catalog.names``), so the "." between the two
    parts is the only bare one and ``a.b``+``c`` and ``a``+``b.c`` get different files."""
    return f"{name_part(topology)}.{name_part(model)}.json"


def name_part(name: str) -> str:
    return name.replace(".", "~d").replace("/", "~s")


def find_baseline(topology: str, model: str, folder: Path | None = None) -> Baseline | None:
    """The baseline whose topology (id or alias) and model (name or alias) match: in ``folder``,
    or else the first found along the search order of ``baseline_folders``."""
    for where in search_folders(folder):
        where = checked_folder(where)
        found = [
            b
            for b in (load_baseline(p) for p in sorted(where.glob("*.json")))
            if b.matches_topology(topology) and b.matches_model(model)
        ]
        if len(found) > 1:
            names = ", ".join(b.path for b in found)
            raise BloomperfError(
                f"{where}: several baselines match {topology} and {model}: {names}"
            )
        if found:
            return found[0]
    return None


def resolve_baseline(text: str, model: str | None, folder: Path | None) -> Baseline:
    """``--baseline FILE|TOPOLOGY``: a file path, or a topology id/alias looked up in ``folder``."""
    path = Path(text)
    if path.suffix == ".json" or path.exists():
        return load_baseline(path)
    candidates = [b for b in all_baselines(folder) if b.matches_topology(text)]
    # The model narrows the choice; when no baseline has it, the topology's only baseline is
    # still the one asked for (the comparison then says why it is incomparable).
    same_model = [b for b in candidates if model is not None and b.matches_model(model)]
    candidates = same_model or candidates
    if len(candidates) == 1:
        return candidates[0]
    where = folder if folder is not None else describe_search()
    if not candidates:
        raise BloomperfError(f"--baseline: no baseline for topology {text!r} in {where}")
    models = ", ".join(b.model for b in candidates)
    raise BloomperfError(
        f"--baseline: topology {text!r} has baselines for several models ({models})"
    )


def all_baselines(folder: Path | None) -> list[Baseline]:
    """Every baseline along the search order; an earlier one hides a later one for the same
    topology and model."""
    found: list[Baseline] = []
    for where in search_folders(folder):
        for b in (load_baseline(p) for p in sorted(checked_folder(where).glob("*.json"))):
            if not any(b.matches_topology(f.topology) and b.matches_model(f.model) for f in found):
                found.append(b)
    return found


def checked_folder(folder: Path) -> Path:
    """``--baselines``: a folder that is missing is a mistake to report, not "no baseline"."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BloomperfError(f"--baselines: {folder} is not a folder")
    return folder


def baseline_path_in(folder: Path, topology: str, model: str) -> Path:
    """Where a new baseline goes: inside ``folder``, whatever the names say, and never over a
    file that holds another pair's baseline (or anything else)."""
    path = folder / baseline_file_name(topology, model)
    if real_path(path).parent != real_path(folder):
        raise BloomperfError(f"{path}: a baseline must be written inside {folder}")
    if path.exists() or path.is_symlink():
        held = load_baseline(path)  # not a baseline: refused by the reader, with its reason
        if not (held.matches_topology(topology) and held.matches_model(model)):
            raise BloomperfError(
                f"{path}: holds the baseline of {held.topology} / {held.model}, not of "
                f"{topology} / {model}; refusing to replace it"
            )
    return path


def refuse_output_among_baselines(output: Path, folder: Path | None) -> None:
    """A results file written into a baselines folder would replace a baseline, or break
    every later lookup there (each *.json in it is read as a baseline)."""
    for where in search_folders(folder):
        if where.is_dir() and real_path(output).parent == real_path(where):
            raise BloomperfError(
                f"--output {output}: is inside the baselines folder {where}; refusing to write "
                "results among the baselines"
            )
