"""Paths, locales and streams that used to end in exit 3 or a lost file.

Every command is run on small committed files with hostile paths (spaces, newlines, bytes that
are not UTF-8, 255-byte names, symlink loops) and with an ASCII or UTF-8 stdout (hypothesis);
``run`` itself a few times on the tiny model, with its readers gone.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuzzing import FUZZ
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf import cli
from bloomperf.core.jsonfile import dead_temps, write_json_atomic
from bloomperf.core.storelock import store_lock, store_lock_path
from bloomperf.core.streams import ascii_fallback
from bloomperf.store.history.nights import night_date
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from bloomperf.store.results.output import previous_path, results_path, utc_stamp
from tests.builders import BLOG_BASELINE, BLOG_RESULTS

NON_UTF8 = os.fsdecode(b"caf\xe9")
NAMES = [
    "with space",
    "new\nline",
    NON_UTF8,
    "x" * 250 + ".json",
    "é" * 120 + ".json",  # 245 bytes
    "-dash",
]


def bloomperf_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bloomperf", *args]


def run_in_process(argv: list[str], encoding: str) -> tuple[int, str, str]:
    """``main`` with stdout and stderr of ``encoding`` (an ASCII locale's, or UTF-8)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    err = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(argv)
    finally:
        sys.stdout, sys.stderr = saved
    out.flush()
    err.flush()
    return (
        code,
        out.buffer.getvalue().decode(encoding),  # type: ignore[attr-defined]
        err.buffer.getvalue().decode(encoding),  # type: ignore[attr-defined]
    )


def loop(folder: Path) -> Path:
    """``l1 -> l2 -> l1``: a symlink loop."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "l1").symlink_to("l2")
    (folder / "l2").symlink_to("l1")
    return folder / "l1"


def command_lines(place: Path, results: Path, plots: bool) -> list[list[str]]:
    """Every command that reads or writes what the user names, pointed at ``place``; the two
    that draw plots (half a minute each on a loaded 2-core machine) only when ``plots``."""
    baseline = str(BLOG_BASELINE)
    drawn = [
        ["report", str(results), "--out-dir", str(place / "report")],
        ["history", "publish", "--history", str(place / "root"), "--out-dir", str(place / "s")],
    ]
    return [
        ["diff", str(results), "--baseline", baseline],
        ["diff", str(results), "--baseline", baseline, "--format", "json"],
        ["history", "add", str(results), "--history", str(place / "history")],
        ["history", "changes", "--history", str(place / "history")],
        ["history", "merge", str(results), "--history", str(place / "root")],
        ["baseline", "accept", str(results), "--baselines", str(place / "baselines")],
        ["baseline", "show", baseline],
        *(drawn if plots else []),
    ]


@settings(FUZZ, max_examples=10)
@given(
    name=st.sampled_from(NAMES),
    encoding=st.sampled_from(["ascii", "utf-8", "latin-1"]),
    looped=st.booleans(),
)
def test_every_command_answers_with_its_own_exit_status_for_any_path_and_locale(
    tmp_path_factory: pytest.TempPathFactory, name: str, encoding: str, looped: bool
) -> None:
    root = tmp_path_factory.mktemp("paths")
    place = root / name
    place.mkdir()
    results = place / ("results.json" if len(name) > 200 else name + ".json")
    if len(os.fsencode(results.name)) > 255:
        results = place / name
    shutil.copy(BLOG_RESULTS, results)
    if looped:
        place = loop(place / "loop")
    for argv in command_lines(place, results, plots=looped):  # a loop fails before drawing
        code, _, err = run_in_process(argv, encoding)
        assert code in (0, 1, 2), (argv, code, err)
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("bloomperf: error: "), (argv, err)


def test_a_symlink_loop_is_one_line_and_exit_2(tmp_path: Path) -> None:
    looped = loop(tmp_path / "loop")
    for argv in (
        ["history", "add", str(BLOG_RESULTS), "--history", str(looped)],
        ["baseline", "accept", str(BLOG_RESULTS), "--baselines", str(looped)],
        ["history", "merge", str(BLOG_RESULTS), "--history", str(looped)],
        ["report", str(BLOG_RESULTS), "--out-dir", str(looped)],
        ["history", "publish", "--history", str(looped), "--out-dir", str(tmp_path / "s")],
        ["run", "--model", "tiny", "--device", "cpu", "--no-lock", "--output", str(looped)],
    ):
        code, _, err = run_in_process(argv, "utf-8")
        errors = [line for line in err.splitlines() if "error" in line]
        assert code == 2 and len(errors) == 1 and "l1" in errors[0], (argv, err)


def test_a_folder_named_with_bytes_that_are_not_utf8_is_written(tmp_path: Path) -> None:
    folder = tmp_path / NON_UTF8
    assert store_lock_path(folder).name.startswith("bloomperf-store-")
    with store_lock(folder):
        pass
    for argv in (
        ["history", "add", str(BLOG_RESULTS), "--history", str(folder / "h")],
        ["baseline", "accept", str(BLOG_RESULTS), "--baselines", str(folder / "b")],
        ["history", "merge", str(BLOG_RESULTS), "--history", str(folder / "root")],
    ):
        code, _, err = run_in_process(argv, "utf-8")
        assert code == 0, (argv, err)


def test_an_ascii_stdout_gets_fallbacks_not_an_error() -> None:
    argv = ["diff", str(BLOG_RESULTS), "--baseline", str(BLOG_BASELINE)]
    done = subprocess.run(
        bloomperf_cmd(*argv),
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONUTF8": "0"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.isascii() and b"\n" in done.stdout
    assert ascii_fallback("a · b … c × d") == "a - b ... c x d"


def closed_pipe() -> int:
    """A pipe's write end whose reader has already gone: every write is EPIPE."""
    read, write = os.pipe()
    os.close(read)
    return write


def test_a_reader_that_left_changes_no_exit_status() -> None:
    argv = bloomperf_cmd("diff", str(BLOG_RESULTS), "--baseline", str(BLOG_BASELINE))
    reference = subprocess.run(argv, capture_output=True, check=False)
    gone = closed_pipe()
    try:
        done = subprocess.run(argv, stdout=gone, stderr=gone, check=False)
    finally:
        os.close(gone)
    assert done.returncode == reference.returncode == 0


def test_a_full_stdout_names_stdout() -> None:
    argv = bloomperf_cmd("diff", str(BLOG_RESULTS), "--baseline", str(BLOG_BASELINE))
    with open("/dev/full", "w") as full:
        done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "stdout" in done.stderr, done.stderr


def test_run_with_its_readers_gone_measures_and_saves_every_cell(tmp_path: Path) -> None:
    """``run … 2>&1 | head -1``: the run used to stop at its next progress line and exit 1;
    ``run … | head -1`` saved every cell but exited 2. Here both streams are gone from the
    start, and the output is a folder (trailing slash) with a non-UTF-8 name."""
    folder = tmp_path / f"{NON_UTF8} out"
    argv = bloomperf_cmd(
        "run",
        "--model",
        "tiny",
        "--device",
        "cpu",
        "--backends",
        "accelerate",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        "1,2",
        "--new-tokens",
        "4",
        "--cycles",
        "1",
        "--warmup",
        "1",
        "--no-lock",
        "--allow-no-baseline",
        "--output",
        f"{folder}/",
    )
    env = {**os.environ, "BLOOMPERF_HEARTBEAT_S": "0.1", "PYTHONIOENCODING": "ascii"}
    gone = closed_pipe()
    try:
        done = subprocess.run(argv, stdout=gone, stderr=gone, env=env, check=False, timeout=600)
    finally:
        os.close(gone)
    assert done.returncode == 0
    files = list(folder.glob("*.json"))
    assert len(files) == 1 and files[0].name.endswith("Z.json"), files
    run = read_results(files[0])
    assert run.complete and len(run.cells) == 2


def test_an_existing_results_file_is_kept_until_the_new_run_has_cells(tmp_path: Path) -> None:
    """A reused --output used to be emptied at the start: a run stopped before its first cell
    left "0 cells saved" where 2 had been."""
    from bloomperf.harness.options import resolve_options
    from bloomperf.harness.session import Session

    keep = tmp_path / "keep.json"
    save_run(read_results(BLOG_RESULTS), keep)
    before = keep.read_bytes()
    options = resolve_options(
        {"model": "tiny", "device": "cpu", "output": str(keep), "allow_no_baseline": True},
        env={},
    )
    session = Session.prepare(options)
    session.abort()  # stopped before its first cell
    assert keep.read_bytes() == before
    assert (tmp_path / "keep.previous.json").read_bytes() == before


def test_output_naming_a_folder_and_utc_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert results_path(Path("results"), "results/", "bloomperf").parent == Path("results")
    assert results_path(Path("keep.json"), "keep.json", "bloomperf") == Path("keep.json")
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14
    time.tzset()
    try:
        moment = dt.datetime(2026, 12, 3, 23, 30, tzinfo=dt.timezone.utc)
        local = moment.astimezone()  # 2026-12-04 13:30 on Kiritimati
        assert utc_stamp(local) == "20261203-233000Z"
        run = read_results(BLOG_RESULTS)
        from dataclasses import replace

        night = night_date(replace(run, started_at=local.isoformat()), "x")
        assert night.isoformat().replace("-", "") == utc_stamp(local)[:8]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_names_of_242_to_255_bytes_are_written_and_kept_aside(tmp_path: Path) -> None:
    for size in (242, 250, 255):
        path = tmp_path / ("r" * (size - 5) + ".json")
        write_json_atomic(path, {"size": size})
        assert path.is_file()
        assert len(os.fsencode(previous_path(path).name)) <= 255


def test_temp_files_of_dead_writers_are_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    dead = tmp_path / ".r.json.abcd1234.tmp"
    dead.write_text("{")
    old = time.time() - 60
    os.utime(dead, (old, old))
    busy = tmp_path / ".r.json.efgh5678.tmp"
    busy.write_text("{")
    os.utime(busy, (old, old))
    with open(busy) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a writer still at work
        assert dead_temps(tmp_path, "r.json") == [dead]
        write_json_atomic(target, {})
        assert not dead.exists() and busy.exists()


def test_a_relative_xdg_folder_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    from bloomperf.catalog.checkpoints import default_cache_dir
    from bloomperf.store.baseline.folders import user_baselines_dir

    monkeypatch.delenv("BLOOMPERF_CACHE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert user_baselines_dir() == Path.home() / ".local/share/bloomperf/baselines"
    assert default_cache_dir() == Path.home() / ".cache/bloomperf"
    monkeypatch.setenv("XDG_DATA_HOME", "/abs/data")
    assert user_baselines_dir() == Path("/abs/data/bloomperf/baselines")


def bash_words(line: str) -> list[bytes]:
    """The words bash reads from ``line``, as bytes (each printed NUL-terminated)."""
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True)
    return done.stdout.split(b"\0")[:-1]


def test_printed_paths_paste_into_a_shell_as_one_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "next:" commands and the success lines printed paths bare: a space made two words,
    a newline two lines."""
    from bloomperf.cli.run import print_next_steps
    from bloomperf.core.paths import shell_word

    for name in NAMES:
        path = tmp_path / name / "r.json"
        assert bash_words(shell_word(path)) == [os.fsencode(path)], name
        out = io.StringIO()
        print_next_steps(path, path, out)
        commands = [line for line in out.getvalue().splitlines() if "bloomperf " in line]
        assert len(commands) == 3
        for command in commands:
            assert os.fsencode(path) in bash_words(command.split("#")[0]), command
    folder = tmp_path / "with space\nnew line"
    folder.mkdir()
    results = folder / "r.json"
    shutil.copy(BLOG_RESULTS, results)
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["history", "add", str(results), "--history", str(folder / "h")],
        ["baseline", "accept", str(results), "--baselines", str(folder / "b")],
    ):
        code, out_text, _ = run_in_process(argv, "utf-8")
        assert code == 0 and out_text.count("\n") == 1, out_text
        words = [w.rstrip(b":") for w in bash_words(out_text.strip())]  # "bloomperf: PATH: …"
        assert os.fsencode(results) in words, words


def test_an_xdg_data_home_that_is_a_file_is_named_not_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.write_text("a file")
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.chdir(tmp_path)  # no ./baselines here
    code, _, err = run_in_process(["baseline", "accept", str(BLOG_RESULTS)], "utf-8")
    assert code == 2 and err.count("\n") == 1, err
    assert "XDG_DATA_HOME" in err and "--baselines" not in err, err
