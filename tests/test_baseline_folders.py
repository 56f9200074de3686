"""Baselines as package data, a user folder, and the search order `baseline show` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.baseline.folders import (
    describe_search,
    is_package_folder,
    package_baselines_dir,
    search_folders,
    user_baselines_dir,
)
from bloomperf.store.baseline.search import find_baseline
from tests.builders import BASELINES, BLOG_RESULTS, REPO

SHIPPED_8X = "8xA100-SXM4-80GB.bloom-176b.json"


def test_a_non_editable_install_finds_the_shipped_baselines(tmp_path: Path) -> None:
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(REPO)], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, "-m", "bloomperf", "baseline", "show", "8xA100-80GB"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    shipped = target / "bloomperf" / "baselines"
    assert f"shown: {shipped / SHIPPED_8X}" in done.stdout
    assert f"3. {shipped} (shipped)" in done.stdout
    assert (
        "2. " + str(tmp_path / "xdg" / "bloomperf" / "baselines") + " (user, absent)" in done.stdout
    )


def test_the_repository_baselines_are_the_shipped_ones() -> None:
    assert BASELINES.resolve() == package_baselines_dir().resolve()


def test_a_user_baseline_hides_the_shipped_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./baselines here
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert search_folders() == [package_baselines_dir()]
    user = tmp_path / "xdg" / "bloomperf" / "baselines"
    user.mkdir(parents=True)
    shipped = load_baseline(package_baselines_dir() / SHIPPED_8X)
    save_baseline(replace(shipped, notes=("our own",)), user / SHIPPED_8X)
    assert search_folders() == [user, package_baselines_dir()]
    found = find_baseline("8xA100-SXM4-80GB", "bloom-176b")
    assert found is not None and found.path == str(user / SHIPPED_8X)
    assert cli.main(["baseline", "show", "8xA100-80GB"]) == 0
    out = capsys.readouterr().out
    assert f"shown: {user / SHIPPED_8X}" in out
    cpu = find_baseline("cpu", "tiny")  # not in the user folder: the shipped one
    assert cpu is not None and Path(cpu.path).parent == package_baselines_dir()


def test_accept_writes_into_the_user_folder_never_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    before = (package_baselines_dir() / SHIPPED_8X).read_bytes()
    assert cli.main(["baseline", "accept", str(BLOG_RESULTS)]) == 0
    written = tmp_path / "xdg" / "bloomperf" / "baselines"
    assert f"bloomperf: {written}/" in capsys.readouterr().out
    assert (package_baselines_dir() / SHIPPED_8X).read_bytes() == before


def test_accept_in_a_checkout_never_writes_through_its_baselines_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In a checkout, ./baselines is a link into the package: the README's "baseline accept"
    # once overwrote the tracked cpu.tiny.json through it.
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    before = {p.name: p.read_bytes() for p in package_baselines_dir().glob("*.json")}
    assert cli.main(["baseline", "accept", str(BLOG_RESULTS)]) == 0
    user = tmp_path / "xdg" / "bloomperf" / "baselines"
    assert f"bloomperf: {user / SHIPPED_8X}: accepted" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in package_baselines_dir().glob("*.json")} == before
    # What was accepted is what diff finds next, before the shipped file the link leads to.
    assert search_folders() == [user, package_baselines_dir()]
    found = find_baseline("8xA100-SXM4-80GB", "bloom-176b")
    assert found is not None and found.path == str(user / SHIPPED_8X)


@pytest.mark.parametrize("named", ["baselines", "bloomperf/baselines", "baselines/"])
def test_accept_refuses_the_package_folder_by_any_name(
    named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    before = {p.name: p.read_bytes() for p in package_baselines_dir().glob("*.json")}
    assert cli.main(["baseline", "accept", str(BLOG_RESULTS), "--baselines", named]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "inside the bloomperf package" in err
    assert {p.name: p.read_bytes() for p in package_baselines_dir().glob("*.json")} == before


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A working folder and an XDG data home of the test's own: (./baselines, user folder)."""
    work, data = tmp_path / "work", tmp_path / "data"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    return work / "baselines", data / "bloomperf" / "baselines"


@pytest.mark.parametrize("project", [True, False])
@pytest.mark.parametrize("user", [True, False])
def test_the_search_is_project_then_user_then_shipped_each_if_there(
    places: tuple[Path, Path], project: bool, user: bool
) -> None:
    """In process, every combination: the order, an absent folder skipped by the search and
    marked ``absent`` by the description, each with its label and number."""
    project_dir, user_dir = places
    if project:
        project_dir.mkdir()
    if user:
        user_dir.mkdir(parents=True)
    shipped = package_baselines_dir()
    expected = [d for d, there in ((project_dir, project), (user_dir, user)) if there]
    assert search_folders() == [*expected, shipped]
    assert search_folders(Path("given")) == [Path("given")]

    def absent(there: bool) -> str:
        return "" if there else ", absent"

    assert describe_search() == (
        f"baselines searched, first match wins: 1. {project_dir} (./baselines{absent(project)});"
        f" 2. {user_dir} (user{absent(user)}); 3. {shipped} (shipped)"
    )
    assert describe_search(Path("given")) == "baselines searched: given (--baselines)"


def test_a_project_folder_that_links_to_the_shipped_one_is_searched_last_and_once(
    places: tuple[Path, Path],
) -> None:
    project_dir, user_dir = places
    project_dir.symlink_to(package_baselines_dir(), target_is_directory=True)
    user_dir.parent.mkdir(parents=True)
    user_dir.symlink_to(project_dir, target_is_directory=True)  # the same folder again
    shipped = package_baselines_dir()
    assert search_folders() == [user_dir]  # the link first; the shipped folder is it, once
    assert describe_search() == (
        f"baselines searched, first match wins: 1. {user_dir} (user); 2. {shipped} (shipped)"
    )


def test_the_package_folder_is_known_through_links_and_inside_it_and_nothing_else_is(
    tmp_path: Path,
) -> None:
    shipped = package_baselines_dir()
    link = tmp_path / "link"
    link.symlink_to(shipped, target_is_directory=True)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert is_package_folder(shipped) and is_package_folder(link)
    assert is_package_folder(link / "sub")
    assert not is_package_folder(tmp_path) and not is_package_folder(shipped.parent)
    assert not is_package_folder(loop) and not is_package_folder(Path("bad\0name"))


@pytest.mark.parametrize("xdg", [None, "relative/data"])
def test_the_user_folder_falls_back_to_the_homes_local_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None
) -> None:
    """XDG: an unset or relative XDG_DATA_HOME means ~/.local/share."""
    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
    expected = tmp_path / ".local" / "share" / "bloomperf" / "baselines"
    assert user_baselines_dir() == expected
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert user_baselines_dir() == tmp_path / "x" / "bloomperf" / "baselines"
