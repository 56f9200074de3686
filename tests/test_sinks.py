"""Sinks from outside bloomperf/: the outside package's entry-point sink and the conftest hooks of
docs/extending.md hear every cell and the finished run, from `bloomperf run` and from the pytest
plugin; a failing sink loses nothing measured and never masks the verdict."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.verdicts import Comparison
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.finish import Finished, finish_run
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session, all_cells
from bloomperf.harness.sinks import (
    ENTRY_POINT_GROUP,
    GitHubOutput,
    History,
    ResultsFile,
    RunContext,
    installed_sinks,
    open_sinks,
    sink_name,
    tell,
)
from bloomperf.render.github import job_outputs
from bloomperf.store.history.nights import load_history
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import ok_cell, tiny_run
from tests.outside_install import outside_env, outside_package, write_distribution
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


class Witness:
    """A sink that writes down, at the finish, what the results file then held."""

    def __init__(self) -> None:
        self.heard: list[str] = []
        self.saved_at_finish: RunResult | None = None
        self.told: tuple[RunResult, Comparison, RunContext] | None = None

    def cell_recorded(self, cell: CellResult, run: RunResult) -> None:
        self.heard.append(cell.id)

    def run_finished(self, run: RunResult, verdicts: Comparison, context: RunContext) -> None:
        self.heard.append("finished")
        assert context.output is not None
        self.saved_at_finish = read_results(context.output)
        self.told = (run, verdicts, context)


@pytest.mark.parametrize("case", ["shipped baseline", "no baseline", "no baseline, allowed"])
def test_the_finish_saves_the_run_then_tells_each_sink_and_keeps_their_failures(
    tmp_path: Path, case: str
) -> None:
    """In process, one real cell: the results file is complete before any sink hears of the
    finish; a failing sink is named per event and its neighbours still hear everything."""
    output, empty = tmp_path / "r.json", tmp_path / "no-baselines"
    empty.mkdir()
    flags = {"allow_no_baseline": "true", "allow_incomplete": "true"} if "allowed" in case else {}
    if case != "shipped baseline":
        flags["baselines"] = str(empty)
    options = resolve_options(
        {
            "new_tokens": "8",
            "cycles": "2",
            "dtypes": "fp32",
            "batch_sizes": "1",
            "output": str(output),
            **flags,
        },
        env={},
    )
    before, after = Witness(), Witness()
    session = Session.prepare(options, sinks=[before, Raising(), after])
    try:
        for cell in all_cells(session):
            session.measure_cell(cell)
    finally:
        finished = finish_run(session, "run")
    saved = read_results(output)  # a cell's contention figures are saved rounded
    assert saved.complete and finished.run.complete
    assert [c.samples_ms_per_token for c in saved.cells] == [
        c.samples_ms_per_token for c in finished.run.cells
    ]
    for witness in (before, after):
        assert witness.heard == ["accelerate-fp32-bs1", "finished"]
        assert witness.saved_at_finish == saved  # complete before any sink heard of it
        assert witness.told == (finished.run, finished.verdicts, RunContext(output, options, "run"))
    assert finished.sink_failures == tuple(
        f"sink down ({event}): ConnectionError: dashboard unreachable"
        for event in ("cell_recorded", "run_finished")
    )
    if case == "shipped baseline":  # judged against it: passes, and the failing sink makes 3
        assert finished.verdicts.baseline.endswith("cpu.tiny.json")
        assert (finished.verdicts.failed, finished.exit_code) == (False, 3)
        return
    assert finished.verdicts.baseline.startswith(
        f"no baseline for cpu / tiny; baselines searched: {empty} (--baselines)"
    )
    # Nothing judged fails the gate unless allowed; then the failing sink makes it 3.
    allowed = "allowed" in case
    assert (finished.verdicts.failed, finished.exit_code) == ((False, 3) if allowed else (True, 1))


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


# ---- the built-in sinks and how a run's sinks are chosen, in process ----------------------------


def finished_context(output: Path | None, **options: Any) -> RunContext:
    return RunContext(output, RunConfig(**options), "run")


def test_the_results_file_holds_the_run_after_each_cell_and_at_the_finish(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    sink = ResultsFile(path)
    run = tiny_run(ok_cell(1.0), ok_cell(2.0, batch_size=2))
    first = replace(run, cells=run.cells[:1])
    sink.cell_recorded(first.cells[0], first)
    assert read_results(path).cells == first.cells
    sink.run_finished(run, Comparison((), "cpu", "tiny", "b"), finished_context(path))
    assert read_results(path).cells == run.cells


def test_the_github_output_sink_appends_the_verdict_and_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(target))
    verdicts = Comparison((), "cpu", "tiny", "b", incomplete="nothing measured")
    GitHubOutput().cell_recorded(ok_cell(1.0), tiny_run(ok_cell(1.0)))  # nothing per cell
    assert not target.exists()
    GitHubOutput().run_finished(tiny_run(ok_cell(1.0)), verdicts, finished_context(None))
    written = dict(line.split("=", 1) for line in target.read_text().splitlines())
    assert written == job_outputs(verdicts, verdicts.failed)
    assert written["verdict"] == "fail"


def test_the_history_sink_adds_the_results_file_as_a_night_or_says_there_is_none(
    tmp_path: Path,
) -> None:
    run = tiny_run(ok_cell(1.0))
    results = tmp_path / "r.json"
    save_run(run, results)
    folder = tmp_path / "history"
    verdicts = Comparison((), "cpu", "tiny", "b")
    History(folder).run_finished(run, verdicts, finished_context(results))
    assert [n.run.cells for n in load_history(folder)] == [run.cells]
    with pytest.raises(BloomperfError) as refused:
        History(folder).run_finished(run, verdicts, finished_context(None))
    assert str(refused.value) == f"--history {folder}: the run kept no results file"


@pytest.mark.parametrize("github", [False, True])
@pytest.mark.parametrize("history", [None, "h"])
def test_a_run_s_sinks_are_the_options_built_ins_in_order_then_installed_ones(
    github: bool, history: str | None, tmp_path: Path
) -> None:
    folder = None if history is None else tmp_path / history
    chosen = open_sinks(RunConfig(github_output=github, history=folder))
    expected: list[object] = [GitHubOutput] if github else []
    expected += [History] if folder is not None else []
    assert [type(s) for s in chosen] == expected
    assert all(s.folder == folder for s in chosen if isinstance(s, History))


SINK_MODULE = """
class Pushing:
    name = "dashboard"
    def cell_recorded(self, cell, run): pass
    def run_finished(self, run, verdicts, context): pass

class Anonymous(Pushing):
    name = ""

class Broken:
    def __init__(self):
        raise OSError("no token")
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("bloomperf_test_sinks", None)


def test_an_installed_sink_is_made_once_per_run_and_named_by_its_name_or_class(
    site: Path,
) -> None:
    write_distribution(site, ENTRY_POINT_GROUP, {"a": "Pushing", "b": "Anonymous"}, SINK_MODULE)
    found = open_sinks(RunConfig(github_output=True))
    assert [sink_name(s) for s in found] == ["GitHubOutput", "dashboard", "Anonymous"]


def test_an_installed_sink_that_cannot_be_made_is_refused_naming_its_entry_point(
    site: Path,
) -> None:
    write_distribution(site, ENTRY_POINT_GROUP, {"broken": "Broken"}, SINK_MODULE)
    with pytest.raises(BloomperfError) as refused:
        installed_sinks()
    assert str(refused.value) == (
        f"entry point broken = bloomperf_test_sinks:Broken ({ENTRY_POINT_GROUP}): OSError: no token"
    )
