"""Gate integrity: exit codes keep their meaning whatever the input.

0 pass, 1 a judged failure (nothing measured included), 2 bad input in one line, 3 an internal
error with its traceback saved; never a traceback with status 1. Driven through the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from bloomperf import cli
from bloomperf.analysis.compare import compare_metric
from bloomperf.analysis.stats import REGRESSED
from bloomperf.cli import diff
from tests.builders import BASELINES, BLOG_BASELINE, BLOG_RESULTS


def bloomperf(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *fragments: str) -> None:
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def blog() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(BLOG_RESULTS.read_text())
    return data


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ---- exit codes ----------------------------------------------------------------------------


def test_an_internal_error_is_one_line_exit_3_with_the_traceback_saved(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("boom\nsecond line \x1b[31mred")

    monkeypatch.setattr(diff, "diff", broken)
    code, out, err = bloomperf(capsys, "diff", BLOG_RESULTS)
    assert code == 3 and out == ""
    one_line(err, "bloomperf: internal error: ZeroDivisionError: boom second line red")
    assert "\x1b" not in err
    saved = Path(err.rsplit("traceback saved to ", 1)[1].rstrip(")\n"))
    assert "Traceback" in saved.read_text() and "ZeroDivisionError" in saved.read_text()
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    saved.unlink()


def test_every_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ([], ["diff"], ["baseline", "accept"], ["run"], ["report"]):
        code, out, _ = bloomperf(capsys, *command, "--help")
        assert code == 0
        assert "3  internal error" in out and "2  bad input or usage" in out, command


# ---- nothing measured, missing or duplicated input ------------------------------------------


def test_an_incomplete_or_empty_run_fails_the_gate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    interrupted = write(tmp_path / "interrupted.json", {**blog(), "complete": False})
    code, out, _ = bloomperf(capsys, "diff", interrupted)
    assert code == 1 and "incomplete run: the results say the run did not finish" in out
    assert bloomperf(capsys, "diff", interrupted, "--allow-incomplete")[0] == 0

    empty = write(tmp_path / "empty.json", {**blog(), "complete": False, "cells": []})
    code, out, _ = bloomperf(capsys, "diff", empty)
    assert code == 1 and "nothing measured: 0 cells in the results" in out
    skipped = {**blog(), "cells": [{**c, "outcome": "skipped"} for c in blog()["cells"]]}
    for cell in skipped["cells"]:
        cell.update(samples_ms_per_token=[], load_time_s=None)
    code, out, _ = bloomperf(capsys, "diff", write(tmp_path / "skipped.json", skipped))
    assert code == 1 and "nothing measured: 28 cells in the results, none ran" in out
    code, out, _ = bloomperf(capsys, "diff", empty, "--format", "json")
    assert code == 1 and json.loads(out)["incomplete"].startswith("nothing measured")
    # Accepting it would write an empty baseline: refused as well.
    code, _, err = bloomperf(capsys, "baseline", "accept", empty, "--baselines", tmp_path / "b")
    assert code == 2
    one_line(err, "nothing measured")
    assert list((tmp_path / "b").iterdir()) == []


def test_a_missing_baselines_folder_is_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baselines", tmp_path / "nope")
    assert code == 2 and out == ""
    one_line(err, "--baselines:", "nope is not a folder")


def test_duplicate_cells_are_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = blog()
    data["cells"].append(data["cells"][0])
    code, _, err = bloomperf(capsys, "diff", write(tmp_path / "dup.json", data))
    assert code == 2
    one_line(err, "cell accelerate-bf16-bs1 appears twice")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("samples_ms_per_token", [0.0, 1.0], "must be a positive measured figure, found 0"),
        ("samples_ms_per_token", [-1.0], "out of range (-1)"),
        (
            "samples_ms_per_token",
            [5e-324],
            "must be a positive measured figure, found 4.94066e-324",
        ),
        ("samples_ms_per_token", [1e400], "out of range (inf)"),
        ("samples_ms_per_token", [10**400], "out of range (too large)"),
        ("load_time_s", 0, "must be a positive measured figure"),
    ],
)
def test_broken_measurements_are_refused_on_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str, value: Any, message: str
) -> None:
    data = blog()
    data["cells"][0][field] = value
    text = json.dumps(data).replace("Infinity", "1e400")  # what json.dumps makes of 1e400
    code, _, err = bloomperf(capsys, "diff", write(tmp_path / "r.json", text))
    assert code == 2
    one_line(err, "r.json cell 0", message)


def test_a_zero_in_a_baseline_is_refused_not_divided_by(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    baseline = json.loads(BLOG_BASELINE.read_text())
    first_ok = next(c for c in baseline["cells"] if c["outcome"] == "ok")
    first_ok["ms_per_token"] = 0
    write(folder / "b.json", baseline)
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baselines", folder)
    assert code == 2
    one_line(err, "ms_per_token' must be a positive measured figure, found 0")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf / nan inside the bootstrap
def test_an_unbounded_change_is_never_same() -> None:
    verdict = compare_metric("ms_per_token", [1.0, 1.1, 1.2], 1e-310, 0.05)
    assert verdict.status == REGRESSED


# ---- names that become paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    "topology",
    ["../../escaped", "/tmp/abs", "a/b", "", "new\nline", "nul\x00byte", ".hidden", "é"],
)
def test_accept_never_writes_outside_the_baselines_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, topology: str
) -> None:
    folder = tmp_path / "deep" / "baselines"
    folder.mkdir(parents=True)
    results = write(tmp_path / "r.json", {**blog(), "topology": topology})
    code, _, err = bloomperf(capsys, "baseline", "accept", results, "--baselines", folder)
    assert code == 2
    one_line(err, "is not a plain name")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["baselines", "deep", "r.json"]


def test_a_hub_model_name_is_a_file_name_inside_the_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = blog()
    data["model"]["name"] = "bigscience/bloom"
    results = write(tmp_path / "r.json", data)
    code, _, err = bloomperf(capsys, "baseline", "accept", results, "--baselines", tmp_path / "b")
    assert code == 0, err
    assert [p.name for p in (tmp_path / "b").iterdir()] == [
        "8xA100-SXM4-80GB.bigscience~sbloom.json"  # "--" would also be org--bloom's name
    ]
    data["model"]["name"] = "bigscience/../../x"
    code, _, err = bloomperf(capsys, "diff", write(tmp_path / "r.json", data))
    assert code == 2
    one_line(err, "model name 'bigscience/../../x' is not a plain name")


def test_run_refuses_to_write_its_results_among_the_baselines(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    baseline = (BASELINES / "cpu.tiny.json").read_text()
    (folder / "cpu.tiny.json").write_text(baseline)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bloomperf", "run", "--no-lock", "--baselines", str(folder)),
            *("--output", str(folder / "cpu.tiny.json"), "--batch-sizes", "1", "--dtypes", "fp32"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    one_line(done.stderr, "is inside the baselines folder")
    assert (folder / "cpu.tiny.json").read_text() == baseline


# ---- bounded reading -------------------------------------------------------------------------


def test_a_fifo_a_device_and_a_folder_are_refused_without_hanging(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    result: list[tuple[int, str, str]] = []
    reader = threading.Thread(target=lambda: result.append(bloomperf(capsys, "diff", fifo)))
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive():  # unblock the reader before failing
        with open(fifo, "w"):
            pass
        reader.join()
        pytest.fail("reading a FIFO blocked")
    code, _, err = result[0]
    assert code == 2
    one_line(err, "is not a regular file")
    for path, message in (("/dev/zero", "is not a regular file"), (tmp_path, "is a directory")):
        code, _, err = bloomperf(capsys, "baseline", "show", path)
        assert code == 2
        one_line(err, message)


def test_inputs_over_the_size_limit_or_too_deep_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLOOMPERF_MAX_INPUT_BYTES", "1000")
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS)
    assert code == 2
    one_line(err, "over the 1000-byte input limit (BLOOMPERF_MAX_INPUT_BYTES)")
    monkeypatch.setenv("BLOOMPERF_MAX_INPUT_BYTES", "lots")
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS)
    assert code == 2
    one_line(err, "BLOOMPERF_MAX_INPUT_BYTES: must be a positive number of bytes")
    monkeypatch.delenv("BLOOMPERF_MAX_INPUT_BYTES")
    data = blog()
    data["environment"] = json.loads("[" * 100 + "]" * 100)
    code, _, err = bloomperf(capsys, "diff", write(tmp_path / "deep.json", data))
    assert code == 2
    one_line(err, "JSON nested too deeply (over 64 levels)")


# ---- output -------------------------------------------------------------------------------


def test_json_output_is_strict_and_messages_carry_no_escapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = blog()
    data["cells"][0].update(outcome="error", samples_ms_per_token=[], load_time_s=None)
    data["cells"][0]["message"] = "worker died \x1b[2J\x1b]0;owned\x07\x1b[31mred"
    results = write(tmp_path / "r.json", data)
    code, out, _ = bloomperf(capsys, "diff", results)
    assert code == 1 and "worker died red" in out and "\x1b" not in out
    code, out, _ = bloomperf(capsys, "diff", results, "--format", "markdown")
    assert code == 1 and "\x1b" not in out

    def strict(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    code, out, _ = bloomperf(capsys, "diff", results, "--format", "json")
    assert json.loads(out, parse_constant=strict)["failed"] is True


def test_a_report_never_overwrites_its_own_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    source = out / "report.md"  # a results file that happens to sit where the report goes
    source.write_text(BLOG_RESULTS.read_text())
    code, _, err = bloomperf(capsys, "report", source, "--out-dir", out)
    assert code == 2
    one_line(err, "--out-dir:", "report.md is also an input", "refusing to overwrite it")
    assert source.read_text() == BLOG_RESULTS.read_text()
    assert [p.name for p in out.iterdir()] == ["report.md"]


# ---- options: empty values, sizes, synthetic slowdowns ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-sizes", ""], "--batch-sizes: is empty"),
        (["--backends="], "--backends: is empty"),
        (["--memory-limit", "0.5b"], "'0.5b' is less than one byte"),
        (["--memory-limit", "1e999GiB"], "--memory-limit: must be positive, got 1e999GiB"),
        (["--memory-limit", "2000000TiB"], "is more than 1152921504606846976 bytes"),
        (["--offload-folder", "/etc/passwd"], "--offload-folder: /etc/passwd exists and is not"),
        (["--offload-folder", "/etc/passwd/x"], "/etc/passwd is not a writable folder"),
        (["--nvme-path", "/etc/passwd"], "--nvme-path: /etc/passwd exists and is not a folder"),
    ],
)
def test_careless_option_values_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = bloomperf(capsys, "run", "--dry-run", "--no-lock", *argv)
    assert code == 2
    one_line(err, message)


def test_synthetic_results_are_marked_and_refused_unless_allowed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bloomperf.harness.options import resolve_options
    from bloomperf.harness.session import Session
    from bloomperf.store.results.files import read_results

    options = resolve_options(
        {"slowdown_percent": "10", "output": str(tmp_path / "r.json")}, env={}
    )
    Session.prepare(options)  # writes the (empty) results file at once
    capsys.readouterr()  # a cold model cache prints its build first: not the diff's output
    assert (
        read_results(tmp_path / "r.json").synthetic
        == "a 10 % slowdown injected (--slowdown-percent)"
    )

    synthetic = write(tmp_path / "s.json", {**blog(), "synthetic": "a 10 % slowdown injected"})
    code, _, err = bloomperf(capsys, "diff", synthetic)
    assert code == 2
    one_line(err, "s.json: synthetic results (a 10 % slowdown injected); --allow-synthetic")
    assert bloomperf(capsys, "diff", synthetic, "--allow-synthetic")[0] == 0
    assert bloomperf(capsys, "diff", BLOG_RESULTS, synthetic)[0] == 2  # before/after too
    code, _, err = bloomperf(capsys, "baseline", "accept", synthetic, "--baselines", tmp_path / "b")
    assert code == 2
    one_line(err, "synthetic results")
    assert list((tmp_path / "b").iterdir()) == []
