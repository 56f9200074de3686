"""Paths as the OS gives them: real paths that never raise on a loop, and bytes that are exact.

``Path.resolve()`` raises RuntimeError on a symlink loop (``ln -s l1 l2; ln -s l2 l1``) in
Python 3.11, which reached the user as an internal error; ``os.path.realpath`` leaves the loop
in the path, and the file system's ELOOP then names it as bad input like any other path. A
folder named with a byte that is not UTF-8 (``caf\\xe9``) reaches Python as a surrogate escape:
``str.encode()`` raises on it, ``os.fsencode`` gives back the OS's own bytes.
"""

from __future__ import annotations

import os
import shlex
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


def shell_word(path: Path | str) -> str:
    """``path`` as one word to paste into a shell: ``shlex.quote``, or bash's ``$'...'`` when
    it holds a newline, another control character or a byte that is not UTF-8 (printed as it
    is, a newline would split the line and break the command)."""
    text = os.fspath(path)
    if text.isprintable():
        return shlex.quote(text)
    return "$'" + "".join(escaped(c) for c in text) + "'"


def escaped(char: str) -> str:
    code = ord(char)
    if char in "'\\":
        return "\\" + char
    if char.isprintable():
        return char
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode gives it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
