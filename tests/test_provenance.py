"""Provenance in every results file, and what changed between two runs (diff, history changes)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from bloomperf import cli
from bloomperf.catalog import provenance
from bloomperf.catalog.fingerprint import environment_fingerprint
from bloomperf.catalog.topology import detect_topology
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import add_night, night, night_run, ok_cell


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "checkout"
    path.mkdir()
    git(path, "init", "-q")
    (path / "a.txt").write_text("one\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_git_state_reads_commit_and_dirty_flag_of_a_real_checkout(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    state = provenance.git_state([outside, repo])
    assert state["commit"] == git(repo, "rev-parse", "HEAD")
    assert state["dirty"] is False
    assert Path(state["root"]) == repo.resolve()
    (repo / "a.txt").write_text("two\n")
    assert provenance.git_state([repo])["dirty"] is True
    missing = provenance.git_state([outside])
    assert missing["commit"] is None and "not a git checkout" in missing["reason"]


def test_reading_the_git_state_never_writes_the_checkouts_index(repo: Path) -> None:
    """``git status`` refreshes the index under index.lock: a run that killed it at its timeout
    (or was killed itself) left the lock, and the user's next commit failed."""
    old = 1_000_000_000
    os.utime(repo / "a.txt", (old, old))  # stat data the index does not hold: a refresh
    index = repo / ".git" / "index"
    before = index.stat().st_mtime_ns
    provenance.git_state([repo])
    assert index.stat().st_mtime_ns == before


def test_ci_run_url_only_with_all_github_variables() -> None:
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r"}
    assert provenance.ci_run_url(env) is None
    env["GITHUB_RUN_ID"] = "42"
    assert provenance.ci_run_url(env) == "https://github.com/o/r/actions/runs/42"
    env["GITHUB_RUN_ATTEMPT"] = "2"
    assert provenance.ci_run_url(env) == "https://github.com/o/r/actions/runs/42/attempts/2"


def test_a_results_file_carries_commit_command_and_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/bloomperf")
    monkeypatch.setenv("GITHUB_RUN_ID", "7")
    monkeypatch.setattr("sys.argv", ["/x/bin/bloomperf", "run", "--model", "tiny bloom"])
    environment = environment_fingerprint(detect_topology())
    path = tmp_path / "r.json"
    save_run(replace(night_run(date(2026, 11, 1), [ok_cell(44.0)]), environment=environment), path)
    stored = read_results(path).environment
    here = Path(provenance.__file__).resolve().parent
    assert stored["provenance"]["git"]["commit"] == git(here, "rev-parse", "HEAD")
    assert stored["provenance"]["command"] == "bloomperf run --model 'tiny bloom'"
    assert stored["provenance"]["ci_run_url"] == "https://github.com/o/bloomperf/actions/runs/7"
    assert stored["packages"]["transformers"]


def environment(commit: str, transformers: str, driver: str | None) -> dict[str, Any]:
    return {
        "driver": driver,
        "packages": {"transformers": transformers, "torch": "2.13.0"},
        "provenance": {"git": {"commit": commit, "dirty": False}},
    }


def test_what_changed_names_commit_driver_and_packages() -> None:
    before = environment("a" * 40, "4.43.4", "550.54")
    after = environment("b" * 40, "5.24.0", "560.10")
    assert provenance.what_changed(before, after) == [
        "bloomperf commit: aaaaaaaaaaaa → bbbbbbbbbbbb",
        "driver: 550.54 → 560.10",
        "transformers 4.43.4 → 5.24.0",
    ]
    assert provenance.what_changed(before, before) == []


def test_diff_of_two_runs_says_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "before.json", tmp_path / "after.json"
    run = night_run(date(2026, 11, 1), [ok_cell(44.0)])
    save_run(replace(run, environment=environment("a" * 40, "4.43.4", None)), first)
    save_run(replace(run, environment=environment("a" * 40, "4.44.0", None)), second)
    cli.main(["diff", str(first), str(second)])
    out = capsys.readouterr().out
    assert "What changed between the runs:\n  transformers 4.43.4 → 4.44.0\n" in out


def test_history_changes_say_what_changed_on_the_night_of_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "history"
    for i in range(12):
        ms, version = (44.0, "4.43.4") if i < 6 else (52.0, "4.44.0")
        run = night_run(night(i), [ok_cell(ms)])
        add_night(folder, replace(run, environment=environment("c" * 40, version, None)), tmp_path)
    assert cli.main(["history", "changes", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "2026-10-07  ds-inference-fp16-bs1  ms_per_token" in out
    assert "      what changed: transformers 4.43.4 → 4.44.0\n" in out
