"""Every verdict path judges alike, and the gate fails what it must, over random runs.

Random runs of four cells (each ok at some speed, out of memory, errored, timed out or skipped)
against random baselines (each cell expected to run, to run out of memory, or absent), with or
without a baseline, comparable or not, finished or not, go through:

* the rule stated here independently (``expected_failure``): what must fail the gate;
* ``judge`` (what `run`, `diff`, the report and the history site call) and ``judge_cell`` (the
  pytest plugin, one cell at a time);
* `bloomperf run`'s verdict printer and `bloomperf diff` on the files the run leaves (JSON and
  GitHub formats, ``$GITHUB_OUTPUT`` included): the same failing cells and the same exit.

The in-process plugin run over the tiny model is ``test_verdict_paths.py``'s.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bloomperf import cli
from bloomperf.analysis.changes import DEFAULT_CONFIRM
from bloomperf.analysis.compare import judge, judge_cell
from bloomperf.analysis.verdicts import CellVerdict
from bloomperf.cli.run import print_verdicts
from bloomperf.config.run import RunConfig
from bloomperf.core.metrics import label_of
from bloomperf.harness.finish import Finished, judge_run
from bloomperf.render.report import write_report
from bloomperf.store.baseline import Baseline, BaselineCell, LoadTime
from bloomperf.store.baseline import expected_cell as store_expected_cell
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from tests.builders import add_night, cpu_baseline, night, night_run, ok_cell, rss, tiny_run

BATCHES = (1, 2, 4, 8)
MEASURED = {"same": 1.0, "slower": 1.6, "faster": 0.6}
RUN_OUTCOMES = ("same", "slower", "faster", "oom", "error", "timeout", "skipped")
EXPECTED = ("ok", "oom", "absent")


def run_verdict(run: RunResult, baseline: Baseline | None, options: RunConfig, out: TextIO) -> int:
    """What `bloomperf run` prints, and its exit status, for a finished run (no sink failing)."""
    comparison = judge_run(run, baseline, options)
    print_verdicts(comparison, baseline, out)
    return Finished(run, comparison, ()).exit_code


def measured_cell(batch: int, what: str) -> CellResult:
    if what in MEASURED:
        f = MEASURED[what]
        return CellResult(
            "accelerate",
            "fp32",
            batch,
            Outcome.OK,
            tuple(10.0 * f * j for j in (0.99, 1.0, 1.01)),
            load_time_s=1.0,
            generate_memory=rss(100),
        )
    message = {"oom": "CUDA out of memory", "error": "boom", "timeout": "hung"}.get(what, "")
    return CellResult("accelerate", "fp32", batch, Outcome(what), message=message)


def expected_cell(batch: int, what: str) -> BaselineCell | None:
    if what == "absent":
        return None
    if what == "oom":
        return BaselineCell("accelerate", "fp32", batch, "oom")
    return BaselineCell(
        "accelerate",
        "fp32",
        batch,
        "ok",
        ms_per_token=10.0,
        ms_per_token_tolerance=0.1,
        ms_per_token_samples=(9.9, 10.0, 10.1),
    )


def expected_failure(
    run: dict[int, str],
    base: dict[int, str] | None,
    comparable: bool,
    complete: bool,
    strict: bool = False,
    allow_no_baseline: bool = False,
    allow_incomplete: bool = False,
) -> bool:
    """The gate's rule, stated on its own: a run that measured nothing or did not finish fails;
    a cell that errored or timed out fails whatever the baseline (nothing was measured);
    against a comparable baseline an unexpected OOM and a slower cell fail; and a run of which
    no cell was compared with anything (no baseline, an incomparable one, none of its cells in
    it) fails as "nothing judged" unless ``allow_no_baseline`` (docs/gate.md). With
    ``allow_incomplete`` neither an unfinished run nor one that measured nothing fails for that."""
    measured = any(w in (*MEASURED, "oom") for w in run.values())
    if not allow_incomplete and (not complete or not measured):
        return True
    if any(w in ("error", "timeout") for w in run.values()):
        return True
    judged = False
    for batch, what in run.items() if base is not None and comparable else ():
        assert base is not None
        boundary = min((b for b, e in base.items() if e == "oom"), default=None)
        expected = base[batch]
        if expected == "absent" and boundary is not None and batch > boundary:
            expected = "oom"  # beyond the OOM boundary: expected not to run
        if what != "skipped" and expected in ("ok", "oom"):
            judged = True  # an outcome, or ms/token with its tolerance, compared
        if expected == "ok" and what in ("oom", "slower"):
            return True
        if strict and expected == "oom" and what in MEASURED:
            return True  # the boundary moved up: fails under --strict
    return not judged and not allow_no_baseline


def check_explanation(verdict: CellVerdict) -> None:
    """The one line each status explains itself with."""
    text = verdict.explain()
    if verdict.status in ("same", "regressed", "improved"):
        parts = [f"{label_of(m.metric)} {m.status}: {m.describe()}" for m in verdict.metrics]
        assert text == ("; ".join(parts) if parts else verdict.status)
    elif verdict.status == "boundary-moved-up":
        assert text.startswith("boundary moved up: ran at ")
        assert text.endswith(" (beyond its OOM boundary)") == (
            verdict.expected_outcome == "not-run"
        )
    elif verdict.status == "expected-oom":
        assert text == "out of memory, as the baseline expects"


def expected_missing(run: dict[int, str], base: dict[int, str] | None) -> set[str]:
    """Baseline cells (expected to run or to run out of memory) the run has no cell for."""
    return {
        f"accelerate-fp32-bs{b}"
        for b, e in (base or {}).items()
        if e in ("ok", "oom") and b not in run
    }


def build(
    run_outcomes: dict[int, str],
    base_outcomes: dict[int, str] | None,
    comparable: bool,
    complete: bool,
) -> tuple[RunResult, Baseline | None]:
    cells = tuple(measured_cell(b, w) for b, w in run_outcomes.items())
    run = replace(
        tiny_run(*cells, topology="cpu" if comparable else "cpu-other"), complete=complete
    )
    if base_outcomes is None:
        return run, None
    expected = [expected_cell(b, w) for b, w in base_outcomes.items()]
    return run, cpu_baseline(*(c for c in expected if c is not None))


runs = st.fixed_dictionaries({b: st.sampled_from(RUN_OUTCOMES) for b in BATCHES})
baselines = st.one_of(
    st.none(), st.fixed_dictionaries({b: st.sampled_from(EXPECTED) for b in BATCHES})
)


@settings(max_examples=300, deadline=None)
@given(
    run_outcomes=runs,
    base=baselines,
    comparable=st.booleans(),
    complete=st.booleans(),
    strict=st.booleans(),
    dropped=st.sets(st.sampled_from(BATCHES), max_size=2),
)
def test_judge_and_the_plugins_per_cell_judgement_follow_the_rule(
    run_outcomes: dict[int, str],
    base: dict[int, str] | None,
    comparable: bool,
    complete: bool,
    strict: bool,
    dropped: set[int],
) -> None:
    run_outcomes = {b: w for b, w in run_outcomes.items() if b not in dropped}
    run, baseline = build(run_outcomes, base, comparable, complete)
    comparison = judge(run, baseline, strict=strict)
    assert comparison.failed == expected_failure(run_outcomes, base, comparable, complete, strict)
    assert comparison.model == run.model.name and comparison.topology == run.topology
    assert set(comparison.missing) == (
        expected_missing(run_outcomes, base) if comparable else set()
    )
    if comparison.incomplete:
        assert comparison.incomplete.endswith("--allow-incomplete accepts that)")
    by_id = {v.id: v for v in comparison.cells}
    for cell in run.cells:
        one = judge_cell(run, baseline, cell, strict=strict)
        whole = by_id[cell.id]
        assert (one.status, one.fails()) == (whole.status, whole.fails()), cell.id
        assert one.explain() == whole.explain()
        if whole.status == "incomparable":
            assert "topology cpu-other is not the baseline's cpu" in whole.explain()
        check_explanation(whole)
        if baseline is not None and comparable and cell.outcome in (Outcome.OK, Outcome.OOM):
            listed = baseline.cell(cell.backend, cell.dtype, cell.batch_size)
            beyond = "not-run" if whole.status in ("boundary-moved-up", "expected-oom") else None
            assert whole.expected_outcome == (listed.outcome if listed else beyond)
    # The plugin fails the session for a run that measured nothing; a cell's own failure
    # fails that cell's test. Together: the same exit as the whole-run verdict.
    plugin_failed = bool(comparison.incomplete or comparison.unjudged) or any(
        judge_cell(run, baseline, c, strict=strict).fails()
        for c in run.cells
        if c.outcome != Outcome.SKIPPED
    )
    assert plugin_failed == comparison.failed
    out = io.StringIO()
    options = RunConfig(strict=strict)
    assert run_verdict(run, baseline, options, out) == int(comparison.failed)
    # The same failures, each named by what it is about (a cell id, "incomplete run", "nothing
    # judged"); run words the details its own way (where it searched for a baseline).
    printed = " ".join(out.getvalue().split())  # long lines are wrapped to the terminal
    for failure in comparison.failures():
        assert f"{failure.split(':')[0]}:" in printed


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run_outcomes=runs, base=baselines, comparable=st.booleans(), complete=st.booleans())
def test_diff_on_the_files_and_its_github_output_agree_with_run(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    run_outcomes: dict[int, str],
    base: dict[int, str] | None,
    comparable: bool,
    complete: bool,
) -> None:
    folder = tmp_path_factory.mktemp("paths")
    run, baseline = build(run_outcomes, base, comparable, complete)
    results, baselines = folder / "results.json", folder / "baselines"
    save_run(run, results)
    baselines.mkdir()
    if baseline is not None:
        # Comparable or not, diff is handed this baseline, as `--baseline FILE` does.
        save_baseline(baseline, baselines / "cpu.tiny.json")
    # Opted in: a --baseline of another topology is then judged as incomparable, not refused.
    failed = expected_failure(run_outcomes, base, comparable, complete, allow_no_baseline=True)
    args = [str(results), "--allow-synthetic", "--allow-no-baseline"]
    args += ["--baseline", str(baselines / "cpu.tiny.json")] if baseline else []
    args += [] if baseline else ["--baselines", str(baselines)]
    capsys.readouterr()
    code = cli.main(["diff", *args, "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == int(failed)
    judged = judge(run, baseline)
    assert {c["id"] for c in document["cells"] if c["fails"]} == {
        c.id for c in judged.cells if c.fails()
    }
    outputs = folder / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    assert cli.main(["diff", *args, "--format", "github"]) == code
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert said["verdict"] == ("fail" if failed else "pass")
    errors = capsys.readouterr().out.count("::error ")
    assert (errors > 0) == failed


@given(
    run_outcomes=runs,
    base=baselines,
    comparable=st.booleans(),
    complete=st.booleans(),
    allow_incomplete=st.booleans(),
    allow_no_baseline=st.booleans(),
    folder=st.sampled_from([None, Path("/srv/team baselines")]),
)
def test_runs_options_reach_its_verdict(
    run_outcomes: dict[int, str],
    base: dict[int, str] | None,
    comparable: bool,
    complete: bool,
    allow_incomplete: bool,
    allow_no_baseline: bool,
    folder: Path | None,
) -> None:
    run, baseline = build(run_outcomes, base, comparable, complete)
    options = RunConfig(
        allow_incomplete=allow_incomplete, allow_no_baseline=allow_no_baseline, baselines=folder
    )
    comparison = judge_run(run, baseline, options)
    assert comparison.failed == expected_failure(
        run_outcomes,
        base,
        comparable,
        complete,
        allow_no_baseline=allow_no_baseline,
        allow_incomplete=allow_incomplete,
    )
    if baseline is None:  # where it looked, as `baseline show` says it
        searched = str(folder) if folder else "first match wins"
        said = f"no baseline for {run.topology} / tiny; baselines searched"
        assert comparison.baseline.startswith(said)
        assert searched in comparison.baseline


@pytest.mark.parametrize(
    "run_outcomes, base, comparable",
    [
        ({1: "error", 2: "same"}, None, True),  # no baseline: an error still fails
        ({1: "timeout", 2: "same"}, {1: "ok", 2: "ok"}, False),  # incomparable: so does a timeout
        ({1: "oom", 2: "same"}, {1: "ok", 2: "ok"}, True),  # unexpected OOM
        ({1: "oom", 2: "faster"}, None, True),  # no baseline: nothing judged
        ({1: "slower", 2: "same"}, {1: "ok", 2: "ok"}, False),  # incomparable: never judged
    ],
)
def test_the_report_says_what_the_gate_says(
    tmp_path: Path,
    run_outcomes: dict[int, str],
    base: dict[int, str] | None,
    comparable: bool,
) -> None:
    run, baseline = build(run_outcomes, base, comparable, True)
    failed = expected_failure(run_outcomes, base, comparable, True)
    report = write_report(run, baseline, tmp_path / "report")
    page = report.html.read_text()
    assert ("verdict failed" in page) == failed and ("verdict passed" in page) == (not failed)
    assert run_verdict(run, baseline, RunConfig(), io.StringIO()) == int(failed)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(n=st.integers(6, 12), step=st.integers(2, 12), factor=st.sampled_from((0.7, 1.0, 1.4)))
@example(n=8, step=5, factor=1.4)  # confirmed worse tonight: the step fails
@example(n=9, step=5, factor=1.4)  # confirmed worse last night: not again
@example(n=8, step=5, factor=0.7)  # confirmed better tonight
def test_the_github_output_never_says_pass_when_the_history_fails_the_step(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    step: int,
    factor: float,
) -> None:
    """Tonight's run passes on its own (no baseline); the history it joins may confirm a step
    for the worse tonight. The exit and the job's ``verdict`` output must say the same."""
    folder = tmp_path_factory.mktemp("nightly")
    history, scratch = folder / "history", folder / "scratch"
    history.mkdir()
    scratch.mkdir()
    last = None
    for i in range(n):
        cell = ok_cell(10.0 * (factor if i >= step else 1.0) * (1 + 0.001 * (i % 3)))
        last = add_night(history, night_run(night(i), [cell]), scratch)
    assert last is not None
    # The change rule stated here, not asked of the history code: a step is confirmed on the
    # night CONFIRM nights after it (one more at the first detectable night, 2), and only then.
    confirmed_tonight = n == step + DEFAULT_CONFIRM + (step < DEFAULT_CONFIRM)
    worse_tonight = factor > 1 and confirmed_tonight
    outputs = folder / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    capsys.readouterr()
    code = cli.main(
        [
            "diff",
            str(last),
            "--baselines",
            str(folder),
            "--history",
            str(history),
            "--format",
            "github",
            "--allow-no-baseline",  # tonight's run has no baseline; the history judges it
        ]
    )
    capsys.readouterr()
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert code == int(worse_tonight)
    if (n, step, factor) == (8, 5, 1.4):
        assert worse_tonight
    assert said["verdict"] == ("fail" if code else "pass")


@pytest.mark.parametrize(
    ("fits", "note"),
    [
        (True, "the memory model predicted it to fit: accept a baseline to judge it"),
        (False, "the memory model predicted this OOM"),
        (None, ""),
    ],
)
def test_an_oom_without_a_baseline_says_what_the_memory_model_predicted(
    fits: bool | None, note: str
) -> None:
    details = {} if fits is None else {"predicted_fits": fits}
    oom = replace(measured_cell(1, "oom"), details=details, message="")
    ran = replace(measured_cell(2, "same"), details=details)
    comparison = judge(tiny_run(oom, ran), None, allow_no_baseline=True)
    verdicts = {v.batch_size: v for v in comparison.cells}
    assert verdicts[1].status == "no-baseline" and verdicts[1].message == note
    assert verdicts[2].message == ""  # only an OOM gets the note
    assert not comparison.failed


@given(batch=st.integers(9, 4096), boundary=st.sampled_from(BATCHES))
def test_a_batch_beyond_the_oom_boundary_is_expected_not_to_run(batch: int, boundary: int) -> None:
    baseline = cpu_baseline(expected_cell(boundary, "oom"))  # type: ignore[arg-type]
    cell = measured_cell(batch, "same")
    found = store_expected_cell(baseline, cell)
    assert found is not None
    assert (found.id, found.outcome) == (cell.id, "not-run")


def test_a_load_time_given_per_backend_is_judged_with_its_tolerance() -> None:
    base = replace(
        cpu_baseline(expected_cell(1, "ok")),  # type: ignore[arg-type]
        load_times=(LoadTime("accelerate", "fp32", "", 2.0, 0.25),),
    )
    found = store_expected_cell(base, measured_cell(1, "same"))
    assert found is not None
    assert (found.load_time_s, found.load_time_tolerance) == (2.0, 0.25)
    variant = replace(measured_cell(1, "same"), details={"checkpoint": "pre-sharded"})
    found = store_expected_cell(base, variant)
    assert found is not None and found.load_time_s == 2.0  # a variant-free entry serves any
