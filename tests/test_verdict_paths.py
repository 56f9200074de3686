"""One verdict rule: the pytest plugin, `bloomperf run` and `bloomperf diff` agree.

The real plugin measures the tiny model on CPU (pytester, its own process), with a memory limit
that makes the largest batch sizes run out of memory. What it leaves behind (the results file and
pytest-benchmark's JSON) then goes through `bloomperf diff` and through `bloomperf run`'s verdict
path, against the same baselines folder. Every path must fail the same cells and exit the same.
(Random runs through every path but the plugin's process: ``test_gate_properties.py``.)
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import pytest

from bloomperf import cli
from bloomperf.cli.run import print_verdicts
from bloomperf.config.run import RunConfig
from bloomperf.harness.finish import Finished, judge_run
from bloomperf.store.baseline import Baseline, BaselineCell
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.baseline.search import find_baseline
from bloomperf.store.results import RunResult
from bloomperf.store.results.files import read_results
from tests.builders import cpu_baseline

TEST_FILE = """
import pytest

@pytest.mark.cpu
def test_cpu(bloomperf_cell, bloomperf, benchmark):
    bloomperf.check(bloomperf_cell, benchmark)
"""
BATCHES = (1, 2, 4, 65536, 70000)


def cell(batch: int, outcome: str, **figures: Any) -> BaselineCell:
    return BaselineCell("accelerate", "fp32", batch, outcome, **figures)


def write_baseline(folder: Path, cells: list[BaselineCell]) -> None:
    folder.mkdir()
    save_baseline(cpu_baseline(*cells), folder / "cpu.tiny.json")


def run_plugin(pytester: pytest.Pytester, baselines: Path) -> tuple[int, dict[str, str]]:
    """The real plugin over the matrix: (exit status, pytest's outcome per cell)."""
    pytester.makepyfile(test_matrix=TEST_FILE)
    result = pytester.runpytest_subprocess(
        "-m",
        "cpu",
        "-v",
        "--bloomperf-new-tokens=4",
        "--bloomperf-cycles=2",
        "--bloomperf-dtypes=fp32",
        f"--bloomperf-batch-sizes={','.join(map(str, BATCHES))}",
        "--bloomperf-memory-limit=1500MiB",
        "--bloomperf-probe",
        "--bloomperf-no-lock",
        f"--bloomperf-baselines={baselines}",
        f"--bloomperf-output={pytester.path / 'r.json'}",
        f"--benchmark-json={pytester.path / 'bench.json'}",
    )
    outcomes = {}
    for line in result.outlines:
        for batch in BATCHES:
            if f"[accelerate-fp32-bs{batch}]" in line and line.split()[-2:-1]:
                words = [w for w in ("PASSED", "FAILED", "SKIPPED") if w in line]
                if words:
                    outcomes[f"accelerate-fp32-bs{batch}"] = words[0]
    return int(result.ret), outcomes


def run_diff(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict[str, Any]]:
    code = cli.main(["diff", *map(str, args), "--format", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)


def failing(comparison: dict[str, Any]) -> set[str]:
    return {c["id"] for c in comparison["cells"] if c["fails"]}


def run_verdict(run: RunResult, baseline: Baseline | None, options: RunConfig, out: TextIO) -> int:
    """What `bloomperf run` prints, and its exit status, for a finished run (no sink failing)."""
    comparison = judge_run(run, baseline, options)
    print_verdicts(comparison, baseline, out)
    return Finished(run, comparison, ()).exit_code


def check_three_ways(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], baselines: Path
) -> tuple[int, dict[str, Any]]:
    plugin_code, plugin_outcomes = run_plugin(pytester, baselines)
    capsys.readouterr()  # pytester's echo of the subprocess
    assert set(plugin_outcomes) == {f"accelerate-fp32-bs{b}" for b in BATCHES}, plugin_outcomes
    plugin_failed = {cell for cell, outcome in plugin_outcomes.items() if outcome == "FAILED"}

    results, bench = pytester.path / "r.json", pytester.path / "bench.json"
    diff_code, diff_json = run_diff(capsys, results, "--baselines", baselines)
    bench_code, bench_json = run_diff(capsys, bench, "--baselines", baselines)

    run = read_results(results)
    out = io.StringIO()
    run_code = run_verdict(run, find_baseline("cpu", "tiny", baselines), RunConfig(), out)

    assert plugin_code == diff_code == bench_code == run_code
    assert plugin_failed == failing(diff_json) == failing(bench_json)
    assert {c["id"]: c["status"] for c in bench_json["cells"]} == {
        c["id"]: c["status"] for c in diff_json["cells"]
    }
    # `run` prints the very table `diff` prints, and fails the same cells.
    assert cli.main(["diff", str(results), "--baselines", str(baselines)]) == run_code
    diff_text = capsys.readouterr().out
    if run.cells and find_baseline("cpu", "tiny", baselines) is not None:
        assert diff_text in out.getvalue()
    for failed in plugin_failed:
        assert failed in out.getvalue()
    return run_code, diff_json


def test_every_path_fails_the_same_cells(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    baselines = pytester.path / "baselines"
    write_baseline(
        baselines,
        [
            # RSS of ~0.35 GiB against 1 kB: regressed on peak memory.
            cell(1, "ok", peak_memory_bytes=1000, peak_memory_tolerance=0.5),
            # bs2 has no baseline cell: it ran, recorded as no-baseline.
            # Ran where the baseline expects an OOM: reported, passes without --strict.
            cell(4, "oom"),
            # Runs out of memory where the baseline ran: unexpected OOM.
            cell(65536, "ok", ms_per_token=1.0),
            # bs70000 lies beyond the baseline's OOM boundary: its OOM is expected.
        ],
    )
    code, comparison = check_three_ways(pytester, capsys, baselines)
    assert code == 1
    statuses = {c["id"]: c["status"] for c in comparison["cells"]}
    assert statuses == {
        "accelerate-fp32-bs1": "regressed",
        "accelerate-fp32-bs2": "no-baseline",
        "accelerate-fp32-bs4": "boundary-moved-up",
        "accelerate-fp32-bs65536": "unexpected-oom",
        "accelerate-fp32-bs70000": "expected-oom",
    }


def test_an_oom_without_a_baseline_cell_passes_every_path(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    baselines = pytester.path / "baselines"
    write_baseline(baselines, [cell(1, "ok", peak_memory_bytes=2**40, peak_memory_tolerance=0.5)])
    code, comparison = check_three_ways(pytester, capsys, baselines)
    assert code == 0
    statuses = {c["id"]: (c["measured_outcome"], c["status"]) for c in comparison["cells"]}
    assert statuses["accelerate-fp32-bs1"] == ("ok", "improved")
    assert statuses["accelerate-fp32-bs65536"] == ("oom", "no-baseline")
    assert statuses["accelerate-fp32-bs70000"] == ("oom", "no-baseline")


def test_an_incomparable_workload_is_judged_by_no_path(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline was measured with 99 new tokens, the run generates 4: every path says
    incomparable, none fails a cell the baseline would fail (bs1's 1 kB peak), none judges an
    OOM (the plugin judges each cell alone, and must refuse the comparison as diff does)."""
    baselines = pytester.path / "baselines"
    baselines.mkdir()
    baseline = replace(
        cpu_baseline(
            cell(1, "ok", peak_memory_bytes=1000, peak_memory_tolerance=0.5),
            cell(65536, "ok", ms_per_token=1.0),
        ),
        new_tokens=99,
    )
    save_baseline(baseline, baselines / "cpu.tiny.json")
    code, comparison = check_three_ways(pytester, capsys, baselines)
    # Judged by no path, so no path passes it either: "nothing judged" (docs/gate.md).
    assert code == 1
    assert {c["status"] for c in comparison["cells"]} == {"incomparable"}
    assert not failing(comparison)  # no cell fails: the run does, for want of a comparison
