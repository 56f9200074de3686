"""What killed runs leave behind: their temporary folders and files are
removed by the next run and listed by doctor, those of a run still at work are left alone, and
a multi-file output (report, site) is swapped in whole or not at all."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from bloomperf.cli import main
from bloomperf.core.pidstart import process_start
from bloomperf.doctor.host import check_leftovers
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session
from bloomperf.render.report import write_report
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_RESULTS, RESULTS, night, on_night, scaled_run

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
    me = os.getpid()
    reused = tmp / f"bloomperf-worker-{me}-{(process_start(me) or 0) - 500}-abcd1234"  # reused PID
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


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_report_replaces_the_old_one_whole(tmp_path: Path) -> None:
    """Files were moved in one by one: a report without a history left the old trend.png
    beside the new pages (and a stop half-way, a new index.html beside old PNGs)."""
    run = read_results(BLOG_RESULTS)
    history = tmp_path / "history"
    save_run(on_night(run, night(0)), history / f"{night(0)}.json")
    out = tmp_path / "report"
    write_report(run, None, out, history)
    assert (out / "trend.png").is_file()
    killed = tmp_path / ".report.abcd1234.tmp"  # the fresh folder of a killed report
    (killed / "index.html").parent.mkdir()
    aged(killed)
    write_report(run, None, out)
    assert not (out / "trend.png").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    (out / "notes.txt").write_text("mine")  # a folder the report did not write is not replaced
    code = main(["report", str(BLOG_RESULTS), "--out-dir", str(out)])
    assert code == 2 and (out / "notes.txt").read_text() == "mine"


def test_a_full_disk_during_publish_leaves_the_old_site_whole(tmp_path: Path) -> None:
    """Pages were written into the site one by one: a full disk at the report left new trend
    pages under the old index.html."""
    cpu = read_results(RESULTS / "cpu.tiny.steps.results.json")
    history = tmp_path / "history"
    for day in range(2):
        save_run(on_night(cpu, night(day)), history / "cpu" / f"{night(day)}.json")
    out = tmp_path / "site"
    assert main(["history", "publish", "--history", str(history), "--out-dir", str(out)]) == 0
    old = files_of(out)
    save_run(on_night(scaled_run(cpu, 1.5), night(2)), history / "cpu" / f"{night(2)}.json")
    pages = max(len(data) for name, data in old.items() if "/report/" not in name)
    report = len(old["cpu/report/index.html"])
    assert pages < report  # the trend pages fit under the limit, the report does not
    limit = (pages + report) // 2

    def fill_the_disk_at_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then EFBIG, as a full disk's ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = ["history", "publish", "--history", str(history), "--out-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=fill_the_disk_at_limit,
    )
    assert done.returncode == 2, done.stderr
    assert files_of(out) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history", "site"]
    # A site is replaced whole: a folder holding the history itself is never taken for one.
    argv = ["history", "publish", "--history", str(history), "--out-dir", str(tmp_path)]
    assert main(argv) == 2 and len(list(history.rglob("*.json"))) == 3


def test_a_folder_named_by_the_earlier_ms_format_is_judged_by_that_format(tmp_path: Path) -> None:
    """Folders named before the start was counted in ticks since boot (ms since the epoch) are
    still told apart: this live process's kept, a reused PID's removed."""
    me = psutil.Process()
    ms = round(me.create_time() * 1000)
    live = tmp_path / f"bloomperf-worker-{me.pid}-{ms}-abcd1234"
    reused = tmp_path / f"bloomperf-offload-{me.pid}-{ms - 5000}-abcd1234"
    for folder in (live, reused):
        folder.mkdir()
    from bloomperf.catalog.leftovers import dead_run_folders

    assert dead_run_folders(tmp_path) == [reused]


@pytest.mark.parametrize("without", ["symbol", "EINVAL"])
def test_without_an_exchanging_rename_the_new_folder_still_replaces_the_old_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    """A C library without ``renameat2``, or a file system that refuses RENAME_EXCHANGE
    (EINVAL), falls back to three renames: the new files in place, the old ones left to remove,
    nothing of either mixed into the other."""
    import ctypes

    from bloomperf.core import swapdir

    class NoExchange:
        def __getattr__(self, name: str) -> object:
            if without == "symbol":
                raise AttributeError(name)

            def refuse(*args: object) -> int:
                ctypes.set_errno(22)  # EINVAL
                return -1

            return refuse

    monkeypatch.setattr(swapdir.ctypes, "CDLL", lambda *a, **k: NoExchange())
    out = tmp_path / "site"
    out.mkdir()
    (out / "old.png").write_text("old")
    (out / "index.html").write_text("old")
    with swapdir.fresh_folder(out, "--out-dir", lambda p: True) as staging:
        (staging / "index.html").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]
    assert (out / "index.html").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["site"]  # no staging or old folder left
