"""The mutation canaries stay applicable: each snippet is still in the code, each test exists.

``tests/canaries/run.py`` (in ``.ci/run``) checks that each mutant is killed; this cheap check
fails in the ordinary suite as soon as a refactor moves a snippet or renames a named test.
"""

from __future__ import annotations

import re
import subprocess
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


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_fails[x]"><failure message="no"/></testcase>
<testcase classname="tests.test_a.TestC" name="test_both"><failure/><error/></testcase>
<testcase classname="tests.test_a" name="test_then"><failure message="call"/></testcase>
<testcase classname="tests.test_a" name="test_then"><error message="teardown"/></testcase>
<testcase classname="tests.test_a" name="test_errs"><error message="fixture"/></testcase>
<testcase classname="tests.test_a" name="test_skips"><skipped/></testcase>
<testcase classname="tests.test_a" name="test_passes"/>
</testsuite></testsuites>"""


def test_only_a_failed_test_is_a_kill(tmp_path: Path) -> None:
    """Read back per named test: a failure (a teardown's error beside it is fine) kills; an
    error alone, a skip, a pass or a test missing from the report does not."""
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    outcomes = runner.junit_outcomes(report)
    read = {
        node: runner.outcome_of(outcomes, runner.junit_key(node))
        for node in (
            "tests/test_a.py::test_fails[x]",
            "tests/test_a.py::TestC::test_both",
            "tests/test_a.py::test_then",  # pytest's own shape: a teardown error after it
            "tests/test_a.py::test_errs",
            "tests/test_a.py::test_skips",
            "tests/test_a.py::test_passes",
            "tests/test_b.py::test_fails[x]",
            "tests/test_a.py::test_fails",  # every parametrized case, as `pytest NODE` runs
        )
    }
    assert read == {
        "tests/test_a.py::test_fails[x]": "failed",
        "tests/test_a.py::TestC::test_both": "failed",
        "tests/test_a.py::test_then": "failed",
        "tests/test_a.py::test_errs": "error",
        "tests/test_a.py::test_skips": "skipped",
        "tests/test_a.py::test_passes": "passed",
        "tests/test_b.py::test_fails[x]": "not run",
        "tests/test_a.py::test_fails": "failed",
    }
    assert runner.junit_outcomes(tmp_path / "missing.xml") == {}


def test_a_failed_test_whose_teardown_errors_reads_failed_from_pytests_own_report(
    tmp_path: Path,
) -> None:
    """The shape pytest really writes (two testcases of one name) read back as a kill; a
    teardown error after a passing call stays an error."""
    (tmp_path / "test_shape.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def breaks():\n"
        "    yield\n"
        "    raise RuntimeError('teardown')\n"
        "def test_fails(breaks):\n"
        "    assert False\n"
        "def test_passes(breaks):\n"
        "    pass\n"
    )
    report = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"--junitxml={report}",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_shape.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    outcomes = runner.junit_outcomes(report)
    assert runner.outcome_of(outcomes, ("test_shape", "test_fails")) == "failed"
    assert runner.outcome_of(outcomes, ("test_shape", "test_passes")) == "error"


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
    try:
        verdict = runner.run_one(broken, timeout=300)
    finally:
        runner.close_pytest_servers()
    assert verdict.status == "broken", verdict
    assert "error, no test failed" in verdict.detail


def test_every_canary_not_killed_has_its_reason_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not only the last one's: the reasons of a survivor and of a broken canary that finish
    first are printed too, and the exit status is 1."""
    chosen = [m.name for m in MUTATIONS[:4]]
    status = {chosen[0]: "survived", chosen[2]: "broken"}

    def judged(mutation: Mutation, timeout: float) -> runner.Verdict:
        state = status.get(mutation.name, "killed")
        return runner.Verdict(mutation.name, state, 1.0, f"why {mutation.name} is {state}")

    monkeypatch.setattr(runner, "run_one", judged)
    assert runner.main(["--jobs", "1", *chosen]) == 1
    out = capsys.readouterr().out
    assert f"why {chosen[0]} is survived" in out and f"why {chosen[2]} is broken" in out
    assert "killed" in out and f"why {chosen[1]}" not in out
    assert "2 of 4 killed" in out
