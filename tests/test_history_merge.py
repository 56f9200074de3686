"""`bloomperf history merge`: real results files of two topologies, as the nightly's runners
upload them, merged into one history root."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.cli import main
from bloomperf.core.errors import BloomperfError
from bloomperf.store.history.merge import merge_histories
from bloomperf.store.history.nights import add_to_history, load_history
from bloomperf.store.results import RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_RESULTS, BLOG_TOPOLOGY, night, on_night, scaled_run

EIGHT, FOUR = BLOG_TOPOLOGY, "4xA100-SXM4-80GB"


def night_of(topology: str, day: int, factor: float = 1.0) -> RunResult:
    """The blog's run as measured on ``topology`` on the ``day``-th night, ms/token × factor."""
    run = scaled_run(read_results(BLOG_RESULTS), factor)
    return replace(on_night(run, night(day)), topology=topology)


def artifacts(tmp: Path, nights: dict[str, list[RunResult]]) -> Path:
    """What actions/download-artifact leaves: one folder per runner's artifact."""
    root = tmp / "artifacts"
    for name, runs in nights.items():
        for i, run in enumerate(runs):
            save_run(run, root / name / f"results-{i}.json")
    return root


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_topologies_are_kept_apart_and_merging_twice_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = artifacts(
        tmp_path,
        {
            "bloomperf-night-8x": [night_of(EIGHT, 0), night_of(EIGHT, 1)],
            "bloomperf-night-4x": [night_of(FOUR, 0), night_of(FOUR, 1, 1.2)],
        },
    )
    dest = tmp_path / "history"
    assert main(["history", "merge", str(src), "--history", str(dest)]) == 0
    assert "2 night(s) added (2026-10-01.json, 2026-10-02.json)" in capsys.readouterr().out
    for topology in (EIGHT, FOUR):
        nights = load_history(dest / topology)
        assert [n.label for n in nights] == ["2026-10-01", "2026-10-02"]
        assert {n.run.topology for n in nights} == {topology}
    slow = load_history(dest / FOUR)[1].run.cells[0]
    assert slow.samples_ms_per_token == night_of(FOUR, 1, 1.2).cells[0].samples_ms_per_token

    before = snapshot(dest)
    # The same artifacts again, and the history root itself as a source: nothing is rewritten.
    assert main(["history", "merge", str(src), str(dest), "--history", str(dest)]) == 0
    assert "0 night(s) added (nothing new), 2 already there" in capsys.readouterr().out
    assert snapshot(dest) == before


def test_a_night_added_on_the_runner_is_not_counted_twice(tmp_path: Path) -> None:
    result = tmp_path / "results.json"
    save_run(night_of(EIGHT, 3), result)
    dest = tmp_path / "history"
    add_to_history(result, dest / EIGHT)
    assert main(["history", "merge", str(result), "--history", str(dest)]) == 0
    assert [n.label for n in load_history(dest / EIGHT)] == ["2026-10-04"]
    # A second run on the same date is a night of its own.
    later = replace(night_of(EIGHT, 3), started_at="2026-10-04T13:00:00Z")
    save_run(later, tmp_path / "later.json")
    assert main(["history", "merge", str(tmp_path / "later.json"), "--history", str(dest)]) == 0
    assert [n.label for n in load_history(dest / EIGHT)] == ["2026-10-04", "2026-10-04-2"]


def test_a_conflicting_duplicate_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "history"
    first = artifacts(tmp_path, {"a": [night_of(EIGHT, 0)]})
    assert main(["history", "merge", str(first), "--history", str(dest)]) == 0
    before = snapshot(dest)
    # The same run (topology and start time) with other figures: which one is true?
    forged = tmp_path / "forged" / "results.json"
    save_run(night_of(EIGHT, 0, 1.5), forged)
    capsys.readouterr()
    assert main(["history", "merge", str(forged), "--history", str(dest)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(forged) in err and f"{EIGHT}/2026-10-01.json" in err and "conflicts" in err
    assert snapshot(dest) == before
    # Between two sources as well, before anything is written.
    assert (
        main(["history", "merge", str(first), str(forged), "--history", str(tmp_path / "new")]) == 2
    )
    assert not (tmp_path / "new").exists()


def test_bad_sources_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "topology.json").write_text('{"gpus": 8}', encoding="utf-8")
    for source in (tmp_path / "missing", tmp_path / "junk"):
        assert main(["history", "merge", str(source), "--history", str(tmp_path / "h")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(source) in err


def test_an_interrupted_merge_leaves_whole_nights_and_a_rerun_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = artifacts(tmp_path, {"a": [night_of(EIGHT, d) for d in range(4)]})
    dest = tmp_path / "history"
    save_run(night_of(EIGHT, 9), tmp_path / "old.json")
    add_to_history(tmp_path / "old.json", dest / EIGHT)
    old = snapshot(dest)

    # Ctrl-C arrives while the third night is being put in place.
    real_replace = os.replace
    calls = []

    def interrupted(a: str, b: str) -> None:
        calls.append(b)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", interrupted)
    assert main(["history", "merge", str(src), "--history", str(dest)]) == 130
    monkeypatch.undo()
    assert len(calls) == 3

    left = sorted(p.name for p in (dest / EIGHT).iterdir())
    assert left == ["2026-10-01.json", "2026-10-02.json", "2026-10-10.json"]  # no temporary file
    assert all(snapshot(dest)[k] == v for k, v in old.items())
    assert len(load_history(dest / EIGHT)) == 3  # every file there is whole

    assert main(["history", "merge", str(src), "--history", str(dest)]) == 0
    assert [n.label for n in load_history(dest / EIGHT)] == [
        "2026-10-01",
        "2026-10-02",
        "2026-10-03",
        "2026-10-04",
        "2026-10-10",
    ]


def test_a_history_night_keeps_its_date_and_counts_are_what_the_merge_did(
    tmp_path: Path,
) -> None:
    """A night added with ``--date`` (its run started after midnight) keeps that night when
    merged; ``already`` counts the runs the destination held, ``added`` the ones it wrote."""
    history = tmp_path / "runner"
    late = replace(night_of(EIGHT, 1), started_at=f"{night(2)}T00:30:00Z")
    add_to_history(write(tmp_path / "late.json", late), history, day=night(1))
    add_to_history(write(tmp_path / "n3.json", night_of(EIGHT, 3)), history)
    dest = tmp_path / "dest"
    [first] = merge_histories([history], dest)
    assert [p.name for p in first.added] == [f"{night(1)}.json", f"{night(3)}.json"]
    assert first.already == 0
    [again] = merge_histories([history], dest)
    assert (again.added, again.already) == ((), 2)


def test_only_results_files_one_level_down_are_sources(tmp_path: Path) -> None:
    """A history folder's deeper files (pytest-benchmark's storage under it) are not nights."""
    history = tmp_path / "runner"
    add_to_history(write(tmp_path / "n1.json", night_of(EIGHT, 1)), history)
    deep = history / ".benchmarks" / "Linux-CPython-3.11-64bit"
    deep.mkdir(parents=True)
    (deep / "0001_nightly.json").write_text('{"machine_info": {}, "benchmarks": []}')
    [merged] = merge_histories([history], tmp_path / "dest")
    assert [p.name for p in merged.added] == [f"{night(1)}.json"]


def write(path: Path, run: RunResult) -> Path:
    save_run(run, path)
    return path


def test_merge_compares_each_run_with_its_own_identity_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linear in nights: the costly comparison of stored forms (run_to_dict, a few ms a run)
    is never made between two different runs. Each run used to be compared with every other:
    3000 nights took 35 minutes."""
    import bloomperf.store.history.merge as merge

    calls = 0
    real = merge.run_to_dict

    def counted(run: RunResult) -> object:
        nonlocal calls
        calls += 1
        return real(run)

    monkeypatch.setattr(merge, "run_to_dict", counted)
    n = 24
    src = artifacts(tmp_path, {"runner": [night_of(EIGHT, d) for d in range(n)]})
    dest = tmp_path / "history"
    merged = merge_histories([src, src], dest)  # every run twice, and the first time
    assert sum(len(m.added) for m in merged) == n
    merge_histories([src], dest)  # again: every run already there
    assert len(load_history(dest / EIGHT)) == n
    assert calls == 0, f"{calls} run_to_dict comparisons for {n} nights"


def test_a_conflict_between_sources_names_both_files_and_the_run(tmp_path: Path) -> None:
    """The same run (topology and start) finished at another time with other figures: whatever
    part differs, the two files and the run are named, and nothing is written."""
    first = write(tmp_path / "a" / "results.json", night_of(EIGHT, 0))
    other = replace(night_of(EIGHT, 0, 1.5), finished_at=f"{night(0)}T04:00:00Z")
    second = write(tmp_path / "b" / "results.json", other)
    with pytest.raises(BloomperfError) as refused:
        merge_histories([first, second], tmp_path / "dest")
    assert str(refused.value) == (
        f"{second}: conflicts with {first}: the same run ({EIGHT}, started "
        f"{night(0)}T01:30:00Z) with different content; refusing to merge"
    )
    assert not (tmp_path / "dest").exists()


def test_runs_without_a_start_are_told_apart_by_content(tmp_path: Path) -> None:
    """Two history nights whose runs have no started_at share no identity: both are merged,
    each in its folder named after its topology; the same one twice is kept once."""
    runner = tmp_path / "runner"
    for day, factor in ((1, 1.0), (2, 1.3)):
        write(runner / f"{night(day)}.json", replace(night_of(EIGHT, day, factor), started_at=""))
    (runner / ".tmp-partial.json").write_text("{ half a file")  # an atomic write in progress
    dest = tmp_path / "dest"
    [merged] = merge_histories([runner, runner], dest)
    assert merged.folder == dest / EIGHT
    assert [p.name for p in merged.added] == [f"{night(1)}.json", f"{night(2)}.json"]
    assert merged.already == 0
    [again] = merge_histories([runner], dest)
    assert (again.added, again.already) == ((), 2)


def test_refusals_of_the_whole_merge_name_what_is_wrong(tmp_path: Path) -> None:
    empty, bare = tmp_path / "empty", tmp_path / "bare"
    empty.mkdir()
    bare.mkdir()
    with pytest.raises(BloomperfError) as refused:
        merge_histories([empty, bare], tmp_path / "dest")
    assert str(refused.value) == f"{empty}, {bare}: holds no results files"
    afile = write(tmp_path / "r.json", night_of(EIGHT, 0))
    with pytest.raises(BloomperfError) as refused:
        merge_histories([afile], afile)
    assert str(refused.value) == f"--history {afile}: is not a directory"
    # A results file not named as a night is dated by its run, which must say when it started.
    undated = write(tmp_path / "undated.json", replace(night_of(EIGHT, 0), started_at=""))
    with pytest.raises(BloomperfError) as refused:
        merge_histories([undated], tmp_path / "dest")
    assert str(refused.value).startswith(f"{undated}: the run has no started_at")
