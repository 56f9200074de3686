"""Paths as the OS gives them: real paths that never raise on a loop, and bytes that are exact.

``Path.resolve()`` raises RuntimeError on a symlink loop (``ln -s l1 l2; ln -s l2 l1``) in
Python 3.11, which reached the user as an internal error; ``os.path.realpath`` leaves the loop
in the path, and the file system's ELOOP then names it as bad input like any other path. A
folder named with a byte that is not UTF-8 (``caf\\xe9``) reaches Python as a surrogate escape:
``str.encode()`` raises on it, ``os.fsencode`` gives back the OS's own bytes.
"""

from __future__ import annotations

import os
from pathlib import Path


def real_path(path: Path | str) -> Path:
    """``path`` with its links followed, as far as they go (a loop is left as it is)."""
    return Path(os.path.realpath(path))


def path_key(path: Path | str) -> bytes:
    """The bytes of ``path``'s real path, for hashing into a lock file's name."""
    return os.fsencode(os.path.realpath(path))


def xdg_home(variable: str, default: Path) -> Path:
    """An XDG base folder: ``$variable`` when it is an absolute path, else ``default`` (the XDG
    spec: a relative path in these variables is invalid and must be ignored)."""
    value = os.environ.get(variable, "")
    return Path(value) if os.path.isabs(value) else default
