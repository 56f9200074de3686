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
