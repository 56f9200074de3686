"""Every command the README shows runs as written, and every link in README.md and docs/ leads
somewhere (a newcomer met a dead end at almost every step).

The ``bash`` blocks of README.md are run line by line, in order, in one scratch folder (so
``diff results/latest.json`` reads what ``run`` wrote just before), with ``XDG_DATA_HOME`` there
too (``baseline accept`` writes into the user folder). What cannot run here as written goes
through ``SUBSTITUTIONS``: the one documented table of how a README line is changed, and why.
A README line that matches no row runs unchanged; a row that matches no README line fails, so
the table cannot outlive the README.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.wheels import build_wheel

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
QUICK = "--new-tokens 4 --cycles 2 --warmup 1 --dtypes fp32 --batch-sizes 1 --no-lock"

# Docs written in parallel by others: a link to one is accepted while it is
# absent here, and checked like any other as soon as it exists. Empty this set once merged.
PENDING_DOCS: set[str] = set()


@dataclass(frozen=True)
class Substitution:
    pattern: str  # a regular expression searched for in the README line
    replacement: str | None  # what replaces the match; None: the line is not run, for `why`
    why: str


SUBSTITUTIONS = (
    Substitution(r"^bash \.ci/run$", None, "the test suite this test is part of"),
    Substitution(
        r"^(BLOOMPERF_PROFILE=\w+ )?bash \.ci/setup --extras \S+$",
        None,
        "made the environment this test runs in",
    ),
    Substitution(
        r"^BLOOMPERF_PROFILE=serving VLLM_PACKAGE=\S+ bash \.ci/setup$",
        None,
        "the CUDA vLLM of a GPU runner; .ci/run builds the CPU one tests/test_serving.py uses",
    ),
    Substitution(
        r"^bash \.ci/setup && \.venv/bin/bloomperf run$",
        f"bloomperf run {QUICK}",
        "the environment is set up; a short workload of one cell",
    ),
    Substitution(
        r"--b-pin transformers==\S+ --with-deps",
        "--b-pin readme-pin==1.0 --with-deps --find-links {wheelhouse} --max-pairs 12 "
        f"--max-time 120 {QUICK}",
        "no download: a pin from a local wheelhouse; a bounded comparison",
    ),
    Substitution(
        r"^\.venv/bin/pytest -m gpu ",
        ".venv/bin/pytest {repo}/tests/test_bloom_matrix.py -p no:cacheprovider -m gpu "
        "--bloomperf-batch-sizes=1 ",
        "the repository's GPU matrix; without a GPU its items skip",
    ),
    Substitution(
        r"^\.venv/bin/bloomperf run --model bloom-176b$",
        ".venv/bin/bloomperf run --model bloom-176b --dry-run",
        "GPU-only: planned instead of run",
    ),
    Substitution(r"^\.venv/bin/", "", "the venv running this test (bloomperf, pytest on PATH)"),
)

# Exit statuses that are verdicts about this machine, not a broken command: a command that
# judges may find a regression (1). Every other command must exit 0.
JUDGING = re.compile(r"^bloomperf (run|diff|ab|doctor)\b")


def readme_commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for each command of each ``bash`` block, comments stripped and a line
    ending in a backslash joined to the next."""
    commands = []
    inside = False
    pending = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            inside = line.strip() == "```bash" if not inside else False
            continue
        command = line.split(" #", 1)[0].strip()
        if not inside or not command:
            continue
        if command.endswith("\\"):
            pending += command[:-1]
            continue
        commands.append((number, " ".join((pending + command).split())))
        pending = ""
    return commands


def substitute(command: str, values: dict[str, str]) -> tuple[str | None, set[int]]:
    """The command to run (None: not run) and the rows of ``SUBSTITUTIONS`` it used."""
    used = set()
    for index, row in enumerate(SUBSTITUTIONS):
        if re.search(row.pattern, command):
            used.add(index)
            if row.replacement is None:
                return None, used
            command = re.sub(row.pattern, row.replacement.format(**values), command)
    return command, used


def shims(folder: Path) -> Path:
    """``bloomperf`` and ``pytest`` on PATH: the interpreter running this test, on this tree."""
    folder.mkdir()
    for name in ("bloomperf", "pytest"):
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {name} "$@"\n')
        shim.chmod(0o755)
    return folder


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    build_wheel(wheelhouse, "readme_pin", "1.0", {"readme_pin.py": "VERSION = '1.0'\n"})
    values = {"wheelhouse": str(wheelhouse), "repo": str(REPO)}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "PYTHONPATH": str(REPO),
        "COLUMNS": "100",
        "PATH": f"{shims(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
    }
    commands = readme_commands(README.read_text(encoding="utf-8"))
    assert len(commands) >= 10  # the extraction itself found the blocks
    used: set[int] = set()
    failures = []
    for line, command in commands:
        runnable, rows = substitute(command, values)
        used |= rows
        if runnable is None:
            continue
        done = subprocess.run(
            ["bash", "-c", runnable],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        allowed = {0, 1} if JUDGING.match(runnable) else {0}
        if done.returncode not in allowed:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            failures.append(f"README.md:{line}: {runnable}: exit {done.returncode}: {tail}")
    assert not failures, "\n".join(failures)
    unused = [SUBSTITUTIONS[i].pattern for i in range(len(SUBSTITUTIONS)) if i not in used]
    assert not unused, f"substitutions matching no README line: {unused}"
    # What the README promises the commands leave behind.
    assert (scratch / "results" / "latest.json").is_symlink()
    accepted = list((tmp_path / "xdg" / "bloomperf" / "baselines").glob("cpu.tiny.json"))
    assert accepted, "baseline accept wrote nothing into the user folder"
    assert (scratch / "report" / "index.html").is_file()


LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def broken_links(page: Path) -> list[str]:
    broken = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            path = (page.parent / target.split("#", 1)[0]).resolve()
            shown = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
            if not path.exists() and shown not in PENDING_DOCS:
                broken.append(f"{page.relative_to(REPO)}:{number}: {target}")
    return broken


def test_every_link_in_the_readme_and_docs_leads_to_a_file() -> None:
    pages = markdown_files()
    assert len(pages) > 5
    broken = [problem for page in pages for problem in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = REPO / "docs" / "a-page-for-this-test.md"
    monkeypatch.setattr(
        Path, "read_text", lambda self, **_: "see [x](nowhere.md) and [y](ARCHITECTURE.md)\n"
    )
    assert broken_links(page) == ["docs/a-page-for-this-test.md:1: nowhere.md"]


def test_the_readme_stays_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250
