"""No silent skip in CI (tests/skips.py): under ``CI`` a skip its list does not allow fails, in
a test and in a module's collection, and the allowed ones are counted in the summary."""

from __future__ import annotations

import pytest

from tests.skips import ALLOWED, allowance, has_gpu

SKIPPING = """
import pytest

def test_runs():
    pass

def test_gpu_only():
    pytest.skip("no GPU: NVML found none")

def test_silently():
    pytest.skip("no deepspeed here")
"""


def test_an_unlisted_skip_fails_under_ci_and_a_listed_one_is_counted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_skipping=SKIPPING)
    monkeypatch.delenv("CI", raising=False)
    pytester.runpytest_inprocess("-p", "tests.skips").assert_outcomes(passed=1, skipped=2)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "tests.skips")
    gpu_skips = 0 if has_gpu() else 1
    result.assert_outcomes(passed=1, skipped=gpu_skips, failed=2 - gpu_skips)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*tests/skips.py does not allow it: no deepspeed here*"])
    result.stdout.fnmatch_lines([f"*skips under CI: {gpu_skips} (tests/skips.py)*"])


def test_a_module_skipped_at_import_fails_its_collection_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_missing="import pytest\npytest.importorskip('no_such_module')\ndef test_x(): pass\n"
    )
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "tests.skips")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*does not allow it: could not import 'no_such_module'*"])


def test_every_allowed_skip_says_why_and_matches_only_its_reasons() -> None:
    assert all(entry.why for entry in ALLOWED)
    assert allowance("no deepspeed") is None and allowance("root reads every file") is None
    if not has_gpu():
        assert allowance("no GPU: NVML: driver not loaded") is not None
