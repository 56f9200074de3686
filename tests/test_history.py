"""History folder and change detection: real files in a temporary folder, synthetic nights."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.analysis.changes import detect_changes, new_changes
from bloomperf.cli import main
from bloomperf.core.errors import BloomperfError
from bloomperf.render.history.changes import history_section
from bloomperf.store.history.nights import (
    METRIC_MEMORY,
    METRIC_MS,
    METRIC_OUTCOME,
    add_to_history,
    load_history,
)
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from tests.builders import FIRST_NIGHT, add_night, night, night_run, ok_cell


def write_history(folder: Path, values: list[float], tmp: Path) -> None:
    """One night per value, each added through ``add_to_history`` as the nightly job does."""
    for i, ms in enumerate(values):
        add_night(folder, night_run(night(i), [ok_cell(ms)]), tmp)


def noisy(n: int, seed: int, spread: float = 0.03) -> list[float]:
    rng = random.Random(seed)
    return [44.0 * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_step_of_15_percent_is_marked_on_the_night_it_started(tmp_path: Path) -> None:
    values = noisy(20, seed=7)
    values = [v * 1.15 if i >= 12 else v for i, v in enumerate(values)]
    folder = tmp_path / "history"
    write_history(folder, values, tmp_path)
    nights = load_history(folder)
    changes = [c for c in detect_changes(nights) if c.metric == METRIC_MS]
    assert [(c.night, c.night_label) for c in changes] == [(12, "2026-10-13")]
    change = changes[0]
    assert change.cell == "ds-inference-fp16-bs1"
    assert change.worse
    assert change.relative == pytest.approx(0.15, abs=0.04)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
def test_pure_noise_marks_no_night(tmp_path: Path, seed: int) -> None:
    folder = tmp_path / "history"
    write_history(folder, noisy(30, seed), tmp_path)
    assert detect_changes(load_history(folder)) == []


@pytest.mark.parametrize("outlier_night", [3, 10, 20, 27, 29])
def test_one_bad_night_is_not_a_change(tmp_path: Path, outlier_night: int) -> None:
    values = noisy(30, seed=11)
    values[outlier_night] *= 1.4
    folder = tmp_path / "history"
    write_history(folder, values, tmp_path)
    assert detect_changes(load_history(folder)) == []


def test_two_bad_nights_inside_normal_ones_are_not_a_change(tmp_path: Path) -> None:
    values = noisy(24, seed=3)
    values[10] *= 1.4
    values[11] *= 1.4
    folder = tmp_path / "history"
    write_history(folder, values, tmp_path)
    assert detect_changes(load_history(folder)) == []


def test_an_improvement_is_a_change_for_the_better(tmp_path: Path) -> None:
    values = [v * (0.7 if i >= 9 else 1.0) for i, v in enumerate(noisy(16, seed=5))]
    folder = tmp_path / "history"
    write_history(folder, values, tmp_path)
    (change,) = detect_changes(load_history(folder))
    assert change.night == 9
    assert not change.worse


def test_memory_growth_and_a_new_oom_are_changes(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    rng = random.Random(2)
    for i in range(14):
        memory = 40.0 * (1.2 if i >= 6 else 1.0) * (1 + rng.uniform(-0.005, 0.005))
        big = (
            CellResult("ds-inference", "fp16", 128, Outcome.OOM, message="CUDA out of memory")
            if i >= 8
            else ok_cell(0.7, 70.0, batch_size=128)
        )
        small = ok_cell(44.0 * (1 + rng.uniform(-0.01, 0.01)), memory)
        add_night(folder, night_run(night(i), [small, big]), tmp_path)
    found = {(c.cell, c.metric, c.night) for c in detect_changes(load_history(folder))}
    assert found == {
        ("ds-inference-fp16-bs1", METRIC_MEMORY, 6),
        ("ds-inference-fp16-bs128", METRIC_OUTCOME, 8),
    }


def test_new_changes_are_only_those_the_newest_night_confirmed(tmp_path: Path) -> None:
    values = [v * 1.2 if i >= 12 else v for i, v in enumerate(noisy(15, seed=9))]
    folder = tmp_path / "history"
    write_history(folder, values[:14], tmp_path)
    # Two nights at the new level are not yet enough to call it a change (confirm = 3) ...
    assert new_changes(load_history(folder)) == []
    add_night(folder, night_run(night(14), [ok_cell(values[14])]), tmp_path)
    # ... the third confirms it, and that night reports it as new and worse.
    text, failed = history_section(folder, "markdown")
    assert failed
    assert "| 2026-10-13 | ds-inference-fp16-bs1 | ms_per_token |" in text
    assert "new, worse" in text
    add_night(folder, night_run(night(15), [ok_cell(values[14])]), tmp_path)
    _, failed_next_night = history_section(folder, "markdown")
    assert not failed_next_night


def test_add_names_files_by_date_and_never_adds_a_run_twice(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    first = tmp_path / "a.json"
    second = tmp_path / "b.json"
    save_run(night_run(FIRST_NIGHT, [ok_cell(44.0)]), first)
    save_run(night_run(FIRST_NIGHT, [ok_cell(45.0)]), second)
    assert add_to_history(first, folder) == (folder / "2026-10-01.json", True)
    assert add_to_history(second, folder) == (folder / "2026-10-01-2.json", True)
    assert add_to_history(first, folder) == (folder / "2026-10-01.json", False)
    assert [n.label for n in load_history(folder)] == ["2026-10-01", "2026-10-01-2"]
    assert sorted(p.name for p in folder.iterdir()) == ["2026-10-01-2.json", "2026-10-01.json"]


def test_cli_add_and_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "r.json"
    save_run(night_run(FIRST_NIGHT, [ok_cell(44.0)]), result)
    folder = tmp_path / "h"
    assert (
        main(["history", "add", str(result), "--history", str(folder), "--date", "2026-11-02"]) == 0
    )
    assert "added as" in capsys.readouterr().out
    assert (folder / "2026-11-02.json").is_file()
    assert main(["history", "changes", "--history", str(folder)]) == 0
    assert "History: 1 night (2026-11-02 … 2026-11-02), 0 change(s)" in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"kind": "bloomperf-results", "schema_version": 1', encoding="utf-8")
    assert main(["history", "add", str(broken), "--history", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bloomperf: error: ") and err.count("\n") == 1
    assert not (tmp_path / "h").exists()

    undated = tmp_path / "undated.json"
    save_run(replace(night_run(FIRST_NIGHT, [ok_cell(44.0)]), started_at=""), undated)
    with pytest.raises(BloomperfError, match="no started_at"):
        add_to_history(undated, tmp_path / "h")

    stray = tmp_path / "h2"
    stray.mkdir()
    (stray / "notes.json").write_text(json.dumps({}), encoding="utf-8")
    with pytest.raises(BloomperfError, match=r"YYYY-MM-DD\.json"):
        load_history(stray)
    with pytest.raises(BloomperfError, match="no such history directory"):
        load_history(tmp_path / "missing")
    assert main(["history", "changes", "--history", str(tmp_path), "--confirm", "1"]) == 2


def test_diff_with_history_fails_on_the_night_a_slowdown_is_confirmed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = [v * 1.2 if i >= 12 else v for i, v in enumerate(noisy(15, seed=9))]
    folder = tmp_path / "history"
    write_history(folder, values, tmp_path)
    tonight = tmp_path / "tonight.json"
    save_run(night_run(night(14), [ok_cell(values[14])]), tonight)
    no_baselines = tmp_path / "no-baselines"
    no_baselines.mkdir()
    args = ["diff", str(tonight), "--baselines", str(no_baselines), "--format", "markdown"]
    args.append("--allow-no-baseline")  # no baseline: only the history judges
    assert main([*args, "--history", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "### History: 15 nights" in out and "new, worse" in out
    # Without the history the same results pass: the failure is the history's.
    assert main(args) == 0
