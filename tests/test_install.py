"""A non-editable install is the package users get: every subpackage, the shipped baselines, the
console entry and the pytest plugin, run from outside the checkout.

The wheel is built from this tree (setuptools, no network) and installed with ``--target`` into a
folder that comes first on PYTHONPATH, so the installed copy, not the checkout, is what runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bloomperf"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the folder it is installed into)."""
    work = tmp_path_factory.mktemp("install")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (work / "dist").glob("bloomperf-*.whl")
    target = work / "site"
    done = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return wheel, target


def installed_env(target: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(target)}


def test_the_wheel_holds_every_module_and_the_baselines(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")}
    expected |= {str(p.relative_to(ROOT)) for p in (PACKAGE / "baselines").glob("*.json")}
    assert expected - names == set()
    assert any(n.endswith("entry_points.txt") for n in names)


def test_the_installed_copy_runs_outside_the_checkout(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    """`bloomperf run` from the installed copy finds its shipped baseline and judges a cell."""
    _, target = installed
    env = installed_env(target)
    where = subprocess.run(
        [sys.executable, "-c", "import bloomperf; print(bloomperf.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(target)), where.stdout
    run = subprocess.run(
        [
            *(sys.executable, "-m", "bloomperf", "run", "--dtypes", "fp32", "--batch-sizes", "1"),
            *("--cycles", "2", "--output", str(tmp_path / "r.json"), "--no-lock"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert str(target / "bloomperf" / "baselines" / "cpu.tiny.json") in run.stdout + run.stderr


def test_the_installed_plugin_runs_the_cpu_matrix(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, target = installed
    (tmp_path / "test_matrix.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.cpu\n"
        "def test_cpu(bloomperf_cell, bloomperf, benchmark):\n"
        "    bloomperf.check(bloomperf_cell, benchmark)\n"
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-m", "cpu", "-p", "no:cacheprovider"),
            *("--rootdir", str(tmp_path), "--bloomperf-dtypes", "fp32"),
            *("--bloomperf-batch-sizes", "1", "--bloomperf-no-lock"),
            str(tmp_path / "test_matrix.py"),
        ],
        cwd=tmp_path,
        env=installed_env(target),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
