"""What killed runs leave behind (issue 31, 6 and 7): their temporary folders and files are
removed by the next run and listed by doctor, those of a run still at work are left alone, and
a multi-file output (report, site) is swapped in whole or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from bloomperf.catalog.leftovers import start_ms
from bloomperf.doctor.host import check_leftovers
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session

MAKE_FOLDER = (
    "import sys, time\n"
    "from bloomperf.catalog.leftovers import owned_temp_folder\n"
    "print(owned_temp_folder(sys.argv[1]), flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def folder_of(kind: str, tmp: Path, live_s: float) -> tuple[Path, subprocess.Popen[str]]:
    """A temporary folder made the way a run makes it, by a process that lives ``live_s``."""
    owner = subprocess.Popen(
        [sys.executable, "-c", MAKE_FOLDER, kind, str(live_s)],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    folder = Path(owner.stdout.readline().strip())
    (folder / "spec.json").write_text("{}")
    return folder, owner


def aged(path: Path) -> Path:
    old = time.time() - 60
    os.utime(path, (old, old))
    return path


def test_the_next_run_removes_what_killed_runs_left_and_doctor_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    dead = []
    for kind in ("worker", "offload", "group"):
        folder, owner = folder_of(kind, tmp, 0)
        owner.wait()  # the owner is gone, as a SIGKILLed controller is
        dead.append(folder)
    me = psutil.Process()
    reused = tmp / f"bloomperf-worker-{me.pid}-{start_ms(me) - 5000}-abcd1234"  # a reused PID
    reused.mkdir()
    dead.append(reused)
    running, owner = folder_of("worker", tmp, 600)  # another run, still at work
    kept_log = tmp / "bloomperf-worker-1-1-efgh5678"  # a failed group's log, named to the user
    kept_log.mkdir()
    (kept_log / "worker-accelerate-fp32-1-1.log").write_text("Traceback")
    results = tmp_path / "results"
    results.mkdir()
    dead_temp = results / ".bloomperf-20261203-184500Z.json.a1b2c3d4.tmp"
    dead_temp.write_text("{")
    aged(dead_temp)
    try:
        check = check_leftovers(tmp, results)
        assert check.status == "warn" and "4 more" in check.reason, check
        options = resolve_options(
            {"model": "tiny", "device": "cpu", "output": str(results / "r.json")}, env={}
        )
        Session.prepare(options).abort()
        assert [p for p in [*dead, dead_temp] if p.exists()] == []
        assert running.is_dir() and kept_log.is_dir()
        assert check_leftovers(tmp, results).status == "ok"
    finally:
        owner.kill()
        owner.wait()
