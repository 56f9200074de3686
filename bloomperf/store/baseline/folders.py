"""Where baselines are looked for, in order, and where ``baseline accept`` writes.

1. ``--baselines DIR`` (``BLOOMPERF_BASELINES``): that folder only.
2. ``./baselines`` in the working folder: a project's own. In a checkout of bloomperf it is a
   link to the shipped folder, and then counts as the shipped folder (4.), searched last.
3. the user's folder: ``$XDG_DATA_HOME/bloomperf/baselines`` (``~/.local/share/...``).
4. the baselines shipped inside the package (``bloomperf/baselines``, package data).

A baseline found earlier hides one for the same topology and model found later, so a team's
own baseline overrides the shipped blog tables. ``baseline accept`` writes into ``--baselines``,
else the user folder: never into the package, whatever link leads there (a checkout's
``baselines`` link once let it overwrite the tracked ``cpu.tiny.json``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from bloomperf.core.paths import real_path, xdg_home


def package_baselines_dir() -> Path:
    """The baselines shipped as package data (a real folder for a wheel or editable install)."""
    return Path(str(resources.files("bloomperf") / "baselines"))


def user_baselines_dir() -> Path:
    return xdg_home("XDG_DATA_HOME", Path.home() / ".local" / "share") / "bloomperf" / "baselines"


def candidate_folders() -> list[tuple[Path, str]]:
    """Every folder searched without ``--baselines``, in order, each with its label."""
    found = [(user_baselines_dir(), "user"), (package_baselines_dir(), "shipped")]
    project = Path.cwd() / "baselines"
    if not is_package_folder(project):  # a checkout's link: the shipped folder, searched last
        found.insert(0, (project, "./baselines"))
    return found


def search_folders(folder: Path | None = None) -> list[Path]:
    """The folders searched, in order, that exist (one folder when given explicitly)."""
    if folder is not None:
        return [Path(folder)]
    found: list[Path] = []
    for candidate, _ in candidate_folders():
        if candidate.is_dir() and all(real_path(candidate) != real_path(f) for f in found):
            found.append(candidate)
    return found


def is_package_folder(folder: Path) -> bool:
    """True when ``folder`` is, or lies inside, the shipped baselines (through any link)."""
    try:
        shipped = real_path(package_baselines_dir())
        resolved = real_path(folder)
    except (OSError, ValueError):  # a loop of links, a NUL: no folder, so not the package
        return False
    return resolved == shipped or shipped in resolved.parents


def writable_baselines_dir() -> Path:
    """Where ``baseline accept`` writes without ``--baselines``: the user's folder."""
    return user_baselines_dir()


def describe_search(folder: Path | None = None) -> str:
    """The search order as ``baseline show`` prints it."""
    if folder is not None:
        return f"baselines searched: {folder} (--baselines)"
    parts = [
        f"{i}. {path} ({label}{'' if path.is_dir() else ', absent'})"
        for i, (path, label) in enumerate(candidate_folders(), 1)
    ]
    return "baselines searched, first match wins: " + "; ".join(parts)
