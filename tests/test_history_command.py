"""`bloomperf history add|changes|merge|publish` through the CLI's main, in this process: each
action's line, the nights a merge names, each topology's changes under its heading, and the one
way publish takes its history."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.render.history.changes import history_section
from bloomperf.store.history.nights import night_file
from bloomperf.store.results.codec import save_run
from tests.builders import night, night_run, ok_cell

Capture = pytest.CaptureFixture[str]


def run(capsys: Capture, *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def results_of(
    folder: Path, days: range, topology: str = "8xA100-SXM4-80GB", step_at: int = 99
) -> list[Path]:
    """One results file per night of ``days``, as a runner uploads them: about 50 ms/token,
    4 % slower from night ``step_at`` on."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in days:
        path = folder / f"{topology}-{i}.json"
        save_run(
            replace(
                night_run(
                    night(i), [ok_cell((50.0 + i % 2 * 0.1) * (1.04 if i >= step_at else 1.0))]
                ),
                topology=topology,
            ),
            path,
        )
        paths.append(path)
    return paths


def test_add_says_where_the_night_went_and_that_a_second_add_is_a_no_op(
    tmp_path: Path, capsys: Capture
) -> None:
    (result,) = results_of(tmp_path / "r", range(1))
    history = tmp_path / "my history"
    path = night_file(history, night(0))
    code, out, err = run(capsys, "history", "add", result, "--history", history)
    assert (code, err) == (0, "")
    assert out == f"bloomperf: {result}: added as '{path}'\n"
    code, out, _ = run(capsys, "history", "add", result, "--history", history)
    assert code == 0 and out == f"bloomperf: {result}: already in the history as '{path}'\n"


def test_add_and_changes_default_to_the_history_folder_here_and_take_the_old_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capture
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = results_of(tmp_path / "r", range(2))
    code, out, err = run(capsys, "history", "add", first)
    assert (code, err) == (0, "")
    assert out.endswith(f"added as {Path('history') / f'{night(0)}.json'}\n")
    code, out, err = run(capsys, "history", "add", second, "--dir", "history")
    assert code == 0 and err == "bloomperf: --dir is deprecated; use --history\n"
    assert sorted(p.name for p in (tmp_path / "history").iterdir()) == [
        f"{night(0)}.json",
        f"{night(1)}.json",
    ]
    code, out, _ = run(capsys, "history", "changes")
    assert code == 0 and out == history_section(Path("history"), "text")[0]


def test_add_files_the_night_given_instead_of_the_runs_own(tmp_path: Path, capsys: Capture) -> None:
    (result,) = results_of(tmp_path / "r", range(1))
    code, out, _ = run(
        capsys, "history", "add", result, "--history", tmp_path / "h", "--date", "2026-11-02"
    )
    assert code == 0 and out.endswith(f"{tmp_path / 'h' / '2026-11-02.json'}\n")
    code, _, err = run(capsys, "history", "add", result, "--history", tmp_path / "h", "--date", "x")
    assert code == 2 and "--date" in err


@pytest.mark.parametrize("new", [1, 4, 5, 7])
@pytest.mark.parametrize("old", [0, 2])
def test_merge_names_the_nights_it_added_the_first_and_last_of_many(
    new: int, old: int, tmp_path: Path, capsys: Capture
) -> None:
    root = tmp_path / "root"
    before = results_of(tmp_path / "before", range(old))
    if before:
        assert run(capsys, "history", "merge", *before, "--history", root)[0] == 0
    sources = results_of(tmp_path / "runner", range(old + new))
    code, out, _ = run(capsys, "history", "merge", *sources, "--history", root)
    assert code == 0
    names = [f"{night(i)}.json" for i in range(old, old + new)]
    shown = ", ".join(names) if new <= 4 else f"{names[0]}, …, {names[-1]}"
    assert out == (
        f"bloomperf: {root / '8xA100-SXM4-80GB'}: {new} night(s) added ({shown}), "
        f"{old} already there\n"
    )


def test_a_merge_that_adds_nothing_says_so(tmp_path: Path, capsys: Capture) -> None:
    sources = results_of(tmp_path / "r", range(2))
    root = tmp_path / "root"
    assert run(capsys, "history", "merge", *sources, "--history", root)[0] == 0
    code, out, _ = run(capsys, "history", "merge", *sources, "--history", root)
    assert code == 0
    folder = root / "8xA100-SXM4-80GB"
    assert out == f"bloomperf: {folder}: 0 night(s) added (nothing new), 2 already there\n"


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_changes_of_a_merged_root_are_each_topologys_under_its_name(
    fmt: str, tmp_path: Path, capsys: Capture
) -> None:
    root = tmp_path / "root"
    for topology in ("8xA100-SXM4-80GB", "4xA100-SXM4-80GB"):
        sources = results_of(tmp_path / topology, range(3), topology)
        assert run(capsys, "history", "merge", *sources, "--history", root)[0] == 0
    code, out, _ = run(capsys, "history", "changes", "--history", root, "--format", fmt)
    assert code == 0
    heading = "## " if fmt == "markdown" else ""
    expected = "".join(
        f"{heading}{name}:\n" + history_section(root / name, fmt)[0]
        for name in ("4xA100-SXM4-80GB", "8xA100-SXM4-80GB")
    )
    assert out == expected
    # One folder of nights: its changes alone, under no heading.
    code, out, _ = run(
        capsys, "history", "changes", "--history", root / "4xA100-SXM4-80GB", "--format", fmt
    )
    assert out == history_section(root / "4xA100-SXM4-80GB", fmt)[0]


def test_changes_passes_its_detection_settings_on(tmp_path: Path, capsys: Capture) -> None:
    root = tmp_path / "root"
    sources = results_of(tmp_path / "r", range(8), step_at=4)
    assert run(capsys, "history", "merge", *sources, "--history", root)[0] == 0
    folder = root / "8xA100-SXM4-80GB"
    given_ = ["--change-tolerance", "0.01", "--window", "2", "--confirm", "2"]
    code, out, _ = run(capsys, "history", "changes", "--history", folder, *given_)
    settings_ = {"tolerance": 0.01, "window": 2, "confirm": 2}
    assert code == 0 and out == history_section(folder, "text", **settings_)[0]
    # The 4 % step is a change at these settings, and none at the defaults.
    assert "1 change(s)" in out
    assert "0 change(s)" in run(capsys, "history", "changes", "--history", folder)[1]


@pytest.mark.parametrize("argv", [["history"], ["history", "add"], ["history", "merge"]])
def test_a_missing_action_or_argument_is_one_usage_line(argv: list[str], capsys: Capture) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    wanted = {"history": "ACTION", "add": "result", "merge": "SRC, --history/--into"}[argv[-1]]
    assert err.rstrip().endswith(f"the following arguments are required: {wanted}")


@pytest.fixture
def history(tmp_path: Path, capsys: Capture) -> Path:
    root = tmp_path / "root"
    assert (
        run(capsys, "history", "merge", *results_of(tmp_path / "r", range(2)), "--history", root)[0]
        == 0
    )
    return root


def test_publish_says_where_the_site_is_and_what_it_holds(
    history: Path, tmp_path: Path, capsys: Capture
) -> None:
    site = tmp_path / "site"
    code, out, err = run(capsys, "history", "publish", "--history", history, "--out-dir", site)
    assert code == 0 and "deprecated" not in err
    pages = sorted(p for p in site.rglob("*.html") if p.name != "index.html")
    assert out.startswith(f"bloomperf: site written to {site / 'index.html'}: ")
    assert out.endswith(" report(s)\n") and "trend pages" in out
    assert (site / "index.html").exists() and pages


def test_publish_passes_its_detection_settings_and_baselines_on(
    tmp_path: Path, capsys: Capture
) -> None:
    root = tmp_path / "root"
    sources = results_of(tmp_path / "r", range(8), step_at=4)
    assert run(capsys, "history", "merge", *sources, "--history", root)[0] == 0
    empty = tmp_path / "no baselines"
    empty.mkdir()
    sites = {}
    for name, extra in {
        "defaults": [],
        "settings": ["--change-tolerance", "0.01", "--window", "2", "--confirm", "2"],
        "baselines": ["--baselines", empty],
    }.items():
        argv = ["history", "publish", "--history", root, "--out-dir", tmp_path / name, *extra]
        assert run(capsys, *argv)[0] == 0
        report = tmp_path / name / "8xA100-SXM4-80GB" / "report" / "report.md"
        sites[name] = ((tmp_path / name / "index.html").read_text(), report.read_text())
    # The 4 % step is a change at these settings only.
    assert "<td>none</td>" in sites["defaults"][0] and "1 worse" in sites["settings"][0]
    # The night's report is judged against the baselines found in the folder given.
    assert "(baseline: 8xA100-SXM4-80GB.bloom-176b.json)" in sites["defaults"][1]
    assert "(baseline: no baseline for this topology and model)" in sites["baselines"][1]


def test_publish_takes_the_old_positional_with_a_warning(
    history: Path, tmp_path: Path, capsys: Capture
) -> None:
    code, out, err = run(capsys, "history", "publish", history, "--out-dir", tmp_path / "s")
    assert code == 0 and out.startswith("bloomperf: site written to")
    # Said first, before the site's progress lines.
    assert err.splitlines()[0] == "bloomperf: a positional HISTORY is deprecated; use --history"


@pytest.mark.parametrize("twice", [True, False])
def test_publish_wants_its_history_exactly_once(
    twice: bool, history: Path, tmp_path: Path, capsys: Capture
) -> None:
    argv = ["history", "publish", "--out-dir", tmp_path / "s"]
    argv += [history, "--history", history] if twice else []
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and not (tmp_path / "s").exists()
    message = (
        "history publish: give the history once, as --history DIR"
        if twice
        else "history publish: --history DIR is required"
    )
    assert err == f"bloomperf: error: {message}\n"
