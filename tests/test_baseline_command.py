"""`bloomperf baseline show|accept` through the CLI's main, in this process: what each prints,
where it writes, what it refuses and in which words."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf import cli
from bloomperf.render.baseline import render_baseline_json, render_baseline_text
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.baseline.folders import describe_search
from bloomperf.store.baseline.search import baseline_path_in
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from tests.builders import BLOG_BASELINE, BLOG_RESULTS, TINY, ok_cell, rss, tiny_run

Capture = pytest.CaptureFixture[str]


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    """The one line an exit 2 prints, without its prefix."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("bloomperf: error: "), err
    return lines[0].removeprefix("bloomperf: error: ")


def tiny_cell(outcome: Outcome, batch_size: int) -> CellResult:
    if outcome is Outcome.OK:
        return CellResult(
            "accelerate",
            "fp32",
            batch_size,
            outcome,
            (5.0, 5.1),
            load_time_s=1.0,
            generate_memory=rss(300),
        )
    return CellResult("accelerate", "fp32", batch_size, outcome, message=f"{outcome.value} here")


def saved(run_: RunResult, path: Path) -> Path:
    save_run(run_, path)
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with no ./baselines and a data home of the test's own."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


# ---- the parser -------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["baseline"], ["baseline", "accept"], ["baseline", "show"]])
def test_a_missing_action_or_argument_is_one_usage_line(argv: list[str], capsys: Capture) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    line = err.strip()
    assert len(err.splitlines()) == 1 and "the following arguments are required" in line
    wanted = {"baseline": "ACTION", "accept": "results", "show": "topology"}[argv[-1]]
    assert line.endswith(wanted)


@pytest.mark.parametrize("action", ["show", "accept"])
def test_each_actions_help_ends_with_the_exit_codes(action: str, capsys: Capture) -> None:
    code, out, _ = run(capsys, "baseline", action, "--help")
    assert code == 0
    assert out.rstrip().endswith(cli.EXIT_CODES.rstrip())


def test_show_offers_text_and_json_and_nothing_else(capsys: Capture) -> None:
    code, _, err = run(capsys, "baseline", "show", "8xA100-80GB", "--format", "markdown")
    assert code == 2
    assert err.endswith("error: --format: unknown value 'markdown' (valid: text, json)\n")


# ---- show -------------------------------------------------------------------------------------


@pytest.mark.parametrize("given_folder", [False, True])
def test_show_text_is_the_table_the_search_and_the_file_shown(
    given_folder: bool, home: Path, capsys: Capture
) -> None:
    folder = home / "mine"
    argv = ["baseline", "show", "8xA100-80GB"]
    if given_folder:
        folder.mkdir()
        save_baseline(load_baseline(BLOG_BASELINE), folder / BLOG_BASELINE.name)
        argv += ["--baselines", str(folder)]
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    shown = folder / BLOG_BASELINE.name if given_folder else BLOG_BASELINE.resolve()
    baseline = load_baseline(shown)
    search = describe_search(folder if given_folder else None)
    assert out == f"{render_baseline_text(baseline)}\n{search}\nshown: {shown}\n"


def test_show_json_is_the_baseline_as_json_and_nothing_more(home: Path, capsys: Capture) -> None:
    code, out, _ = run(capsys, "baseline", "show", "8xA100-80GB", "--format", "json")
    assert code == 0
    assert out == render_baseline_json(load_baseline(BLOG_BASELINE))
    json.loads(out)


def test_show_reads_the_folder_given_not_the_shipped_ones(home: Path, capsys: Capture) -> None:
    folder = home / "mine"
    folder.mkdir()
    ours = replace(load_baseline(BLOG_BASELINE), topology="2xH200-141GB", notes=("ours",))
    save_baseline(ours, folder / "ours.json")
    code, out, _ = run(capsys, "baseline", "show", "2xH200-141GB", "--baselines", str(folder))
    assert code == 0 and f"shown: {folder / 'ours.json'}" in out
    # The same topology is found nowhere else.
    code, _, err = run(capsys, "baseline", "show", "2xH200-141GB")
    assert code == 2 and "2xH200-141GB" in one_error(err)


def test_show_picks_the_model_asked_for_when_a_topology_has_two(
    home: Path, capsys: Capture
) -> None:
    folder = home / "mine"
    folder.mkdir()
    blog = load_baseline(BLOG_BASELINE)
    other = replace(blog, model="bloom-7b1", model_aliases=(), notes=("the small one",))
    save_baseline(blog, folder / "a.json")
    save_baseline(other, folder / "b.json")
    for model, file in (("bloom-7b1", "b.json"), ("bloom-176b", "a.json")):
        code, out, _ = run(
            capsys, "baseline", "show", blog.topology, "--model", model, "--baselines", str(folder)
        )
        assert code == 0 and out.endswith(f"shown: {folder / file}\n")


@pytest.mark.parametrize("given_folder", [False, True])
def test_show_of_a_file_for_another_model_names_the_option_and_the_model_it_has(
    given_folder: bool, home: Path, capsys: Capture
) -> None:
    folder = home / "mine"
    folder.mkdir()
    path = folder / "only.json"
    save_baseline(load_baseline(BLOG_BASELINE), path)
    argv = ["baseline", "show", str(path), "--model", "tiny"]
    argv += ["--baselines", str(folder)] if given_folder else []
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    search = describe_search(folder if given_folder else None)
    assert one_error(err) == (
        f"--model tiny: no baseline for topology {path} and this model "
        f"(it has one for bloom-176b); {search}"
    )
    # Any of the model's own names is accepted.
    for name in ("bloom-176b", "BLOOM-176B", *load_baseline(path).model_aliases):
        assert run(capsys, "baseline", "show", str(path), "--model", name)[0] == 0


# ---- accept -----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(list(Outcome)), min_size=1, max_size=6))
def test_accept_counts_the_cells_that_ran_or_ran_out_of_memory(outcomes: list[Outcome]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        place = Path(scratch)
        cells = tuple(tiny_cell(o, b) for b, o in enumerate(outcomes, 1))
        results = saved(tiny_run(*cells), place / "r.json")
        code = cli.main(["baseline", "accept", str(results), "--baselines", str(place / "b")])
        unfinished = any(o in (Outcome.ERROR, Outcome.TIMEOUT) for o in outcomes)
        measured = sum(o in (Outcome.OK, Outcome.OOM) for o in outcomes)
        # Nothing measured or something unfinished is refused; --force takes the rest.
        assert code == (2 if unfinished or measured == 0 else 0)
        if code == 2:
            forced = ["--force", "--allow-incomplete"]
            code = cli.main(
                ["baseline", "accept", str(results), "--baselines", str(place / "b"), *forced]
            )
            assert code == 0
        written = load_baseline(baseline_path_in(place / "b", "cpu", TINY.name))
        assert len(written.cells) == measured


def test_accept_says_what_it_wrote_and_how_many_cells(home: Path, capsys: Capture) -> None:
    cells = [tiny_cell(o, b) for b, o in enumerate([Outcome.OK, Outcome.OOM, Outcome.SKIPPED], 1)]
    results = saved(tiny_run(*cells), home / "my results.json")
    folder = home / "base lines"
    code, out, err = run(capsys, "baseline", "accept", str(results), "--baselines", str(folder))
    assert code == 0 and err == ""
    path = baseline_path_in(folder, "cpu", TINY.name)
    assert out == f"bloomperf: '{path}': accepted 2 cells from '{results}'\n"
    assert {c.batch_size for c in load_baseline(path).cells} == {1, 2}


def test_accept_refuses_unfinished_cells_unless_forced(home: Path, capsys: Capture) -> None:
    cells = [tiny_cell(Outcome.OK, 1), tiny_cell(Outcome.ERROR, 2), tiny_cell(Outcome.TIMEOUT, 4)]
    results = saved(tiny_run(*cells), home / "r.json")
    folder = home / "b"
    code, _, err = run(capsys, "baseline", "accept", str(results), "--baselines", str(folder))
    assert code == 2 and "--force" in one_error(err)
    assert not baseline_path_in(folder, "cpu", TINY.name).exists()
    code, out, _ = run(
        capsys, "baseline", "accept", str(results), "--baselines", str(folder), "--force"
    )
    assert code == 0 and "accepted 1 cells" in out
    assert [c.batch_size for c in load_baseline(baseline_path_in(folder, "cpu", "tiny")).cells] == [
        1
    ]


@pytest.mark.parametrize("why", ["incomplete", "synthetic"])
def test_accept_refuses_an_unfinished_or_synthetic_run_unless_allowed(
    why: str, home: Path, capsys: Capture
) -> None:
    good = tiny_run(tiny_cell(Outcome.OK, 1))
    bad = replace(good, complete=False) if why == "incomplete" else replace(good, synthetic="+20 %")
    results = saved(bad, home / "r.json")
    folder = home / "b"
    code, _, err = run(capsys, "baseline", "accept", str(results), "--baselines", str(folder))
    line = one_error(err)
    assert code == 2 and line.startswith(f"{results}: ") and f"--allow-{why}" in line
    assert not folder.joinpath(baseline_path_in(folder, "cpu", "tiny").name).exists()
    code, _, _ = run(
        capsys, "baseline", "accept", str(results), "--baselines", str(folder), f"--allow-{why}"
    )
    assert code == 0 and baseline_path_in(folder, "cpu", "tiny").exists()


def test_accept_merges_into_the_existing_file_whatever_its_name(
    home: Path, capsys: Capture
) -> None:
    folder = home / "b"
    first = saved(tiny_run(tiny_cell(Outcome.OK, 1)), home / "one.json")
    assert run(capsys, "baseline", "accept", str(first), "--baselines", str(folder))[0] == 0
    standard = baseline_path_in(folder, "cpu", "tiny")
    renamed = folder / "our tiny baseline.json"
    standard.rename(renamed)
    second = saved(tiny_run(tiny_cell(Outcome.OOM, 8)), home / "two.json")
    code, out, _ = run(capsys, "baseline", "accept", str(second), "--baselines", str(folder))
    assert code == 0 and f"'{renamed}'" in out
    assert not standard.exists()
    assert {c.batch_size for c in load_baseline(renamed).cells} == {1, 8}


def test_accept_of_several_files_adds_each_in_turn(home: Path, capsys: Capture) -> None:
    folder = home / "b"
    files = [saved(tiny_run(tiny_cell(Outcome.OK, b)), home / f"{b}.json") for b in (1, 2, 4)]
    code, out, _ = run(capsys, "baseline", "accept", *map(str, files), "--baselines", str(folder))
    assert code == 0 and len(out.splitlines()) == 3
    assert {c.batch_size for c in load_baseline(baseline_path_in(folder, "cpu", "tiny")).cells} == {
        1,
        2,
        4,
    }
    # Accepting into the folder again: it exists, and is merged into, not refused.
    assert run(capsys, "baseline", "accept", str(files[0]), "--baselines", str(folder))[0] == 0


def test_accept_refuses_a_run_of_another_model_than_the_baseline_found(
    home: Path, capsys: Capture
) -> None:
    folder = home / "b"
    folder.mkdir()
    blog = load_baseline(BLOG_BASELINE)
    save_baseline(replace(blog, model="tiny", model_aliases=()), folder / "x.json")
    results = saved(replace(tiny_run(ok_cell(10.0)), topology=blog.topology), home / "r.json")
    code, _, _ = run(capsys, "baseline", "accept", str(results), "--baselines", str(folder))
    assert code == 0  # found by topology and model: merged into x.json
    assert len(list(folder.iterdir())) == 1
    other = saved(replace(tiny_run(ok_cell(10.0)), topology="4xA100-80GB"), home / "other.json")
    assert run(capsys, "baseline", "accept", str(other), "--baselines", str(folder))[0] == 0
    assert len(list(folder.iterdir())) == 2


@pytest.mark.parametrize("named", ["baselines", "bloomperf/baselines"])
def test_accept_never_writes_into_the_shipped_folder(
    named: str, monkeypatch: pytest.MonkeyPatch, capsys: Capture
) -> None:
    from tests.builders import REPO

    monkeypatch.chdir(REPO)
    code, _, err = run(capsys, "baseline", "accept", str(BLOG_RESULTS), "--baselines", named)
    assert code == 2
    assert one_error(err) == (
        f"--baselines {named}: is the baselines shipped inside the bloomperf package; "
        "accept into another folder (the default is your user folder)"
    )


def test_accept_creates_the_folder_given_but_not_its_parents(home: Path, capsys: Capture) -> None:
    results = str(BLOG_RESULTS)
    deep = home / "no" / "such" / "b"
    code, _, err = run(capsys, "baseline", "accept", results, "--baselines", str(deep))
    assert code == 2
    assert one_error(err) == f"--baselines {deep}: cannot create: No such file or directory"
    # The default folder is made with its parents.
    code, out, _ = run(capsys, "baseline", "accept", results)
    assert code == 0 and str(home / "data" / "bloomperf" / "baselines") in out


@pytest.mark.parametrize("data_home", ["absolute", "relative", "unset"])
def test_a_default_folder_that_cannot_be_made_names_where_it_came_from(
    data_home: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capture
) -> None:
    blocker = home / "a file"
    blocker.write_text("")
    if data_home != "absolute":
        # XDG says a relative data home is ignored: the default is under $HOME, as unset.
        if data_home == "relative":
            monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
        else:
            monkeypatch.delenv("XDG_DATA_HOME")
        monkeypatch.setenv("HOME", str(blocker))
        folder = blocker / ".local" / "share" / "bloomperf" / "baselines"
        named = f"the default baselines folder {folder}"
    else:
        monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
        folder = blocker / "bloomperf" / "baselines"
        named = f"XDG_DATA_HOME={blocker}: the default baselines folder {folder}"
    code, _, err = run(capsys, "baseline", "accept", str(BLOG_RESULTS))
    assert code == 2
    assert one_error(err) == f"{named}: cannot create: Not a directory"
