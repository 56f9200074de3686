"""`bloomperf ab`: paired statistics, overlays, and real interleaved runs on the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bloomperf
from bloomperf.analysis.paired import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    PairedEstimate,
    critical_rank,
    decide,
    estimate_paired,
    final_verdict,
)
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.cli import main
from bloomperf.cli.ab import exit_code
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.interleave import Comparison
from bloomperf.harness.matrix import Cell
from bloomperf.harness.overlay import (
    PackageSource,
    build_overlay,
    parse_settings,
    prepare_arm,
    resolve_python,
    worker_env,
)
from bloomperf.store.results import Outcome
from tests.wheels import build_wheel

# ---- paired statistics (pure) ---------------------------------------------------------------


def test_critical_rank_matches_the_signed_rank_table() -> None:
    # Published Wilcoxon tables: n=10 at 95 % → T=8, so the interval starts at the 9th Walsh
    # average; n=20 at 99 % → T=37 (38th).
    assert critical_rank(10, 0.05) == 9
    assert critical_rank(20, 0.01) == 38
    # The normal approximation takes over smoothly.
    assert abs(critical_rank(61, 0.05) - critical_rank(60, 0.05)) < 30


def test_interval_covers_the_true_ratio_at_its_level() -> None:
    rng = np.random.default_rng(7)
    misses = 0
    for _ in range(300):
        a = np.exp(rng.normal(0.0, 0.2, 30)) * 5.0
        b = a * 1.1 * np.exp(rng.normal(0.0, 0.2, 30))
        estimate = estimate_paired(a, b, 0.95)
        misses += not estimate.low <= 1.1 <= estimate.high
    assert misses / 300 < 0.09


def test_pairing_cancels_drift_and_outliers_do_not_move_the_estimate() -> None:
    rng = np.random.default_rng(3)
    drift = np.linspace(1.0, 3.0, 200)  # the machine gets three times slower during the run
    a = drift * np.exp(rng.normal(0.0, 0.03, 200))
    b = drift * 1.05 * np.exp(rng.normal(0.0, 0.03, 200))
    b[::20] *= 10.0  # every 20th B cycle disturbed
    estimate = estimate_paired(a, b, 0.99)
    assert 1.03 < estimate.low < estimate.ratio < estimate.high < 1.08


@pytest.mark.parametrize(
    ("low", "ratio", "high", "verdict"),
    [
        (1.02, 1.10, 1.20, SLOWER),  # significant and large
        (1.001, 1.02, 1.04, SAME),  # significant but smaller than the tolerance
        (0.97, 1.00, 1.03, SAME),
        (0.80, 0.88, 0.97, FASTER),
        (0.97, 1.06, 1.15, None),  # could be either: more pairs
        (0.90, 1.00, 1.10, None),
    ],
)
def test_decide(low: float, ratio: float, high: float, verdict: str | None) -> None:
    estimate = PairedEstimate(ratio, low, high, 50, 0.99)
    assert decide(estimate, 0.05) == verdict
    assert final_verdict(estimate, 0.05) == (verdict or INCONCLUSIVE)


def test_too_few_pairs_never_decide() -> None:
    # Five pairs all three times slower: [min, max] covers only 1 - 2/32 = 94 % < 95 %.
    estimate = estimate_paired([1.0] * 5, [3.0, 3.1, 2.9, 3.2, 3.0], 0.95)
    assert estimate.pairs == 5 and decide(estimate, 0.05) is None
    estimate = estimate_paired([1.0] * 6, [3.0, 3.1, 2.9, 3.2, 3.0, 3.05], 0.95)
    assert decide(estimate, 0.05) == SLOWER


def test_mismatched_or_bad_samples_are_refused() -> None:
    with pytest.raises(BloomperfError, match="3 A values but 2 B values"):
        estimate_paired([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(BloomperfError, match="positive finite"):
        estimate_paired([1.0, 0.0], [1.0, 2.0])


# ---- environments ---------------------------------------------------------------------------


def test_settings_and_interpreters_are_checked(tmp_path: Path) -> None:
    assert parse_settings(["A=1", "B_2=x=y"], "--b-env") == {"A": "1", "B_2": "x=y"}
    with pytest.raises(BloomperfError, match="--b-env: 'nope' is not KEY=VALUE"):
        parse_settings(["nope"], "--b-env")
    with pytest.raises(BloomperfError, match=r"--a: .* neither a Python interpreter nor a venv"):
        resolve_python(str(tmp_path), "--a")
    venv = Path(sys.prefix)
    assert resolve_python(str(venv), "--a") == str((venv / "bin" / "python").absolute())


def test_overlay_installs_pins_caches_them_and_runs_their_pth_files(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    build_wheel(
        house,
        "bpmark",
        "2.0",
        {"bpmark/__init__.py": "", "bpmark-hook.pth": "import os; os.environ['BPMARK'] = 'ran'\n"},
    )
    source = PackageSource(find_links=(str(house),))
    cache = tmp_path / "cache"
    overlay = build_overlay(sys.executable, ("bpmark==2.0",), source, cache)
    assert (overlay / "bpmark" / "__init__.py").is_file()
    # Cached: the same pins come back from the folder even when the wheel is gone.
    (house / "bpmark-2.0-py3-none-any.whl").unlink()
    assert build_overlay(sys.executable, ("bpmark==2.0",), source, cache) == overlay
    # The user's own sitecustomize still runs behind the overlay's bootstrap.
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USERSITE'] = 'ran'\n")
    env = worker_env(sys.executable, {"PYTHONPATH": str(user)}, overlay, cache)
    probe = "import os, bpmark; print(os.environ.get('BPMARK'), os.environ.get('USERSITE'))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["ran", "ran"]
    arm = prepare_arm("b", sys.executable, {}, ("bpmark==2.0",), source, cache)
    assert arm.fingerprint["packages"]["bpmark"] == "2.0"


def test_another_interpreter_runs_this_bloomperf(tmp_path: Path) -> None:
    # A venv without bloomperf (a venv's python links to the same base interpreter: it must
    # still count as another environment).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = resolve_python(str(venv), "--b")
    env = worker_env(python, {}, None, tmp_path / "cache")
    probe = "import bloomperf.harness.protocol, os; print(os.path.realpath(bloomperf.__file__))"
    done = subprocess.run(
        [python, "-c", probe],
        env={**os.environ, **env},
        cwd=tmp_path,  # not the checkout, whose bloomperf/ python -c would find
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.realpath(bloomperf.__file__)
    assert worker_env(sys.executable, {}, None, tmp_path / "cache") == {}


def test_a_pin_that_cannot_install_fails_with_pips_reason(tmp_path: Path) -> None:
    source = PackageSource(find_links=(str(tmp_path),))
    with pytest.raises(BloomperfError, match=r"pip could not install bpabsent==1\.0") as caught:
        build_overlay(sys.executable, ("bpabsent==1.0",), source, tmp_path / "cache")
    assert caught.value.exit_code == 2  # bad input, never the regression code
    assert not list((tmp_path / "cache" / "overlays").glob("*"))


# ---- real interleaved runs on the tiny model -------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> str:
    return str(resolve_model("tiny", None, None).path)


def run_ab(tiny: str, tmp_path: Path, *args: str) -> tuple[int, dict]:
    output = tmp_path / "ab.json"
    code = main(
        [
            "ab",
            "--model",
            tiny,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--batch-sizes",
            "1",
            "--dtypes",
            "fp32",
            "--new-tokens",
            "5",
            "--no-lock",
            "--output",
            str(output),
            *args,
        ]
    )
    return code, json.loads(output.read_text())


def test_a_against_itself_is_same(tiny: str, tmp_path: Path) -> None:
    code, document = run_ab(tiny, tmp_path, "--tolerance", "0.25", "--max-time", "60")
    (cell,) = document["cells"]
    # On a machine too busy to tell (tests/test_contention.py), the honest answer is
    # inconclusive (busy), said with its figures; a wrong verdict never is.
    busy = cell["verdict"] == INCONCLUSIVE and cell["busy_verdict"] and cell["busy"]["set_aside"]
    assert code == 0 and (cell["verdict"] == SAME or busy), cell
    assert document["kind"] == "bloomperf-ab" and document["complete"]
    assert document["differences"]["packages"] == {} and document["differences"]["settings"] == {}
    samples = cell["samples"]
    assert len(samples) == 2 * cell["pairs_measured"]
    assert {(s["arm"], s["position"]) for s in samples} == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    assert document["arms"]["a"]["fingerprint"]["packages"]["torch"]


def plant_slowdown(folder: Path) -> Path:
    """A sitecustomize that makes every torch.nn.Linear call sleep 0.5 ms."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import time\nimport torch\n"
        "_forward = torch.nn.Linear.forward\n"
        "def forward(self, x):\n    time.sleep(0.0005)\n    return _forward(self, x)\n"
        "torch.nn.Linear.forward = forward\n"
    )
    return folder


def test_a_slowdown_planted_in_arm_bs_environment_is_found(tiny: str, tmp_path: Path) -> None:
    planted = plant_slowdown(tmp_path / "planted")
    code, document = run_ab(
        tiny, tmp_path, "--b-env", f"PYTHONPATH={planted}", "--tolerance", "0.1"
    )
    (cell,) = document["cells"]
    assert (code, cell["verdict"]) == (1, SLOWER), cell
    assert cell["low"] > 1.1
    assert document["differences"]["settings"] == {"PYTHONPATH": {"a": None, "b": str(planted)}}


def test_groups_mode_alternates_whole_loads_and_keeps_every_cycle(
    tiny: str, tmp_path: Path
) -> None:
    # The GPU mode, run on CPU: two rounds, each arm loading its own group once per round.
    # Two pairs can never decide, so the cell is inconclusive, which passes unless asked.
    planted = plant_slowdown(tmp_path / "planted")
    args = ["--mode", "groups", "--min-pairs", "2", "--max-pairs", "2", "--cycles", "2"]
    code, document = run_ab(tiny, tmp_path, *args, "--b-env", f"PYTHONPATH={planted}")
    (cell,) = document["cells"]
    assert (code, cell["verdict"], cell["pairs_measured"]) == (0, INCONCLUSIVE, 2), cell
    medians = {arm: cell["arms"][arm]["median_ms_per_token"] for arm in ("a", "b")}
    assert medians["b"] > 1.5 * medians["a"]  # the slowdown shows where it cannot be judged yet
    rounds = [[s for s in cell["samples"] if s["pair"] == p] for p in (0, 1)]
    for samples in rounds:
        assert sorted(s["arm"] for s in samples) == ["a", "a", "b", "b"]  # --cycles 2 each
        assert {s["position"] for s in samples} == {0, 1}
    assert document["settings"]["mode"] == "groups"


def test_exit_status_gates_on_slower_and_on_inconclusive_only_when_asked() -> None:
    def compared(verdict: str | None, outcome: Outcome = Outcome.OK) -> Comparison:
        return Comparison(Cell("accelerate", "fp32", 1), outcome, verdict, None, (), 1.0, "x")

    assert exit_code([compared(SAME), compared(FASTER)], fail_inconclusive=True) == 0
    assert exit_code([compared(SAME), compared(SLOWER)], fail_inconclusive=False) == 1
    assert exit_code([compared(INCONCLUSIVE)], fail_inconclusive=False) == 0
    assert exit_code([compared(INCONCLUSIVE)], fail_inconclusive=True) == 1
    assert exit_code([compared(None, Outcome.ERROR)], fail_inconclusive=False) == 1
    assert exit_code([compared(None, Outcome.SKIPPED)], fail_inconclusive=False) == 0


def test_bad_comparison_options_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["ab", "--tolerance", "2", "--no-lock"]) == 2
    assert main(["bisect", "pkg", "1.0", "2.0", "--max-pairs", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "bloomperf: error: --tolerance: must be between 0 and 1, found 2.0",
        "bloomperf: error: --max-pairs: must be a positive integer, got 0",
    ]


def plant_generate_counter(folder: Path, log: Path, arm: str) -> Path:
    """A sitecustomize that writes a line to ``log`` at each of the arm's generate calls (the
    real one still runs): what the worker asked of its backend, seen from outside."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "from bloomperf.backends.accelerate import AccelerateBackend\n"
        "_generate = AccelerateBackend.generate\n"
        "def generate(self, *args):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        f"        f.write({arm!r} + '\\n')\n"
        "    return _generate(self, *args)\n"
        "AccelerateBackend.generate = generate\n"
    )
    return folder


def test_each_arm_runs_its_warm_up_cycles_before_the_pairs(tiny: str, tmp_path: Path) -> None:
    """Cycles mode: each arm's worker generates ``--warmup`` times more than the pairs it times
    (the cell's other calls, such as its output check, the same whatever the warm-up)."""
    untimed = {}
    for warmup in (1, 3):
        folder = tmp_path / f"warmup-{warmup}"
        folder.mkdir()
        log = folder / "generate.log"
        envs = [
            f"PYTHONPATH={plant_generate_counter(folder / arm, log, arm)}" for arm in ("a", "b")
        ]
        _, document = run_ab(
            tiny,
            folder,
            *("--a-env", envs[0], "--b-env", envs[1], "--mode", "cycles", "--warmup", str(warmup)),
            *("--min-pairs", "6", "--max-pairs", "6"),
        )
        (cell,) = document["cells"]
        assert cell["pairs_measured"] == 6, cell  # "pairs": the clean ones the interval rests on
        calls = log.read_text().split()
        untimed[warmup] = {arm: calls.count(arm) - cell["pairs_measured"] for arm in ("a", "b")}
        assert all(n >= warmup for n in untimed[warmup].values()), (warmup, calls)
    assert {arm: untimed[3][arm] - untimed[1][arm] for arm in ("a", "b")} == {"a": 2, "b": 2}


def test_a_cell_stops_at_its_time_budget(tiny: str, tmp_path: Path) -> None:
    """Pairs that would take minutes stop at ``--max-time`` (loads included) with what they
    have, said as the reason."""
    _, document = run_ab(
        tiny,
        tmp_path,
        "--mode",
        "cycles",
        "--max-time",
        "3",
        "--min-pairs",
        "400",
        "--max-pairs",
        "400",
    )
    (cell,) = document["cells"]
    assert cell["stopped"] == "max-time" and 0 < cell["pairs_measured"] < 400, cell
    # It ran to its budget (its own clock, loads included): stopped by it, not before it.
    assert cell["elapsed_s"] >= 3, cell
