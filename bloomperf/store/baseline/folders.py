"""Where baselines are looked for, in order, and where ``baseline accept`` writes.

1. ``--baselines DIR`` (``BLOOMPERF_BASELINES``): that folder only.
2. ``./baselines`` in the working folder (a checkout of bloomperf, or a project's own).
3. the user's folder: ``$XDG_DATA_HOME/bloomperf/baselines`` (``~/.local/share/...``).
4. the baselines shipped inside the package (``bloomperf/baselines``, package data).

A baseline found earlier hides one for the same topology and model found later, so a team's
own baseline overrides the shipped blog tables. ``baseline accept`` writes into the first of
1–3 (the user folder when there is no ``./baselines``): never into an installed package.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def package_baselines_dir() -> Path:
    """The baselines shipped as package data (a real folder for a wheel or editable install)."""
    return Path(str(resources.files("bloomperf") / "baselines"))


def user_baselines_dir() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "bloomperf" / "baselines"


def search_folders(folder: Path | None = None) -> list[Path]:
    """The folders searched, in order, that exist (one folder when given explicitly)."""
    if folder is not None:
        return [Path(folder)]
    found: list[Path] = []
    for candidate in (Path.cwd() / "baselines", user_baselines_dir(), package_baselines_dir()):
        if candidate.is_dir() and all(candidate.resolve() != f.resolve() for f in found):
            found.append(candidate)
    return found


def writable_baselines_dir() -> Path:
    """Where ``baseline accept`` writes without ``--baselines``."""
    here = Path.cwd() / "baselines"
    return here if here.is_dir() else user_baselines_dir()


def describe_search(folder: Path | None = None) -> str:
    """The search order as ``baseline show`` prints it."""
    if folder is not None:
        return f"baselines searched: {folder} (--baselines)"
    labels = [
        (Path.cwd() / "baselines", "./baselines"),
        (user_baselines_dir(), "user"),
        (package_baselines_dir(), "shipped"),
    ]
    parts = [
        f"{i}. {path} ({label}{'' if path.is_dir() else ', absent'})"
        for i, (path, label) in enumerate(labels, 1)
    ]
    return "baselines searched, first match wins: " + "; ".join(parts)
