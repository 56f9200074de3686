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
    assert run.stderr.count("\n") == 1 and f"--backends: unknown value {BACKEND!r}" in run.stderr
    diff = bloomperf(None, "diff", str(backend_results))  # its results name an unknown backend
    assert diff.returncode == 2 and diff.stderr.count("\n") == 1
    assert str(backend_results) in diff.stderr and f"unknown backend {BACKEND!r}" in diff.stderr


def test_the_pytest_plugin_runs_it(
    outside_package: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", outside_env(outside_package)["PYTHONPATH"])
    monkeypatch.setenv("BLOOMPERF_OUTSIDE_SINK", str(pytester.path / "sink.jsonl"))
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
    # The outside metric measured the cell and the outside sink heard it and the finish.
    (cell,) = json.loads((pytester.path / "r.json").read_text())["cells"]
    assert len(cell["figures"]["tokens_per_cpu_s"]) == 1
    events = (pytester.path / "sink.jsonl").read_text().splitlines()
    assert [json.loads(e)["event"] for e in events] == ["cell", "finished"]


# ---- all three together: the backend, the metric and the sink from one outside package ------

METRIC, SINK_ENV = "tokens_per_cpu_s", "BLOOMPERF_OUTSIDE_SINK"


@pytest.fixture(scope="module")
def together(outside_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run of the outside backend alone: the outside metric measures its cycles, the
    outside sink hears every cell and the finish, and the built-in history sink files it."""
    folder = tmp_path_factory.mktemp("outside-together")
    env = {**outside_env(outside_package), SINK_ENV: str(folder / "sink.jsonl")}
    run = bloomperf(
        env, "run", "--no-lock", "--backends", BACKEND, "--batch-sizes", "1", "--cycles", "3",
        "--new-tokens", "4", "--output", str(folder / "results.json"),
        "--history", str(folder / "history"), "--allow-no-baseline",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    accept = bloomperf(
        env, "baseline", "accept", str(folder / "results.json"),
        "--baselines", str(folder / "baselines"),
    )  # fmt: skip
    assert accept.returncode == 0, accept.stderr
    return folder


def test_the_backend_metric_and_sink_travel_together(together: Path) -> None:
    (cell,) = json.loads((together / "results.json").read_text())["cells"]
    assert (cell["backend"], cell["outcome"]) == (BACKEND, "ok")
    assert len(cell["figures"][METRIC]) == 3 and min(cell["figures"][METRIC]) > 0
    events = [json.loads(line) for line in (together / "sink.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["cell", "finished"]
    assert events[0]["id"] == f"{BACKEND}-fp32-bs1" and events[1]["cells"] == 1
    (night,) = (together / "history").rglob("*.json")
    assert json.loads(night.read_text())["cells"][0]["figures"][METRIC] == cell["figures"][METRIC]


@pytest.mark.parametrize(("factor", "code"), [(4.0, 1), (0.25, 0)])
def test_the_gate_judges_the_outside_metric_of_the_outside_backend(
    outside_package: Path, together: Path, factor: float, code: int
) -> None:
    """Expected four times the measured figure: the higher-is-better metric fell, the gate
    fails; expected a quarter of it: it rose, the gate passes."""
    (source,) = (together / "baselines").glob("*.json")
    data = json.loads(source.read_text())
    (expected,) = data["cells"]
    expected["figures"][METRIC]["samples"] = [
        v * factor for v in expected["figures"][METRIC]["samples"]
    ]
    planted = together / f"planted-{factor:g}.json"
    planted.write_text(json.dumps(data))
    env = outside_env(outside_package)
    done = bloomperf(env, "diff", str(together / "results.json"), "--baseline", str(planted))
    assert done.returncode == code, done.stdout + done.stderr
    assert f"{DISPLAY} fp32" in done.stdout
    word = "regressed" if code else "improved"
    assert f"tokens per CPU-second {word}" in " ".join(done.stdout.split())


def test_history_names_a_fall_of_the_outside_metric_as_worse(
    outside_package: Path, together: Path, tmp_path: Path
) -> None:
    """Nights of the outside backend whose outside metric halves from night 9: ``history
    changes`` reports that one step, on that backend's cell, as a change for the worse (a fall
    of a higher-is-better figure)."""
    run = json.loads((together / "results.json").read_text())
    env = outside_env(outside_package)
    history = tmp_path / "history"
    for night in range(14):
        factor = 1.0 if night < 8 else 0.5
        cell = run["cells"][0]
        document = {
            **run,
            "started_at": f"2026-11-{night + 1:02d}T02:00:00+00:00",
            "cells": [{**cell, "figures": {METRIC: [v * factor for v in cell["figures"][METRIC]]}}],
        }
        path = tmp_path / f"night-{night}.json"
        path.write_text(json.dumps(document))
        added = bloomperf(env, "history", "add", str(path), "--history", str(history))
        assert added.returncode == 0, added.stderr
    changes = bloomperf(env, "history", "changes", "--history", str(history))
    text = " ".join(changes.stdout.split())
    assert f"2026-11-09 {BACKEND}-fp32-bs1 {METRIC} [worse]" in text, text
    assert "(-50.0 %)" in text and "1 change(s)" in text, text
