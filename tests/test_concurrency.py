"""Shared files lose no update: real concurrent processes writing one store, results file or
lock at once (six writers released together by a barrier, after their imports)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.core.lockdir import LOCK_DIR_ENV
from bloomperf.core.storelock import store_lock
from bloomperf.store.baseline.search import find_baseline
from bloomperf.store.history.nights import load_history
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from tests.builders import FIRST_NIGHT, night, night_run, ok_cell, rss, tiny_run

WRITERS = 6

# Imports done, each writer waits for the go file, then runs one bloomperf command: the six
# read-modify-writes start within a millisecond of each other.
AT_THE_BARRIER = textwrap.dedent(
    """
    import os, sys, time
    from bloomperf.cli import main
    go = sys.argv[1]
    open(go + "." + str(os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    sys.exit(main(sys.argv[2:]))
    """
)


def run_together(tmp_path: Path, commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Start every command as its own process, release them at once, and wait for all."""
    go = tmp_path / "go"
    env = {**os.environ, LOCK_DIR_ENV: str(tmp_path / "locks")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", AT_THE_BARRIER, str(go), *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in commands
    ]
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("go.*"))) < len(procs):
        assert time.monotonic() < deadline, "the writers never reached the barrier"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.05)
    go.touch()
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def cpu_cell(batch: int) -> CellResult:
    return CellResult(
        "accelerate", "fp32", batch, Outcome.OK, (20.0, 20.2, 19.9), 1.0, generate_memory=rss(300)
    )


def test_six_concurrent_accepts_into_one_folder_keep_every_cell(tmp_path: Path) -> None:
    results = []
    for batch in range(1, WRITERS + 1):  # each run measured one cell of its own
        path = tmp_path / f"run-{batch}.json"
        save_run(tiny_run(cpu_cell(batch)), path)
        results.append(path)
    folder = tmp_path / "baselines"
    done = run_together(
        tmp_path, [["baseline", "accept", str(p), "--baselines", str(folder)] for p in results]
    )
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr for d in done]
    baseline = find_baseline("cpu", "tiny", folder)
    assert baseline is not None
    assert sorted(c.batch_size for c in baseline.cells) == list(range(1, WRITERS + 1))
    assert [p.name for p in folder.iterdir()] == [Path(baseline.path).name]  # nothing else


def test_six_concurrent_adds_for_one_date_keep_every_run_under_distinct_names(
    tmp_path: Path,
) -> None:
    results = []
    for i in range(WRITERS):  # six different runs of the same night
        path = tmp_path / f"night-{i}.json"
        save_run(night_run(FIRST_NIGHT, [ok_cell(40.0 + i)]), path)
        results.append(path)
    folder = tmp_path / "history"
    done = run_together(
        tmp_path, [["history", "add", str(p), "--dir", str(folder)] for p in results]
    )
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr for d in done]
    nights = load_history(folder)
    assert len(nights) == WRITERS and len({n.path.name for n in nights}) == WRITERS
    kept = sorted(n.run.cells[0].ms_per_token or 0 for n in nights)
    assert kept == pytest.approx(sorted(40.0 + i for i in range(WRITERS)))
    assert sorted(p.name for p in folder.iterdir()) == sorted(n.path.name for n in nights)


def test_six_concurrent_merges_from_six_runners_lose_no_night(tmp_path: Path) -> None:
    sources = []
    for i in range(WRITERS):  # six runner folders, one night each, all of one date: the
        # writers compete for the same names (2026-10-01.json, -2, -3 ...), so a lost lock shows
        source = tmp_path / f"runner-{i}"
        source.mkdir()
        day = night(0)
        save_run(
            replace(night_run(day, [ok_cell(40.0 + i)]), started_at=f"{day}T0{i}:00:00Z"),
            source / f"{day}.json",
        )
        sources.append(source)
    dest = tmp_path / "root"
    done = run_together(
        tmp_path, [["history", "merge", str(s), "--into", str(dest)] for s in sources]
    )
    assert [d.returncode for d in done] == [0] * WRITERS, [d.stderr for d in done]
    folders = list(dest.iterdir())
    assert len(folders) == 1
    nights = load_history(folders[0])
    assert len(nights) == WRITERS
    assert sorted(n.run.started_at for n in nights) == sorted(
        f"{night(0)}T0{i}:00:00Z" for i in range(WRITERS)
    )


# The writer, with its lock call observed: a marker file the moment it asks for the folder's lock
# (the real flock_within still runs). A writer that never asks, or that is let in while another
# holds the lock, is seen without any race between six processes.
AT_THE_LOCK = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import bloomperf.core.storelock as storelock
    from bloomperf.cli import main
    real = storelock.flock_within
    def observed(*args, **kwargs):
        Path(sys.argv[1]).touch()
        return real(*args, **kwargs)
    storelock.flock_within = observed
    sys.exit(main(sys.argv[2:]))
    """
)


def store_writer(kind: str, tmp_path: Path) -> tuple[list[str], Path, Path]:
    """One writer of each store: its argv, the folder it must lock, and the folder it writes."""
    source = tmp_path / "runner"
    source.mkdir()
    results = source / f"{FIRST_NIGHT}.json"
    run = night_run(FIRST_NIGHT, [ok_cell(40.0)])
    save_run(run, results)
    if kind == "accept":
        folder = tmp_path / "baselines"
        return ["baseline", "accept", str(results), "--baselines", str(folder)], folder, folder
    if kind == "add":
        folder = tmp_path / "history"
        return ["history", "add", str(results), "--dir", str(folder)], folder, folder
    dest = tmp_path / "root"
    topology = dest / run.topology
    return ["history", "merge", str(source), "--into", str(dest)], topology, topology


@pytest.mark.parametrize("kind", ["accept", "add", "merge"])
def test_a_store_writer_waits_while_another_holds_the_folder_lock(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic where the six-writer tests are a race: this process holds the folder's
    lock; the writer must ask for it, write nothing while it is held, then write once free."""
    argv, locked, written = store_writer(kind, tmp_path)
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    asked = tmp_path / "asked"
    with store_lock(locked):
        writer = subprocess.Popen(
            [sys.executable, "-c", AT_THE_LOCK, str(asked), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        while not asked.exists():
            assert writer.poll() is None, (
                "wrote without asking for the lock",
                writer.communicate(),
            )
            assert time.monotonic() < deadline, "the writer never asked for the lock"
            time.sleep(0.02)
        held_until = time.monotonic() + 2.0  # the writer is at the lock: it must stay there
        while time.monotonic() < held_until:
            assert writer.poll() is None, ("went past a held lock", writer.communicate())
            assert not any(written.glob("*.json")), "wrote while another held the lock"
            time.sleep(0.05)
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, (out, err)
    assert any(written.glob("*.json")), sorted(tmp_path.rglob("*"))


def test_two_runs_writing_one_results_file_the_second_is_refused(tmp_path: Path) -> None:
    """``--no-lock`` lets two runs share a device, never a results file: the second is refused
    with one line before it writes anything (a real first run holds the file)."""
    out = tmp_path / "shared.json"
    env = {**os.environ, LOCK_DIR_ENV: str(tmp_path / "locks")}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from bloomperf.harness.lock import hold_output_lock\n"
            "with hold_output_lock(Path(sys.argv[1])):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.readline()\n",
            str(out),
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "bloomperf",
                "run",
                "--no-lock",
                "--new-tokens",
                "8",
                "--output",
                str(tmp_path / "." / "shared.json"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2, second.stderr
    assert f"another bloomperf run (PID {holder.pid}) writes {out}" in second.stderr
    assert "another --output" in second.stderr and "Traceback" not in second.stderr
    assert not out.exists()


# ---- an output that is also an input ----------------------------------------------------------


def spellings(path: Path, tmp_path: Path) -> list[Path]:
    """The same file under other names: relative detours and a link to it."""
    link = tmp_path / f"link-{path.name}"
    if not link.exists():
        link.symlink_to(path)
    return [
        path,
        path.parent / "." / path.name,
        path.parent / ".." / path.parent.name / path.name,
        link,
    ]


@pytest.mark.parametrize("option", ["--ds-config", "--hostfile"])
def test_run_refuses_an_output_that_is_one_of_its_inputs(
    tmp_path: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bloomperf.cli import main

    source = tmp_path / "input.json"
    # A valid input of each kind: an empty DeepSpeed config; a hostfile of this node.
    text = "{}\n" if option == "--ds-config" else "localhost slots=1\n"
    source.write_text(text)
    # The smallest run: refused, it measures nothing; allowed (the canary's mutant), one cell.
    smallest = ["--backends", "accelerate", "--dtypes", "fp32", "--batch-sizes", "1"]
    smallest += ["--new-tokens", "2", "--cycles", "1"]
    for output in spellings(source, tmp_path):
        code = main(["run", "--no-lock", *smallest, option, str(source), "--output", str(output)])
        err = capsys.readouterr().err
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "--output" in lines[0] and "also an input" in lines[0], err
        assert source.read_text() == text  # untouched


def test_diff_refuses_a_github_output_that_is_a_results_file_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bloomperf.cli import main

    before, after = tmp_path / "before.json", tmp_path / "after.json"
    save_run(tiny_run(cpu_cell(1)), before)
    save_run(tiny_run(cpu_cell(1)), after)
    for results in (before, after):
        for target in spellings(results, tmp_path):
            original = results.read_bytes()
            monkeypatch.setenv("GITHUB_OUTPUT", str(target))
            code = main(["diff", str(before), str(after), "--format", "github"])
            err = capsys.readouterr().err
            assert code == 2 and "GITHUB_OUTPUT" in err and "also an input" in err, err
            assert results.read_bytes() == original
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs.txt"))  # elsewhere: written
    assert main(["diff", str(before), str(after), "--format", "github"]) in (0, 1)
    assert "verdict=" in (tmp_path / "outputs.txt").read_text()
