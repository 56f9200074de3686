"""`bloomperf diff --format github`: annotations per cell and job outputs, through the real CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from tests.builders import REGRESSED_RUN


def annotations(out: str, level: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"::{level} ")]


def test_a_regressed_cell_is_one_error_annotation_and_the_outputs_say_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = tmp_path / "github_output"
    outputs.write_text("earlier=1\n")
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    code = cli.main(["diff", str(REGRESSED_RUN), "--format", "github"])
    out = capsys.readouterr().out
    assert code == 1
    assert "28 cells: 22 same, 1 regressed, 5 expected-oom; FAILED" in out  # the text first
    assert annotations(out, "error") == [
        f"::error file={REGRESSED_RUN},title=bloomperf accelerate-bf16-bs8 regressed::"
        "accelerate-bf16-bs8: ms/token regressed: measured 34.96 ms vs expected 31.78 ms ±5%25, "
        "ratio 1.100 (95%25 CI 1.098–1.102)"
    ]
    assert annotations(out, "warning") == []
    assert outputs.read_text().splitlines() == [
        "earlier=1",
        "verdict=fail",
        "cells=28",
        "failed=1",
        "same=22",
        "regressed=1",
        "expected-oom=5",
    ]


def test_doubtful_cells_are_warnings_and_failures_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    blog_run: RunResult,
) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    run = blog_run
    oom = run.with_cell(CellResult("ds-inference", "fp16", 1, Outcome.OOM, message="OOM"))
    path = tmp_path / "oom, 1.json"
    save_run(oom, path)
    assert cli.main(["diff", str(path), "--format", "github"]) == 1
    errors = annotations(capsys.readouterr().out, "error")
    assert len(errors) == 1
    assert errors[0].startswith(
        f"::error file={str(path).replace(',', '%2C')},title=bloomperf ds-inference-fp16-bs1 "
        "unexpected-oom::ds-inference-fp16-bs1: unexpected OOM"
    )
    h100 = tmp_path / "h100.json"
    save_run(replace(run, topology="8xH100-SXM5-80GB"), h100)
    assert cli.main(["diff", str(h100), "--format", "github"]) == 1
    errors = annotations(capsys.readouterr().out, "error")
    assert len(errors) == 1 and "title=bloomperf%3A nothing judged::nothing judged" in errors[0]
    assert cli.main(["diff", str(h100), "--format", "github", "--allow-no-baseline"]) == 0
    out = capsys.readouterr().out
    warnings = annotations(out, "warning")
    assert len(warnings) == 28 and annotations(out, "error") == []
    assert "title=bloomperf accelerate-bf16-bs1 no-baseline::" in warnings[0]
