"""The package's cut stays readable: every module is placed in docs/ARCHITECTURE.md, none grows
past about 400 lines (the layers and cycles are checked by lint-imports and test_import_cycles)."""

from __future__ import annotations

import ast
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


def folder_paragraphs() -> dict[str, set[str]]:
    """``{folder: names in backticks}`` for each ``**`folder/`**`` paragraph of the page."""
    text = ARCHITECTURE.read_text()
    found = {}
    for paragraph in text.split("\n\n"):
        head = re.match(r"\*\*`([a-z_]+)/`\*\*", paragraph)
        if head:
            found[head.group(1)] = set(re.findall(r"`([a-z_]+)/?`", paragraph))
    return found


def test_every_module_is_placed_in_its_folders_paragraph() -> None:
    """The page is the map of the folders: each top folder has its paragraph, which names every
    module and subfolder inside it (a module moved or added must be placed there)."""
    paragraphs = folder_paragraphs()
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(paragraphs) == folders
    missing = []
    for path in modules() + sorted(PACKAGE.rglob("__init__.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) < 2:
            continue
        name = parts[-2] if path.name == "__init__.py" else path.stem
        if path.name == "__init__.py" and len(parts) == 2:
            continue
        if name not in paragraphs[parts[0]]:
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == [], f"not in its folder's paragraph of docs/ARCHITECTURE.md: {missing}"


def test_the_top_level_is_a_handful_of_folders() -> None:
    entries = [p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 15, entries


def test_the_architecture_page_is_short() -> None:
    assert len(ARCHITECTURE.read_text().splitlines()) <= 80


def stream_defaults(source: Path) -> list[str]:
    """``file:line`` of each parameter whose default is ``sys.stdout`` or ``sys.stderr``."""
    found = []
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if (
                    isinstance(default, ast.Attribute)
                    and isinstance(default.value, ast.Name)
                    and default.value.id == "sys"
                    and default.attr in ("stdout", "stderr")
                ):
                    found.append(f"{source.relative_to(ROOT)}:{default.lineno}")
    return found


def test_no_default_binds_a_standard_stream_at_import() -> None:
    """A default is evaluated once, at import: ``err=sys.stderr`` keeps the stream of that moment
    (pytest's capture, a closed pipe) after it is replaced. Read the stream when called."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    bound = [where for source in sorted(sources) for where in stream_defaults(source)]
    assert bound == [], f"take None and read sys.stdout/sys.stderr in the body: {bound}"


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


def test_the_oldest_supported_python_is_the_one_checked() -> None:
    """requires-python's floor is what mypy checks against (it refuses what that Python lacks,
    such as datetime.UTC before 3.11) and what ruff targets: one declaration, tested in CI."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    floor = re.fullmatch(r">=\s*3\.(\d+)", project["project"]["requires-python"])
    assert floor is not None, project["project"]["requires-python"]
    assert project["tool"]["mypy"]["python_version"] == f"3.{floor[1]}"
    assert project["tool"]["ruff"]["target-version"] == f"py3{floor[1]}"


def test_every_test_that_judges_time_is_in_a_pass_that_ci_runs_alone() -> None:
    """.ci/run's serial pass collects only the files ``tests/conftest.py`` names (it marks their
    tests), and runs the one file whose tests carry the mark themselves, the served comparisons,
    by name and alone: a mark set anywhere else would put a timed test in the parallel pass,
    where nothing runs it with the machine to itself."""
    from tests.conftest import MATRIX_FILE, SERIAL_FILES

    marking = {
        path.name: sorted(set(re.findall(r"pytest\.mark\.(serial|matrix)\b", path.read_text())))
        for path in (ROOT / "tests").glob("test_*.py")
    }
    assert {name: marks for name, marks in marking.items() if marks} == {
        "test_serving_ab.py": ["serial"]
    }
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest -q -m serial tests/test_serving_ab.py" in ci
    assert "test_serving_ab.py" not in SERIAL_FILES and MATRIX_FILE not in SERIAL_FILES
    assert all((ROOT / "tests" / name).is_file() for name in (*SERIAL_FILES, MATRIX_FILE))
