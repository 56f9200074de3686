"""Options that were accepted and then ignored or mishandled: each is one line and exit 2 now,
through the real CLI. `run --dry-run` validates every run option and
plans the run without loading anything, so it answers as `run` itself would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.harness.options import MAX_TP
from bloomperf.harness.parsers import MAX_DS_CONFIG_BYTES
from bloomperf.store.results import MAX_BATCH_SIZE, MAX_CYCLES, MAX_NEW_TOKENS
from tests.builders import BASELINES
from tests.fuzzing import FUZZ, run_cli
from tests.users import as_nobody

DRY = ("run", "--dry-run", "--no-lock")


def refused(*argv: object, fragment: str) -> None:
    code, _, err = run_cli(*argv)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err


def test_the_dry_run_itself_is_accepted() -> None:
    assert run_cli(*DRY, "--batch-sizes", "1,2", "--dtypes", "fp32")[0] == 0


def test_each_call_answers_on_the_streams_of_its_own_time() -> None:
    """The first call imports the command module under its own redirected streams; a second
    call under new ones must print there, not into the first call's (closed, in pytest) streams."""
    argv = (*DRY, "--batch-sizes", "1", "--dtypes", "fp32", "--format", "json")
    first = run_cli(*argv)
    second = run_cli(*argv)
    assert first[0] == second[0] == 0, (first, second)
    assert second[1] == first[1] and second[1].strip(), second


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "not found"),
        ("", "no 'HOST slots=N' lines"),
        ("garbage here\n", "expected 'HOST slots=N'"),
        ("node1 slots=0\n", "slots=0"),
        ("$(id) slots=1\n", "not a host name"),
        ("\xff\xfe", "not UTF-8"),
        ("folder", "is a directory"),
    ],
)
def test_a_hostfile_that_is_missing_unreadable_or_garbage_is_refused(
    tmp_path: Path, content: str | None, fragment: str
) -> None:
    hostfile = tmp_path / "hostfile"
    if content == "folder":
        hostfile.mkdir()
    elif content == "\xff\xfe":
        hostfile.write_bytes(b"\xff\xfe")
    elif content is not None:
        hostfile.write_text(content)
    refused(*DRY, "--hostfile", hostfile, fragment=fragment)


def test_an_unreadable_hostfile_is_refused() -> None:
    """As root the check runs as nobody, so that root cannot pass it by reading the file."""
    folder = Path(tempfile.mkdtemp(prefix="bloomperf-unreadable-"))
    try:
        folder.chmod(0o755)  # nobody may look inside, not read the file
        hostfile = folder / "hostfile"
        hostfile.write_text("node1 slots=1\n")
        argv = (*DRY, "--hostfile", hostfile)
        assert run_cli(*argv)[0] == 0  # readable: planned (and every module it needs imported)
        hostfile.chmod(0)
        code, _, err = as_nobody(run_cli, *(str(a) for a in argv))
        assert code == 2 and err.count("\n") == 1 and "cannot read" in err, err
    finally:
        shutil.rmtree(folder)


@FUZZ
@given(
    option=st.sampled_from(
        [
            ("--tp", MAX_TP),
            ("--new-tokens", MAX_NEW_TOKENS),
            ("--cycles", MAX_CYCLES),
            ("--warmup", MAX_CYCLES),
            ("--batch-sizes", MAX_BATCH_SIZE),
            ("--ssh-port", 65535),
        ]
    ),
    beyond=st.integers(min_value=1, max_value=10**30),
)
def test_numbers_beyond_any_machine_or_reader_are_refused(
    option: tuple[str, int], beyond: int
) -> None:
    flag, limit = option
    refused(*DRY, flag, limit + beyond, fragment=flag)


@pytest.mark.parametrize("flag", ["--tp", "--new-tokens", "--cycles", "--batch-sizes"])
def test_the_limits_themselves_are_accepted_by_the_parser(flag: str) -> None:
    from bloomperf.harness.options import resolve_options

    limit = {"--tp": MAX_TP, "--new-tokens": MAX_NEW_TOKENS, "--cycles": MAX_CYCLES}
    value = limit.get(flag, MAX_BATCH_SIZE)
    resolve_options({flag[2:].replace("-", "_"): str(value)}, env={})


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--dtypes", "fp32,fp32"),
        ("--backends", "accelerate,accelerate"),
        ("--batch-sizes", "1,2,1"),
    ],
)
def test_a_value_given_twice_is_refused_not_measured_twice(flag: str, value: str) -> None:
    refused(*DRY, flag, value, fragment="given twice")


@pytest.mark.parametrize(
    ("include", "exclude"),
    [("node1", "node1"), ("node1:0,1@node2", "node2:1"), ("a@b@c", "c@d")],
)
def test_a_node_both_included_and_excluded_is_refused(include: str, exclude: str) -> None:
    refused(*DRY, "--include", include, "--exclude", exclude, fragment="--include and --exclude")


@pytest.mark.parametrize("kind", ["huge", "fifo", "not json", "list", "duplicate key"])
def test_a_ds_config_is_read_bounded_and_strict(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "ds.json"
    if kind == "huge":
        config.write_text('{"a": "' + "x" * MAX_DS_CONFIG_BYTES + '"}')
    elif kind == "fifo":
        os.mkfifo(config)
    elif kind == "not json":
        config.write_text("{zero_optimization: 3")
    elif kind == "list":
        config.write_text("[1, 2]")
    else:
        config.write_text('{"train_batch_size": 1, "train_batch_size": 2}')
    refused(*DRY, "--ds-config", config, fragment=str(config))


def test_ab_min_pairs_above_max_pairs_is_refused(tmp_path: Path) -> None:
    python = sys.executable
    refused(
        "ab",
        "--a",
        python,
        "--b",
        python,
        "--min-pairs",
        "50",
        "--max-pairs",
        "10",
        "--no-lock",
        "--cache-dir",
        tmp_path,
        fragment="--min-pairs 50",
    )


def test_doctor_refuses_a_cache_dir_that_is_a_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    refused("doctor", "--cache-dir", cache, fragment=f"--cache-dir {cache}")


@pytest.mark.parametrize("model", ["no-such-model", "/nonexistent/checkpoint", "org/absent"])
def test_doctor_refuses_a_model_that_does_not_exist(tmp_path: Path, model: str) -> None:
    refused("doctor", "--model", model, "--cache-dir", tmp_path, fragment="--model")


def test_doctor_checks_an_existing_model(tmp_path: Path) -> None:
    code, _, err = run_cli("doctor", "--model", "tiny", "--cache-dir", tmp_path)
    assert code in (0, 1), err


def test_baseline_show_of_a_model_without_a_baseline_is_refused() -> None:
    refused(
        "baseline",
        "show",
        "8xA100-80GB",
        "--model",
        "bloom-7b1",
        "--baselines",
        BASELINES,
        fragment="--model bloom-7b1",
    )
    code, out, _ = run_cli("baseline", "show", "cpu", "--model", "tiny", "--baselines", BASELINES)
    assert code == 0 and "tiny" in out


def test_bisect_lists_versions_with_the_pip_it_installs_with(tmp_path: Path) -> None:
    """`pip index versions --json` is not in every venv's pip: the listing must not need the
    venv's pip at all, so a venv made without pip still bisects."""
    from bloomperf.cli.bisect import list_versions
    from bloomperf.harness.overlay import PackageSource
    from tests.wheels import build_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "1.1", "2.0rc1"):
        build_wheel(wheels, "bplist", version, {})
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "v"], check=True)
    python = str(tmp_path / "v" / "bin" / "python")
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
    found = list_versions("bplist", PackageSource(find_links=(str(wheels),)), True, python)
    assert [str(v) for v in found] == ["1.0", "1.1", "2.0rc1"]
    # An index (here a PEP 503 folder) is asked through pip: bloomperf's own, never the venv's.
    simple = tmp_path / "simple" / "bplist"
    simple.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in sorted(wheels.iterdir()))
    (simple / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    index = PackageSource(index_url=(tmp_path / "simple").as_uri())
    found = list_versions("bplist", index, True, python)
    assert [str(v) for v in found] == ["1.0", "1.1", "2.0rc1"]


def test_an_ab_arm_that_cannot_install_exits_2(tmp_path: Path) -> None:
    code, _, err = run_cli(
        "ab",
        "--a",
        sys.executable,
        "--b",
        sys.executable,
        "--b-pin",
        "bpabsent==1.0",
        "--find-links",
        tmp_path,
        "--no-lock",
        "--cache-dir",
        tmp_path / "cache",
    )
    assert code == 2, err
    assert_one_error_after_progress(err, "bpabsent")


def assert_one_error_after_progress(err: str, fragment: str) -> None:
    """``ab`` says which arm it prepares as it goes (on stderr); the refusal is one line after."""
    *progress, error = err.splitlines()
    assert all(line.startswith("bloomperf ab: preparing arm ") for line in progress), err
    assert error.startswith("bloomperf: error: ") and fragment in error and err.endswith("\n")


def test_an_ab_arm_that_does_not_start_exits_2(tmp_path: Path) -> None:
    code, _, err = run_cli(
        "ab",
        "--a",
        sys.executable,
        "--b",
        sys.executable,
        "--b-env",
        "PYTHONHOME=/nonexistent",
        "--no-lock",
        "--cache-dir",
        tmp_path / "cache",
    )
    assert code == 2, err
    assert_one_error_after_progress(err, "does not start")


def test_results_json_is_unchanged_by_a_refused_option(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    refused("run", "--no-lock", "--output", out, "--dtypes", "fp32,fp32", fragment="twice")
    assert not out.exists()


@pytest.mark.parametrize(
    "marker",
    [
        '{"tp": "2", "kernel_inject": false}',
        '{"tp": 2, "kernel_inject": "false"}',
        '{"tp": 2, "kernel_inject": 0}',
        '{"tp": 0, "kernel_inject": false}',
        '{"tp": 2, "tp": 4, "kernel_inject": false}',
        "[2]",
    ],
)
def test_a_shard_marker_of_the_wrong_types_is_refused(tmp_path: Path, marker: str) -> None:
    """The marker `bloomperf shard` writes is read like every document: never coerced."""
    (tmp_path / "bloomperf-shard.json").write_text(marker)
    refused(*DRY, "--sharded", tmp_path, fragment="bloomperf-shard.json")
    (tmp_path / "bloomperf-shard.json").write_text('{"tp": 2, "kernel_inject": false}')
    code, _, err = run_cli(*DRY, "--sharded", tmp_path, "--dtypes", "fp32")
    assert code in (0, 2) and "bloomperf-shard.json" not in err, err
