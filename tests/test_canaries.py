"""The mutation canaries stay applicable: each snippet is still in the code, each test exists.

``tests/canaries/run.py`` (in ``.ci/run``) checks that each mutant is killed; this cheap check
fails in the ordinary suite as soon as a refactor moves a snippet or renames a named test.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "canaries"))

import run as runner  # noqa: E402
from mutations import MUTATIONS, Mutation  # noqa: E402


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_canary_applies_to_the_code_and_names_real_tests(mutation: Mutation) -> None:
    text = (ROOT / mutation.file).read_text()
    assert text.count(mutation.original) == 1, f"stale canary: snippet not once in {mutation.file}"
    assert mutation.replacement != mutation.original
    assert mutation.tests and mutation.why
    for node in mutation.tests:
        path, _, name = node.partition("::")
        function = re.sub(r"\[.*\]$", "", name)
        assert re.search(rf"^\s*def {re.escape(function)}\(", (ROOT / path).read_text(), re.M), node


def test_canary_names_are_unique() -> None:
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))


def test_the_scratch_copy_keeps_the_trees_links(tmp_path: Path) -> None:
    """``baselines`` is a tracked link: a copy without it errors in every test that reads the
    blog's table, which once counted as a kill."""
    runner.copy_tree(tmp_path)
    link = tmp_path / "baselines"
    assert link.is_symlink() and link.resolve() == (tmp_path / "bloomperf" / "baselines")
    assert sorted(p.name for p in link.iterdir()) == sorted(
        p.name for p in (ROOT / "baselines").iterdir()
    )


@pytest.mark.parametrize(
    "summary, failed",
    [
        ("1 failed, 3 passed in 2.0s", True),
        ("2 failed in 1.1s", True),
        ("3 passed, 1 error in 0.5s", False),
        ("1 failed, 2 errors in 0.5s", True),
        ("4 passed in 0.5s", False),
        ("", False),
    ],
)
def test_only_a_failed_test_is_a_kill(summary: str, failed: bool) -> None:
    assert runner.failed_by_a_test(f".F.\n{summary}\n") == failed


def test_a_mutant_that_breaks_a_fixture_is_not_counted_killed() -> None:
    """A real run of the runner on a mutant of a test fixture: pytest exits 1, no test fails."""
    broken = Mutation(
        "fixture-errors",
        "tests/conftest.py",
        "    return load_baseline(BLOG_BASELINE)\n",
        "    raise RuntimeError('no table')\n",
        ("tests/test_compare.py::test_a_run_made_from_the_baseline_is_all_same",),
        "a fixture that errors",
    )
    verdict = runner.run_one(broken, timeout=300)
    assert verdict.status == "broken", verdict
    assert "errored, no test failed" in verdict.detail
