"""The outside package (``tests/outside``), installed only on ``PYTHONPATH``, extends bloomperf
with no edit of bloomperf/: its backend (``bloomperf_outside.backend``, registered through the
``bloomperf.backends`` entry point) runs, is judged, reported and planned like a built-in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.outside_install import outside_env, outside_package

__all__ = ["outside_package"]  # the session fixture, used by name

BACKEND, DISPLAY = "static-cache", "Static-Cache"


def bloomperf(env: Mapping[str, str] | None, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=None if env is None else dict(env),
    )


@pytest.fixture(scope="module")
def backend_results(outside_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU run of the outside backend beside accelerate, without --dtypes: the backend's
    own default dtype on CPU (fp32) is taken from its class."""
    results = tmp_path_factory.mktemp("outside-backend") / "results.json"
    run = bloomperf(
        outside_env(outside_package), "run", "--no-lock", "--backends", f"{BACKEND},accelerate",
        "--batch-sizes", "1", "--cycles", "1", "--new-tokens", "4", "--output", str(results),
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    assert f"{DISPLAY} fp32" in run.stdout  # the comparison's row, by the class's display name
    return results


def test_an_outside_backend_runs_its_cells_end_to_end(backend_results: Path) -> None:
    cells = json.loads(backend_results.read_text())["cells"]
    ours = [c for c in cells if c["backend"] == BACKEND]
    assert [(c["dtype"], c["batch_size"], c["outcome"]) for c in ours] == [("fp32", 1, "ok")]
    (cell,) = ours
    assert cell["ms_per_token"] > 0 and len(cell["samples_ms_per_token"]) == 1
    assert cell["details"]["path"] == "generate, static KV cache"  # its own load and generate
    # No memory model: nothing predicted for it, while the built-in beside it is predicted.
    assert not any(key.startswith("predicted_") for key in cell["details"])
    (theirs,) = [c for c in cells if c["backend"] == "accelerate" and c["dtype"] == "fp32"]
    assert "predicted_peak_bytes" in theirs["details"]


def test_diff_and_report_show_it_by_its_display_name(
    outside_package: Path, backend_results: Path, tmp_path: Path
) -> None:
    env = outside_env(outside_package)
    diff = bloomperf(env, "diff", str(backend_results))
    assert diff.returncode in (0, 1), diff.stderr
    assert f"{DISPLAY} fp32" in diff.stdout
    report = bloomperf(env, "report", str(backend_results), "--out-dir", str(tmp_path / "r"))
    assert report.returncode == 0, report.stderr
    assert f"{DISPLAY} fp32" in (tmp_path / "r" / "index.html").read_text()


def test_a_dry_run_plans_it_without_predicting_its_memory(outside_package: Path) -> None:
    """On a GPU topology without a baseline, accelerate's large batches are skipped on its
    memory model's prediction; the outside backend's are planned to run, unpredicted."""
    plan = bloomperf(
        outside_env(outside_package), "run", "--dry-run", "--format", "json", "--no-lock",
        "--backends", f"accelerate,{BACKEND}", "--dtypes", "bf16", "--model", "bloom-176b",
        "--topology", "1xA100-40GB", "--batch-sizes", "1,8,64",
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    groups = {g["backend"]: g for g in json.loads(plan.stdout)["groups"]}
    assert groups[BACKEND]["world_size"] == 1
    assert [(c["skip"], c["predicted"]) for c in groups[BACKEND]["cells"]] == [(None, {})] * 3
    theirs = groups["accelerate"]["cells"]
    assert all(c["predicted"] for c in theirs) and "predicted to run out" in str(theirs[-1]["skip"])


def test_without_the_package_its_name_is_refused_in_one_line(backend_results: Path) -> None:
    run = bloomperf(None, "run", "--no-lock", "--backends", BACKEND, "--batch-sizes", "1")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and f"unknown value {BACKEND!r}" in run.stderr
    diff = bloomperf(None, "diff", str(backend_results))  # its results name an unknown backend
    assert diff.returncode == 2 and diff.stderr.count("\n") == 1
    assert str(backend_results) in diff.stderr and f"unknown backend {BACKEND!r}" in diff.stderr


def test_the_pytest_plugin_runs_it(
    outside_package: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", outside_env(outside_package)["PYTHONPATH"])
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.cpu
        def test_cpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    result = pytester.runpytest_subprocess(
        "-m", "cpu", "-v", f"--bloomperf-backends={BACKEND}", "--bloomperf-batch-sizes=1",
        "--bloomperf-cycles=1", "--bloomperf-new-tokens=4", "--bloomperf-no-lock",
        f"--bloomperf-output={pytester.path / 'r.json'}",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*test_cpu?{BACKEND}-fp32-bs1? PASSED*", f"*{DISPLAY} fp32*"])
