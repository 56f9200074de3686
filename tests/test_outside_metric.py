"""A metric from outside bloomperf/ (``tests/outside``, registered through its
``bloomperf.metrics`` entry point, installed privately): ``run`` records its own per-cycle
measurement, ``baseline accept`` keeps it with the registry's tolerance, and ``diff`` judges it
upward: a higher-is-better figure that fell beyond its tolerance fails the gate (exit 1), one
that rose passes (exit 0). A bad entry point is one line naming it (exit 2).
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

NAME = "tokens_per_cpu_s"
CYCLES = 3


def bloomperf(env: Mapping[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(env),
    )


@pytest.fixture(scope="module")
def accepted(outside_package: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real CPU run with the outside package visible, and the baseline accepted from it."""
    folder = tmp_path_factory.mktemp("outside-metric")
    env = outside_env(outside_package)
    results = folder / "results.json"
    run = bloomperf(
        env, "run", "--no-lock", "--new-tokens", "4", "--cycles", str(CYCLES),
        "--batch-sizes", "1", "--dtypes", "fp32", "--output", str(results),
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    baselines = folder / "baselines"
    accept = bloomperf(env, "baseline", "accept", str(results), "--baselines", str(baselines))
    assert accept.returncode == 0, accept.stderr
    return folder


def planted(folder: Path, factor: float) -> Path:
    """The accepted baseline with the outside metric's expected cycles times ``factor``."""
    (source,) = (folder / "baselines").glob("*.json")
    data = json.loads(source.read_text())
    figure = data["cells"][0]["figures"][NAME]
    figure["samples"] = [v * factor for v in figure["samples"]]
    path = folder / f"planted-{factor:g}.json"
    path.write_text(json.dumps(data))
    return path


def test_run_records_the_outside_metric_per_timed_cycle(accepted: Path) -> None:
    cell = json.loads((accepted / "results.json").read_text())["cells"][0]
    samples = cell["figures"][NAME]
    assert len(samples) == CYCLES and all(v > 0 for v in samples)  # warm-up left out
    (baseline,) = (accepted / "baselines").glob("*.json")
    expected = json.loads(baseline.read_text())["cells"][0]["figures"][NAME]
    assert expected == {"samples": samples, "tolerance": 0.5}  # the record's CPU tolerance


@pytest.mark.parametrize(
    ("factor", "code", "says"),
    [
        (4.0, 1, "tokens per CPU-second regressed"),  # measured a quarter of what is expected
        (0.25, 0, "tokens per CPU-second improved"),  # measured four times as much
    ],
)
def test_diff_judges_the_outside_metric_higher_is_better(
    outside_package: Path, accepted: Path, factor: float, code: int, says: str
) -> None:
    baseline = planted(accepted, factor)
    done = bloomperf(
        outside_env(outside_package),
        "diff", str(accepted / "results.json"), "--baseline", str(baseline),
    )  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    assert says in " ".join(done.stdout.split())  # a note wraps at the terminal's width


def test_without_the_package_a_baseline_judging_its_metric_is_refused(accepted: Path) -> None:
    """With the package not installed, a baseline that judges its metric cannot be judged
    against silently: one line names the unknown metric (exit 2), as a misspelt one would."""
    done = bloomperf(
        outside_env(Path("/nonexistent")),
        "diff", str(accepted / "results.json"), "--baseline", str(planted(accepted, 4.0)),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"unknown metric {NAME!r}" in done.stderr


def test_a_bad_metric_entry_point_is_one_line_naming_it(tmp_path: Path, accepted: Path) -> None:
    """An entry point that does not name a Metric: exit 2, one line naming the entry point."""
    info = tmp_path / "bad_metric-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-metric\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[bloomperf.metrics]\nbroken = json:dumps\n")
    done = bloomperf(
        outside_env(tmp_path), "diff", str(accepted / "results.json"), "--allow-no-baseline"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1
    assert "entry point broken = json:dumps (bloomperf.metrics)" in done.stderr
