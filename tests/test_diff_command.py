"""`bloomperf diff` run in process on files written here: two results (before and after) with
what changed between them in each format, the tolerance between two results, each refusal
naming the file it is about, and GITHUB_OUTPUT never one of the inputs. Exit codes and output
are read as a user reads them; the comparison's own rules are tested elsewhere
(test_compare*.py, test_gate*.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from tests.builders import CPU_ENVIRONMENT, rss, tiny_run

MS = 20.0


def cell(ms: float, batch_size: int = 1, outcome: Outcome = Outcome.OK) -> CellResult:
    samples = (ms * 0.99, ms, ms * 1.01) if outcome == Outcome.OK else ()
    return CellResult(
        "accelerate",
        "fp32",
        batch_size,
        outcome,
        samples,
        load_time_s=1.0 if outcome == Outcome.OK else None,
        generate_memory=rss(300.0) if outcome == Outcome.OK else None,
        message="" if outcome == Outcome.OK else "boom",
    )


def saved(folder: Path, name: str, run: RunResult) -> str:
    path = folder / name
    save_run(run, path)
    return str(path)


def pair(folder: Path, factor: float = 1.0, **after: object) -> tuple[str, str]:
    """A before and an after run of two cells, the after ``factor`` times as slow."""
    before = tiny_run(cell(MS), cell(MS, 2))
    later = replace(tiny_run(cell(MS * factor), cell(MS * factor, 2)), **after)  # type: ignore[arg-type]
    return saved(folder, "before.json", before), saved(folder, "after.json", later)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


UPGRADED = {**CPU_ENVIRONMENT, "packages": {"torch": "2.14.0+cpu"}}


def test_two_results_end_with_what_changed_between_them_in_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = pair(tmp_path, environment=UPGRADED)
    code, out, _ = run(capsys, before, after)
    assert code == 0
    assert out.endswith("\nWhat changed between the runs:\n  torch 2.13.0+cpu → 2.14.0+cpu\n")
    assert not out.endswith("\n\n") and "XX" not in out
    same, out_same, _ = run(capsys, before, before)
    assert same == 0
    assert out_same.endswith(
        "\nWhat changed between the runs:\n"
        "  nothing recorded differs (commit, driver, CUDA, NCCL, packages)\n"
    )


def test_two_results_in_markdown_list_what_changed_under_a_heading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = {**UPGRADED, "packages": {"torch": "2.14.0+cpu", "numpy": "2.3.0"}}
    before, after = pair(tmp_path, environment=two)
    code, out, _ = run(capsys, before, after, "--format", "markdown")
    assert code == 0
    assert out.endswith(
        "\n### What changed between the runs\n\n"
        "- numpy none → 2.3.0\n"
        "- torch 2.13.0+cpu → 2.14.0+cpu\n"
    )
    # JSON is the comparison alone: one document, nothing after it.
    code, out, _ = run(capsys, before, after, "--format", "json")
    assert code == 0 and out.rstrip().endswith("}") and "What changed" not in out


@pytest.mark.parametrize(
    ("tolerance", "factor", "code"),
    [(None, 1.5, 0), ("0.2", 1.1, 0), ("0.05", 1.1, 1), ("0.05", 0.9, 0), ("0.2", 1.5, 1)],
)
def test_between_two_cpu_results_time_is_judged_only_with_a_tolerance(
    tolerance: str | None,
    factor: float,
    code: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a CPU no ms/token tolerance is set between two results unless given: then a
    slowdown past it fails, one within it or a speed-up passes."""
    before, after = pair(tmp_path, factor)
    argv = [before, after] + (["--tolerance", tolerance] if tolerance else [])
    found, out, err = run(capsys, *argv)
    assert found == code, out + err
    assert "regressed" in out if code else "regressed" not in out


def test_exactly_two_results_without_a_baseline_are_a_diff_and_three_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = pair(tmp_path)
    assert run(capsys, before, after)[0] == 0
    code, _, err = run(capsys, before, after, before)
    assert code == 2
    assert err.strip() == (
        "bloomperf: error: diff: give --baseline to compare several result files, or exactly "
        "two to diff them"
    )


@pytest.mark.parametrize("which", ["before", "after"])
def test_synthetic_results_are_refused_naming_the_file_unless_allowed(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = pair(tmp_path)
    path = before if which == "before" else after
    save_run(replace(tiny_run(cell(MS), cell(MS, 2)), synthetic="slowdown 10%"), Path(path))
    code, _, err = run(capsys, before, after)
    assert code == 2
    assert err.strip() == (
        f"bloomperf: error: {path}: synthetic results (slowdown 10%); --allow-synthetic uses "
        "them anyway"
    )
    assert run(capsys, before, after, "--allow-synthetic")[0] == 0


def test_a_before_that_measured_nothing_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = saved(tmp_path, "failed.json", tiny_run(cell(0, 1, Outcome.ERROR)))
    after = saved(tmp_path, "after.json", tiny_run(cell(MS)))
    code, _, err = run(capsys, before, after)
    assert code == 2
    assert err.strip() == (
        f'bloomperf: error: {before}: the "before" results measured no cell (1 cells, none ran '
        "or ran out of memory); nothing to compare against"
    )


def test_a_before_of_another_workload_is_refused_naming_it_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = saved(tmp_path, "b.json", tiny_run(cell(MS), new_tokens=50))
    after = saved(tmp_path, "a.json", tiny_run(cell(MS)))
    code, _, err = run(capsys, before, after)
    assert code == 2
    line = err.strip()
    assert line.startswith(f"bloomperf: error: {before}: cannot judge these results: ")
    assert line.endswith(" (--allow-no-baseline reports them unjudged)")
    assert run(capsys, before, after, "--allow-no-baseline")[0] == 0


def test_a_before_with_failed_cells_is_still_a_baseline_for_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A "before" run need not be clean to judge by: its failed cell judges nothing, its
    measured one still judges the after's (accepted as a baseline by force)."""
    before = saved(tmp_path, "b.json", tiny_run(cell(MS), cell(0, 2, Outcome.ERROR)))
    after = saved(tmp_path, "a.json", tiny_run(cell(MS * 1.5), cell(MS, 2)))
    code, out, err = run(capsys, before, after, "--tolerance", "0.05")
    assert code == 1, out + err
    assert "accelerate-fp32-bs1" in out and "regressed" in out


@pytest.mark.parametrize("input_index", [0, 1])
def test_github_output_that_is_an_input_is_refused_before_anything_is_written(
    input_index: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, after = pair(tmp_path)
    target = (before, after)[input_index]
    kept = Path(target).read_bytes()
    monkeypatch.setenv("GITHUB_OUTPUT", target)
    code, out, err = run(capsys, before, after, "--format", "github")
    assert code == 2 and out == ""
    assert err.startswith("bloomperf: error: ") and "GITHUB_OUTPUT" in err
    assert Path(target).read_bytes() == kept
    # Elsewhere it is written, and only the github format writes it.
    outputs = tmp_path / "outputs"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    assert run(capsys, before, after)[0] == 0 and not outputs.exists()
    assert run(capsys, before, after, "--format", "github")[0] == 0
    assert "verdict=pass" in outputs.read_text()


def test_what_changed_in_text_is_one_indented_line_per_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = {**UPGRADED, "python": "3.12.1", "packages": {"torch": "2.14.0+cpu"}}
    before, after = pair(tmp_path, environment=two)
    code, out, _ = run(capsys, before, after)
    assert code == 0
    section = out[out.index("\nWhat changed between the runs:\n") :]
    lines = section.splitlines()[2:]
    assert len(lines) == 2 and all(line.startswith("  ") for line in lines), section
    assert "  torch 2.13.0+cpu → 2.14.0+cpu" in lines


def test_history_follows_the_comparison_in_its_format_and_json_leaves_it_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.builders import BLOG_RESULTS

    root = tmp_path / "root"
    assert cli.main(["history", "merge", str(BLOG_RESULTS), "--history", str(root)]) == 0
    capsys.readouterr()
    assert cli.main(["history", "changes", "--history", str(root)]) == 0
    changes = capsys.readouterr().out
    for fmt, heading in (("text", "History: 1 night"), ("markdown", "### History: 1 night")):
        plain = run(capsys, str(BLOG_RESULTS), "--format", fmt)
        with_history = run(capsys, str(BLOG_RESULTS), "--format", fmt, "--history", str(root))
        assert plain[0] == with_history[0] == 0
        added = with_history[1].removeprefix(plain[1])
        assert added != with_history[1] and added.startswith(f"\n{heading} "), added
        if fmt == "text":
            assert added == "\n" + changes
        else:
            assert added.endswith("\n\nNo persistent change in any cell.\n"), added
    plain = run(capsys, str(BLOG_RESULTS), "--format", "json")
    assert run(capsys, str(BLOG_RESULTS), "--format", "json", "--history", str(root)) == plain


def test_the_github_format_ends_with_its_annotations_and_no_blank_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs"))
    before, after = pair(tmp_path, 1.5)
    code, out, _ = run(capsys, before, after, "--format", "github", "--tolerance", "0.05")
    assert code == 1
    assert out.splitlines()[-1].startswith("::error ") and out.endswith("\n")
    assert not out.endswith("\n\n") and "XX" not in out


def test_a_baseline_file_named_as_github_output_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.builders import BLOG_BASELINE, BLOG_RESULTS

    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(BLOG_BASELINE.read_bytes())
    monkeypatch.setenv("GITHUB_OUTPUT", str(baseline))
    argv = [str(BLOG_RESULTS), "--baseline", str(baseline), "--format", "github"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err == (
        f"bloomperf: error: GITHUB_OUTPUT: {baseline} is also an input ({baseline}); refusing "
        "to overwrite it\n"
    )
    assert baseline.read_bytes() == BLOG_BASELINE.read_bytes()


def test_synthetic_results_against_a_baseline_are_refused_naming_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bloomperf.store.results.files import read_results
    from tests.builders import BLOG_BASELINE, BLOG_RESULTS

    first = tmp_path / "one.json"
    save_run(replace(read_results(BLOG_RESULTS), synthetic="slowdown 10%"), first)
    second = tmp_path / "two.json"
    save_run(read_results(BLOG_RESULTS), second)
    code, _, err = run(capsys, str(first), str(second), "--baseline", str(BLOG_BASELINE))
    assert code == 2
    assert err.startswith(f"bloomperf: error: {first}, {second}: synthetic results (")


def test_between_two_results_the_before_file_is_the_baseline_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    before, after = pair(tmp_path)
    code, out, _ = run(capsys, before, after, "--format", "json")
    assert code == 0 and json.loads(out)["baseline"] == before
    code, out, _ = run(capsys, before, after)
    assert code == 0 and before in out and after not in out.replace(before, "")


def test_the_text_fits_a_narrower_terminal_more_narrowly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.builders import BLOG_RESULTS

    widest = {}
    for columns in (60, 100):
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, _ = run(capsys, str(BLOG_RESULTS))
        assert code == 0
        widest[columns] = max(len(line) for line in out.splitlines())
        assert widest[columns] <= 100
    assert widest[60] < widest[100]


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ("0", ""),
        ("0.999", ""),
        ("1", "argument --tolerance: must be a fraction in [0, 1), found 1"),
        ("1.5", "argument --tolerance: must be a fraction in [0, 1), found 1.5"),
        ("-0.01", "argument --tolerance: must be a fraction in [0, 1), found -0.01"),
        ("x", "argument --tolerance: not a number: 'x'"),
    ],
)
def test_the_tolerance_is_a_fraction_from_zero_up_to_one(
    value: str, refusal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = pair(tmp_path)
    code, _, err = run(capsys, before, after, f"--tolerance={value}")
    if refusal:
        assert code == 2 and err == f"bloomperf diff: error: {refusal}\n", err
    else:
        assert code == 0, err
