"""Print the requirements of pyproject.toml's extras, one a line: `.ci/extras.py gpu,report`.

Used by .ci/setup --extras; an unknown extra is a one-line error (exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(names: str) -> list[str]:
    with PYPROJECT.open("rb") as f:
        known = tomllib.load(f)["project"]["optional-dependencies"]
    wanted: list[str] = []
    for name in names.split(","):
        if name not in known:
            raise SystemExit(f".ci/setup: --extras: no extra {name!r} (known: {', '.join(known)})")
        wanted += [r for r in known[name] if r not in wanted]
    return wanted


if __name__ == "__main__":
    try:
        print("\n".join(requirements(sys.argv[1])))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
