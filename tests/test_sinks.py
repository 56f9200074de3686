"""Sinks from outside bloomperf/: the outside package's entry-point sink and the conftest hooks of
docs/extending.md hear every cell and the finished run, from `bloomperf run` and from the pytest
plugin; a failing sink loses nothing measured and never masks the verdict."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.verdicts import Comparison
from bloomperf.harness.finish import Finished
from bloomperf.harness.sinks import RunContext, tell
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.files import read_results
from tests.builders import ok_cell, tiny_run
from tests.outside_install import outside_env, outside_package
from tests.schemas import schema_errors

__all__ = ["outside_package"]  # the fixture, used by name

EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
QUICK = ["--new-tokens", "8", "--cycles", "2", "--no-lock", "--dtypes", "fp32"]


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def bloomperf_run(target: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", "run", *QUICK, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=outside_env(target, **env),
    )


def test_run_tells_every_sink_each_cell_and_the_finish(
    outside_package: Path, tmp_path: Path
) -> None:
    """The outside package's sink (only on PYTHONPATH), GitHub output and history, at once."""
    pushed, github, history = tmp_path / "pushed.jsonl", tmp_path / "gh.txt", tmp_path / "nights"
    results = tmp_path / "r.json"
    done = bloomperf_run(
        outside_package,
        *("--batch-sizes", "1,2", "--output", str(results), "--github-output"),
        *("--history", str(history)),
        BLOOMPERF_OUTSIDE_SINK=str(pushed),
        GITHUB_OUTPUT=str(github),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run = read_results(results)
    *cells, finished = read_lines(pushed)
    ids = [c.id for c in run.cells]
    assert [c["id"] for c in cells] == ids == ["accelerate-fp32-bs1", "accelerate-fp32-bs2"]
    assert [c["cells_so_far"] for c in cells] == [1, 2]  # told as each was recorded
    assert [c["ms_per_token"] for c in cells] == [c.ms_per_token for c in run.cells]
    assert finished == {
        "event": "finished",
        "source": "run",
        "results": str(results),
        "complete": True,
        "cells": 2,
        "verdict": "pass",
        "statuses": finished["statuses"],
    }
    assert set(finished["statuses"]) == {c.id for c in run.cells}
    assert "verdict=pass\ncells=2\nfailed=0\n" in github.read_text()
    (night,) = history.iterdir()
    assert read_results(night) == run
    # What a real run writes meets the published schemas (tests/test_schemas.py has the rest).
    assert schema_errors("results", json.loads(results.read_text())) == []
    assert schema_errors("history-night", json.loads(night.read_text())) == []


def test_a_failing_sink_loses_nothing_and_fails_a_passing_run_with_3(
    outside_package: Path, tmp_path: Path
) -> None:
    results = tmp_path / "r.json"
    done = bloomperf_run(
        outside_package,
        *("--batch-sizes", "1", "--output", str(results)),
        BLOOMPERF_OUTSIDE_SINK=str(tmp_path / "no-such-folder" / "pushed.jsonl"),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    run = read_results(results)
    assert run.complete and [c.outcome for c in run.cells] == [Outcome.OK]
    assert "accelerate fp32" in done.stdout  # the table and the verdict still shown
    failures = [line for line in done.stderr.splitlines() if "sink outside-jsonlines" in line]
    assert [line.split(" (")[1].split(")")[0] for line in failures] == [
        "cell_recorded",
        "run_finished",
    ]
    assert all("FileNotFoundError" in line and str(results) in line for line in failures)


class Raising:
    name = "down"

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        raise ConnectionError("dashboard unreachable")

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        raise ConnectionError("dashboard unreachable")


class Keeping:
    def __init__(self) -> None:
        self.heard: list[str] = []

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        self.heard.append(cell.id)

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        self.heard.append("finished")


def test_a_sink_after_a_failing_one_is_still_told() -> None:
    run = tiny_run(ok_cell(1.0))
    keeping = Keeping()
    failures = tell([Raising(), keeping], "cell_recorded", run.cells[0], run)
    assert keeping.heard == [run.cells[0].id]
    assert failures == ["sink down (cell_recorded): ConnectionError: dashboard unreachable"]


@given(failed=st.booleans(), sink_failures=st.lists(st.text(min_size=1), max_size=3))
def test_a_sink_failure_never_masks_the_verdict(failed: bool, sink_failures: list[str]) -> None:
    verdicts = Comparison((), "cpu", "tiny", "b", incomplete="nothing measured" if failed else "")
    code = Finished(tiny_run(ok_cell(1.0)), verdicts, tuple(sink_failures)).exit_code
    assert code == (1 if failed else 3 if sink_failures else 0)


def conftest_example() -> str:
    """The conftest sink docs/extending.md shows (its one block that defines the hooks)."""
    blocks = re.findall(r"```python\n(.*?)```", EXTENDING.read_text(), re.S)
    (example,) = [b for b in blocks if "def pytest_bloomperf_run_finished" in b]
    return example


def test_the_plugin_tells_the_outside_sink_and_the_documented_conftest(
    outside_package: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in outside_env(outside_package).items():
        monkeypatch.setenv(name, value)
    pushed = pytester.path / "pushed.jsonl"
    monkeypatch.setenv("BLOOMPERF_OUTSIDE_SINK", str(pushed))
    pytester.makeconftest(conftest_example())
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.cpu
        def test_cpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    results = pytester.path / "r.json"
    outcome = pytester.runpytest_subprocess(
        "-m",
        "cpu",
        "--bloomperf-new-tokens=8",
        "--bloomperf-cycles=2",
        "--bloomperf-batch-sizes=1,2",
        "--bloomperf-dtypes=fp32",
        "--bloomperf-no-lock",
        "--benchmark-disable",
        f"--bloomperf-output={results}",
    )
    outcome.assert_outcomes(passed=2)
    run = read_results(results)
    ids = [c.id for c in run.cells]
    assert ids == ["accelerate-fp32-bs1", "accelerate-fp32-bs2"]
    *cells, finished = read_lines(pushed)
    assert [c["id"] for c in cells] == ids
    assert finished["source"] == "pytest" and finished["verdict"] == "pass"
    assert finished["complete"] is True and finished["cells"] == 2
    # The documented conftest hooks heard the same run.
    assert [c["id"] for c in read_lines(pytester.path / "cells.jsonl")] == ids
    assert (pytester.path / "verdict.txt").read_text() == f"pass {results}\n"
