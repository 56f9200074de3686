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
from bloomperf.store.baseline.folders import package_baselines_dir, search_folders
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
