"""`bloomperf calibrate`: A/A runs of the real tiny model, the noise floor, tolerances stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.cli.calibrate import cell_noise
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.results import CellResult, Outcome
from tests.builders import tiny_run

QUICK = ["--new-tokens", "8", "--cycles", "4", "--dtypes", "fp32", "--no-lock"]


def bloomperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *args], capture_output=True, text=True, timeout=600
    )


def cell(
    samples: tuple[float, ...], load: float = 1.0, outcome: Outcome = Outcome.OK
) -> CellResult:
    return CellResult(
        "accelerate", "fp32", 1, outcome, samples_ms_per_token=samples, load_time_s=load
    )


def test_cell_noise_from_runs() -> None:
    runs = [cell((1.0, 1.1, 0.9), 2.0), cell((1.2, 1.2, 1.2), 2.2), cell((), outcome=Outcome.OOM)]
    noise = cell_noise(runs)
    assert noise is not None
    assert noise.runs_ok == 2
    assert noise.ms_per_token.run_spread == pytest.approx(0.2 / 1.1)  # medians 1.0 and 1.2
    assert noise.ms_per_token.suggested_tolerance >= 0.2
    assert noise.load_time is not None and noise.load_time.run_spread == pytest.approx(0.2 / 2.1)
    assert noise.peak_memory is None  # no memory figure in these runs
    assert cell_noise(runs[:1]) is None  # one run says nothing about run-to-run noise


def tiny_baseline(path: Path, topology: str) -> None:
    run = tiny_run(
        # No memory figure: its tolerance must stay as it was.
        CellResult("accelerate", "fp32", 1, Outcome.OK, (2.0, 2.1), 0.5),
        CellResult("accelerate", "fp32", 64, Outcome.OK, (0.2, 0.2), 0.5),
        topology=topology,
        new_tokens=8,
        cycles=4,
        environment={},
    )
    save_baseline(accept_run(run, None, source="test", force=False), path)


def test_calibrate_runs_a_a_and_stores_tolerances(tmp_path: Path) -> None:
    baseline_path = tmp_path / "baseline.json"
    tiny_baseline(baseline_path, "cpu")
    before = load_baseline(baseline_path)
    out = tmp_path / "noise.json"
    done = bloomperf(
        "calibrate",
        *QUICK,
        "--batch-sizes",
        "1",
        "--repeats",
        "2",
        "--output",
        str(out),
        "--write-tolerances",
        str(baseline_path),
    )
    assert done.returncode == 0, done.stderr
    assert "accelerate-fp32-bs1" in done.stdout
    assert "run 2/2 accelerate-fp32-bs1" in done.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "bloomperf-calibration" and data["repeats"] == 2
    for entry in data["cells"]:
        assert entry["runs_ok"] == 2
        floor = entry["ms_per_token"]
        assert 0 <= floor["cycle_cv"] < 1 and 0 <= floor["run_cv"] < 1
        assert floor["suggested_tolerance"] >= max(0.01, floor["run_spread"])
        assert entry["load_time"]["median"] > 0
        assert entry["peak_memory"]["median"] > 50 * 2**20
    # The baseline's bs1 cell took the calibrated tolerance; bs64 was not calibrated.
    after = load_baseline(baseline_path)
    bs1 = {c["id"]: c for c in data["cells"]}["accelerate-fp32-bs1"]
    new, old = after.cell("accelerate", "fp32", 1), before.cell("accelerate", "fp32", 1)
    assert new is not None and old is not None
    assert new.ms_per_token_tolerance == bs1["ms_per_token"]["suggested_tolerance"]
    assert new.load_time_tolerance == bs1["load_time"]["suggested_tolerance"]
    assert new.peak_memory_tolerance == old.peak_memory_tolerance
    assert after.cell("accelerate", "fp32", 64) == before.cell("accelerate", "fp32", 64)
    assert "tolerances: 1 cells updated" in done.stdout


def test_calibrate_refuses_a_bad_baseline_before_measuring(tmp_path: Path) -> None:
    bad = tmp_path / "baseline.json"
    bad.write_text('{"kind": "bloomperf-baseline", "schema_version": 999}')
    done = bloomperf("calibrate", *QUICK, "--write-tolerances", str(bad))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "schema_version" in done.stderr
    assert bad.read_text() == '{"kind": "bloomperf-baseline", "schema_version": 999}'


@pytest.mark.parametrize("repeats", ["1", "x", "100000"])
def test_bad_repeats_is_one_line(repeats: str) -> None:
    done = bloomperf("calibrate", "--repeats", repeats)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--repeats" in done.stderr
