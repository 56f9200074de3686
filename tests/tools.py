"""The external programs tests need, from the one list that .ci/setup installs (.ci/tools).

Not a test. ``require(command)`` returns the program's path. A command that .ci/tools does not
list fails the test (add it there, so that .ci/setup installs it on a fresh machine); a listed
one that is missing skips, and fails under CI=true, where .ci/setup must have installed it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS_FILE = REPO / ".ci" / "tools"


def listed_tools() -> dict[str, tuple[str, str]]:
    """``{command: (how, package)}`` as .ci/tools lists them."""
    tools = {}
    for line in TOOLS_FILE.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            tools[fields[0]] = (fields[1], fields[2])
    return tools


def locate(command: str) -> str | None:
    """Where ``command`` is: PATH, the running venv's bin/ (pip-installed tools), /usr/sbin."""
    venv_bin = Path(sys.executable).parent
    for found in (
        shutil.which(command),
        shutil.which(command, path=str(venv_bin)),
        shutil.which(command, path="/usr/sbin"),
    ):
        if found:
            return found
    return None


def require(command: str) -> str:
    """The path of ``command``; fails when .ci/tools does not list it; skips (CI: fails) when
    it is missing."""
    if command not in listed_tools():
        pytest.fail(f"{command} is not in {TOOLS_FILE.relative_to(REPO)}: list it there")
    found = locate(command)
    if found is None:
        how, package = listed_tools()[command]
        reason = f"no {command} ({TOOLS_FILE.relative_to(REPO)}: {how} {package}; bash .ci/setup)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must not skip it")
        pytest.skip(reason)
    return found


def missing(*commands: str) -> list[str]:
    """The listed ``commands`` not installed here; fails for one that .ci/tools does not list."""
    unlisted = [c for c in commands if c not in listed_tools()]
    if unlisted:
        pytest.fail(f"{', '.join(unlisted)} not in {TOOLS_FILE.relative_to(REPO)}: list them there")
    return [c for c in commands if locate(c) is None]
