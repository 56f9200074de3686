"""The package's cut stays readable: every module is placed in docs/ARCHITECTURE.md, none grows
past about 400 lines (the layers and cycles are checked by lint-imports and test_import_cycles)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bloomperf"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
# "Around 400 lines at most": a module a little over it is not worth a split, one at 500 is.
MAX_LINES = 420


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_every_module_is_placed_in_the_architecture_page() -> None:
    named = set(re.findall(r"`([a-z_]+)/?`", ARCHITECTURE.read_text()))
    missing = [str(p.relative_to(PACKAGE)) for p in modules() if p.stem not in named]
    packages = {p.parent.name for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}
    missing += sorted(packages - named)
    assert missing == [], f"not in docs/ARCHITECTURE.md: {missing}"


def test_no_module_is_much_over_400_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in modules()}
    large = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert large == {}, f"split these by concern: {large}"


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")
)
def test_every_benchmark_script_starts(script: str) -> None:
    """The benchmark scripts import bloomperf's internals (mypy checks them too): a refactor that
    moves a name must move it there as well, or the figures in the README cannot be reproduced."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
