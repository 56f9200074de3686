"""The outside package (``tests/outside``), pip-installed once per test session into a private
folder, never into the venv: only the processes given ``outside_env()`` see its entry points.

A test module uses it with ``from tests.outside_install import outside_package`` (the fixture)
and runs real ``bloomperf`` or pytest subprocesses with ``PYTHONPATH`` set to the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent / "outside"


@pytest.fixture(scope="session")
def outside_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the package was installed into (its code and its entry points)."""
    target = tmp_path_factory.mktemp("outside-site")
    # setuptools writes build/ and egg-info beside the sources: build a copy, not the tree.
    source = shutil.copytree(SOURCE, tmp_path_factory.mktemp("outside-build") / "src")
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*pip, "--no-index", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(target.glob("bloomperf_outside-*.dist-info")), sorted(target.iterdir())
    return target


def outside_env(target: Path, **extra: str) -> Mapping[str, str]:
    """This process's environment with the installed package on ``PYTHONPATH``."""
    paths = [str(target), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}


def write_distribution(root: Path, group: str, points: Mapping[str, str], source: str) -> str:
    """A distribution laid out as pip leaves one in site-packages, for a test that puts ``root``
    on ``sys.path``: a module of ``source`` and a dist-info folder whose entry_points.txt names
    ``points`` (entry-point name: attribute of the module) in ``group``. The module's name."""
    module = "bloomperf_test_" + group.rpartition(".")[2]
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    lines = [f"{name} = {module}:{attr}" for name, attr in points.items()]
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
    return module
