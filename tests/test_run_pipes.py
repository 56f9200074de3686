"""``bloomperf run`` in shell pipelines and under stops, run for real on the
tiny model: ``run | head -1`` and ``run 2>&1 | head -1`` (a reader that leaves), and a SIGTERM
before the first cell of a run whose --output already held complete cells."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.store.results import Outcome
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import RESULTS

# A folder whose sitecustomize holds a worker at its start (its docstring says how).
HOLD = Path(__file__).resolve().parent / "hold"
HOLD_ENV = "BLOOMPERF_TEST_HOLD"
CHEAP = ["--device", "cpu", "--backends", "accelerate", "--dtypes", "fp32", "--new-tokens", "4"]
CHEAP += ["--cycles", "1", "--warmup", "1", "--no-lock", "--allow-no-baseline"]


def run_piped(pipeline: str, out: Path, *args: str) -> tuple[int, str]:
    """``bloomperf run … PIPELINE`` in bash; the run's own exit status and what head printed.
    A line comes first, so head has read its line and gone before the run writes (the run's
    stdout is one write at its end, which head could otherwise read whole)."""
    command = [sys.executable, "-m", "bloomperf", "run", *CHEAP, "--output", str(out), *args]
    script = f'{{ echo "a first line"; "$@"; }} {pipeline}; exit "${{PIPESTATUS[0]}}"'
    done = subprocess.run(
        ["bash", "-c", script, "bash", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if "2>&1" not in pipeline else None,
        text=True,
        timeout=600,
    )
    return done.returncode, done.stdout


def test_run_into_head_saves_every_cell_and_keeps_the_verdicts_exit_status(
    tmp_path: Path,
) -> None:
    """``run | head -1`` saved every cell but exited 2 ("Broken pipe"): the verdict was lost.
    Here the verdict is a failure (a model that cannot load), so it must stay exit 1."""
    broken = tmp_path / "broken-tiny"
    shutil.copytree(resolve_model("tiny", None, None).path, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    out = tmp_path / "r.json"
    code, head = run_piped("| head -1", out, "--model", str(broken), "--batch-sizes", "1,2")
    assert code == 1 and head == "a first line\n", head
    run = read_results(out)
    assert run.complete and len(run.cells) == 2
    assert run.cells[0].outcome is Outcome.ERROR


def test_run_with_its_progress_into_head_measures_every_cell(tmp_path: Path) -> None:
    """``run 2>&1 | head -1`` stopped at the next progress line with 0 or 1 cells and exit 1."""
    out = tmp_path / "r.json"
    code, _ = run_piped("2>&1 | head -1", out, "--model", "tiny", "--batch-sizes", "1,2")
    assert code == 0
    run = read_results(out)
    assert run.complete and [c.outcome for c in run.cells] == [Outcome.OK, Outcome.OK]


def test_sigterm_before_the_first_cell_keeps_the_cells_already_in_the_output(
    tmp_path: Path,
) -> None:
    """A reused --output was emptied at the start: SIGTERM while the group loaded left "0 cells
    saved" where 2 complete cells had been. The worker is held at its start (tests/hold), so the
    stop lands while the group loads however slow or fast the machine is."""
    keep = tmp_path / "keep.json"
    save_run(read_results(RESULTS / "cpu.tiny.steps.results.json"), keep)
    old = keep.read_bytes()
    resolve_model("tiny", None, None)  # built beforehand: the stop comes while the group loads
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    held = Path(f"{hold}.reached")
    path = os.pathsep.join([str(HOLD), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "bloomperf", "run", *CHEAP, "--model", "tiny"]
    run = subprocess.Popen(
        [*command, "--batch-sizes", "1", "--output", str(keep)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # The worker inherits the controller's environment, the hold included.
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, HOLD_ENV: str(hold)},
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        while not held.exists():  # the worker started and waits: the group is loading
            assert run.poll() is None, run.communicate()[1]
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=120) == 143
        rest = run.communicate()[1]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "loading accelerate fp32 ..." in rest, rest
    assert "0 cells saved" in rest, rest
    assert keep.read_bytes() == old
    assert (tmp_path / "keep.previous.json").read_bytes() == old
    worker = int(held.read_text())
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie"


def test_run_in_an_ascii_locale_prints_its_verdicts_and_exits_0(tmp_path: Path) -> None:
    """Under ``LC_ALL=C`` (no UTF-8 mode) ``run`` measured, saved, then exited 3 on the '·' of
    its verdicts (judged against the shipped cpu baseline)."""
    command = [sys.executable, "-m", "bloomperf", "run", *CHEAP[:-1], "--model", "tiny"]
    done = subprocess.run(
        [*command, "--batch-sizes", "1", "--output", str(tmp_path / "r.json")],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii", "PYTHONUTF8": "0"},
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.isascii() and b"cpu - tiny" in done.stdout, done.stdout
    assert len(read_results(tmp_path / "r.json").cells) == 1
