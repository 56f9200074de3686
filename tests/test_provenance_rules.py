"""Provenance by value: the checkout's state as git itself tells it, the CI run's page, the command
line, and each line ``what_changed`` writes for two environments."""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog import provenance
from bloomperf.catalog.provenance import (
    NOTHING_CHANGED,
    SYSTEM_KEYS,
    checkout_candidates,
    ci_run_url,
    git_state,
    what_changed,
)
from tests.test_provenance import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "checkout"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("one\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    return path


# ---- the checkout --------------------------------------------------------------------------


def test_the_branch_is_gits_and_a_detached_head_says_head(repo: Path) -> None:
    assert git_state([repo]) == {
        "commit": git(repo, "rev-parse", "HEAD"),
        "dirty": False,
        "branch": "main",
        "root": str(repo.resolve()),
    }
    git(repo, "checkout", "-q", "-b", "nightly/2026-12-07")
    assert git_state([repo])["branch"] == "nightly/2026-12-07"
    git(repo, "checkout", "-q", "--detach")
    assert git_state([repo])["branch"] == "HEAD"


def test_a_subfolder_reports_the_checkouts_root(repo: Path) -> None:
    inner = repo / "deep" / "er"
    inner.mkdir(parents=True)
    assert git_state([inner])["root"] == str(repo.resolve())


def test_an_untracked_file_is_not_an_edit_and_a_staged_one_is(repo: Path) -> None:
    (repo / "scratch.log").write_text("a run's output\n")
    assert git_state([repo])["dirty"] is False
    (repo / "b.txt").write_text("new\n")
    git(repo, "add", "b.txt")
    assert git_state([repo])["dirty"] is True


def test_a_checkout_whose_status_git_cannot_read_is_dirty_unknown(repo: Path) -> None:
    (repo / ".git" / "index").write_text("garbage\n")  # rev-parse still answers, status fails
    state = git_state([repo])
    assert state["commit"] == git(repo, "rev-parse", "HEAD")
    assert state["dirty"] is None


def test_no_checkout_names_every_folder_it_looked_in(tmp_path: Path) -> None:
    folders = [tmp_path / "a", tmp_path / "b c"]
    for folder in folders:
        folder.mkdir()
    assert git_state(folders) == {
        "commit": None,
        "dirty": None,
        "reason": f"not a git checkout (or no git): {folders[0]}, {folders[1]}",
    }


def test_a_git_that_hangs_is_given_up_at_the_timeout(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout on a stalled network file system: the run goes on without its commit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hanging = bin_dir / "git"
    # Ends by itself: a git call without the timeout returns, and the test fails, not hangs.
    hanging.write_text("#!/bin/sh\nexec sleep 3\n")
    hanging.chmod(hanging.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(provenance, "GIT_TIMEOUT_S", 0.5)
    state = git_state([repo])
    assert state["commit"] is None and "not a git checkout" in state["reason"]


def test_without_git_on_the_path_there_is_no_commit(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert git_state([repo])["commit"] is None


def test_bloomperfs_own_tree_comes_before_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert checkout_candidates() == [Path(provenance.__file__).resolve().parent, tmp_path]


def test_provenance_names_the_command_as_a_shell_would_rerun_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["/opt/venv/bin/bloomperf", "run", "--model", "tiny bloom", "--output", "it's.json"]
    monkeypatch.setattr(sys, "argv", argv)
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r"}
    env["GITHUB_RUN_ID"] = "9"
    found = provenance.provenance(env)
    assert shlex.split(found["command"]) == ["bloomperf", *argv[1:]]
    assert found["cwd"] == str(tmp_path)
    assert found["ci_run_url"] == "https://github.com/o/r/actions/runs/9"
    assert found["git"] == git_state(checkout_candidates())  # each read on its own above
    monkeypatch.setattr(sys, "argv", [])
    assert provenance.provenance({})["command"] is None
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://ghe.example")
    monkeypatch.setenv("GITHUB_REPOSITORY", "team/models")
    monkeypatch.setenv("GITHUB_RUN_ID", "5")
    # This process's environment when none is given.
    assert provenance.provenance()["ci_run_url"] == "https://ghe.example/team/models/actions/runs/5"


# ---- the CI run's page ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "attempt", "url"),
    [
        ("https://github.com", None, "https://github.com/o/r/actions/runs/42"),
        ("https://ghe.example/", "1", "https://ghe.example/o/r/actions/runs/42"),
        ("https://ghe.example//", "", "https://ghe.example/o/r/actions/runs/42"),
        ("https://github.com", "3", "https://github.com/o/r/actions/runs/42/attempts/3"),
        ("https://github.com/", "11", "https://github.com/o/r/actions/runs/42/attempts/11"),
        ("https://CODE.BOX/", None, "https://CODE.BOX/o/r/actions/runs/42"),  # only slashes cut
    ],
)
def test_the_run_page_of_the_first_attempt_or_the_attempt(
    server: str, attempt: str | None, url: str
) -> None:
    env = {"GITHUB_SERVER_URL": server, "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42"}
    if attempt is not None:
        env["GITHUB_RUN_ATTEMPT"] = attempt
    assert ci_run_url(env) == url


@pytest.mark.parametrize("missing", ["GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"])
def test_no_run_page_without_each_variable(missing: str) -> None:
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r"}
    env["GITHUB_RUN_ID"] = "42"
    assert ci_run_url({k: v for k, v in env.items() if k != missing}) is None
    assert ci_run_url({**env, missing: ""}) is None


# ---- what changed ---------------------------------------------------------------------------


def checkout(commit: str | None, dirty: bool | None = False) -> dict[str, Any]:
    return {"provenance": {"git": {"commit": commit, "dirty": dirty}}}


@pytest.mark.parametrize(
    ("before", "after", "line"),
    [
        (checkout("a" * 40), checkout("a" * 40, True), "aaaaaaaaaaaa → aaaaaaaaaaaa (dirty)"),
        (checkout(None), checkout("b" * 40), "unknown → bbbbbbbbbbbb"),
        ({}, checkout("c" * 40, None), "unknown → cccccccccccc"),
        (checkout("d" * 40, True), checkout(""), "dddddddddddd (dirty) → unknown"),
    ],
)
def test_the_checkout_line_names_each_commit_and_its_edits(
    before: dict[str, Any], after: dict[str, Any], line: str
) -> None:
    assert what_changed(before, after) == [f"bloomperf commit: {line}"]


def test_the_same_commit_with_other_fields_is_no_change() -> None:
    before = {"provenance": {"git": {"commit": "a" * 40, "dirty": False, "branch": "main"}}}
    after = {"provenance": {"git": {"commit": "a" * 40, "dirty": False, "branch": "x"}}}
    assert what_changed(before, after) == []
    assert NOTHING_CHANGED.startswith("nothing recorded differs")


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (None, "560.10", "none → 560.10"),
        ("", "560.10", "none → 560.10"),
        ("550.54", None, "550.54 → none"),
        (["A100", "A100"], ["H100"], "A100, A100 → H100"),
        ([], ["H100"], "none → H100"),
        (12.4, 13.0, "12.4 → 13.0"),
    ],
)
def test_each_system_key_is_shown_with_none_for_what_was_not_there(
    old: Any, new: Any, line: str
) -> None:
    for key in SYSTEM_KEYS:
        assert what_changed({key: old}, {key: new}) == [f"{key}: {line}"]


def test_a_package_installed_or_removed_between_runs_is_named() -> None:
    before = {"packages": {"torch": "2.5.1", "bitsandbytes": "0.45.0"}}
    after = {"packages": {"torch": "2.5.1", "flash-attn": "2.7.0"}}
    assert what_changed(before, after) == [
        "bitsandbytes 0.45.0 → none",
        "flash-attn none → 2.7.0",
    ]
    assert what_changed({}, after) == ["flash-attn none → 2.7.0", "torch none → 2.5.1"]


versions = st.one_of(st.none(), st.sampled_from(["1.0", "1.1", "2.0"]))
environments = st.fixed_dictionaries(
    {},
    optional={
        "driver": versions,
        "nccl": versions,
        "packages": st.dictionaries(st.sampled_from(["torch", "vllm", "accelerate"]), versions),
        "provenance": st.builds(
            lambda c, d: {"git": {"commit": c, "dirty": d}},
            st.sampled_from([None, "a" * 40, "b" * 40]),
            st.booleans(),
        ),
    },
)


@given(environments, environments)
def test_what_changed_is_empty_exactly_when_nothing_it_reads_differs(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    lines = what_changed(before, after)
    assert (lines == []) == (what_changed(after, before) == [])
    assert what_changed(before, before) == []

    def read(env: dict[str, Any]) -> tuple[Any, ...]:
        git = (env.get("provenance") or {}).get("git") or {}
        commit = git.get("commit")
        packages = {k: v for k, v in (env.get("packages") or {}).items() if v is not None}
        return (
            commit,
            bool(git.get("dirty")) and bool(commit),
            env.get("driver"),
            env.get("nccl"),
            packages,
        )

    assert (lines == []) == (read(before) == read(after))
    # Swapping the runs swaps each line's two sides.
    assert len(what_changed(after, before)) == len(lines)
