"""The history folder's nights, by property (rules mutmut's first full run found unstated):
which figure each metric reads, which nights a series and an outcome series hold, how nights
are named and ordered, and the line each refusal prints.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import metric_names
from bloomperf.store.history.nights import (
    Night,
    add_to_history,
    history_folders,
    load_history,
    metric_value,
    night_date,
    night_file,
    night_order,
    outcome_series,
    parse_date,
    series,
    topology_history,
)
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from tests.builders import bloom_run, night, night_run, nvml, ok_cell

STEPS = ((50.0, 10.0, 12.0), (52.0, 11.0, 13.0), (51.0, 10.0, 12.0))
METRICS = metric_names()
# A serving sweep's figures too (a real cell has either, never both; the reading is the same).
SERVED = {"serving_effective_rps": 6.0, "serving_ttft_p99_ms": 385.0, "serving_itl_p99_ms": 175.0}
CELL = replace(
    ok_cell(2.0),
    samples_step_ms=STEPS,
    load_memory=nvml(30.0),
    figures={name: (value,) for name, value in SERVED.items()},
)


def test_each_metric_reads_the_cells_own_figure() -> None:
    steps = CELL.steps
    assert steps is not None
    expected = {
        "ms_per_token": CELL.ms_per_token,
        "peak_memory": float(CELL.peak_memory_bytes or 0),
        "load_time": CELL.load_time_s,
        "ttft_ms": steps.ttft_ms,
        # The registry's per-cycle figure: the median over cycles of each cycle's median step.
        "tpot_ms": statistics.median(statistics.median(s[1:]) for s in STEPS),
        "tpot_p99_ms": statistics.median(CELL.latency_cycles["tpot_p99_ms"]),
        **SERVED,
    }
    assert set(expected) == set(METRICS)
    assert {m: metric_value(CELL, m) for m in METRICS} == expected
    # Distinct figures, so that reading one metric's for another's is seen.
    assert len(set(expected.values())) == len(expected)


@pytest.mark.parametrize("metric", METRICS)
def test_a_figure_the_cell_lacks_is_none(metric: str) -> None:
    bare = replace(CELL, samples_step_ms=(), load_memory=None, generate_memory=None, figures={})
    bare = replace(bare, samples_ms_per_token=(), load_time_s=None)
    assert metric_value(bare, metric) is None
    for outcome in (Outcome.OOM, Outcome.ERROR, Outcome.TIMEOUT, Outcome.SKIPPED):
        assert metric_value(replace(CELL, outcome=outcome), metric) is None


def test_an_unknown_metric_is_refused() -> None:
    with pytest.raises(BloomperfError) as refused:
        metric_value(CELL, "tokens_per_s")
    assert str(refused.value) == (
        "metric: unknown 'tokens_per_s' (valid: ms_per_token, peak_memory, load_time, ttft_ms, "
        "tpot_ms, tpot_p99_ms, serving_effective_rps, serving_ttft_p99_ms, serving_itl_p99_ms)"
    )


def nights_of(cells: list[CellResult | None]) -> list[Night]:
    return [
        Night(str(night(i)), Path(f"{night(i)}.json"), night_run(night(i), [c] if c else []))
        for i, c in enumerate(cells)
    ]


kinds = st.lists(st.sampled_from(("ok", "zero", "absent", "oom", "skipped")), max_size=8)


@given(kinds)
def test_a_series_holds_the_nights_with_a_positive_figure(kinds: list[str]) -> None:
    cells: list[CellResult | None] = []
    for i, kind in enumerate(kinds):
        if kind == "absent":
            cells.append(None)
        elif kind == "zero":
            cells.append(replace(CELL, load_time_s=0.0))
        elif kind == "ok":
            cells.append(replace(CELL, load_time_s=60.0 + i))
        else:
            cells.append(replace(CELL, outcome=Outcome(kind)))
    nights = nights_of(cells)
    assert series(nights, CELL.id, "load_time") == [
        (i, 60.0 + i) for i, k in enumerate(kinds) if k == "ok"
    ]
    assert outcome_series(nights, CELL.id) == [
        (i, "oom" if k == "oom" else "ok")
        for i, k in enumerate(kinds)
        if k not in ("absent", "skipped")
    ]


def test_a_zero_figure_is_no_point_of_the_series() -> None:
    """A night whose cycles all read 0 ms/token measured nothing: the series leaves it out
    (the metric's samples are its positive ones, so no figure of it is 0)."""
    zero = replace(CELL, samples_ms_per_token=(0.0, 0.0, 0.0))
    nights = nights_of([CELL, zero, CELL])
    assert series(nights, CELL.id, "ms_per_token") == [(0, 2.0), (2, 2.0)]


@pytest.mark.parametrize(
    ("started_at", "night_is"),
    [
        ("2026-11-29T23:30:00Z", date(2026, 11, 29)),
        ("2026-11-30T01:00:00+00:00", date(2026, 11, 30)),
        ("2026-11-29T23:30:00-05:00", date(2026, 11, 30)),  # 04:30 UTC
        ("2026-11-30T00:30:00+02:00", date(2026, 11, 29)),  # 22:30 UTC
        ("2026-11-29T23:30:00", date(2026, 11, 29)),  # no offset: taken as written
    ],
)
def test_a_night_is_the_utc_date_whatever_the_machines_zone(
    started_at: str, night_is: date, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dated in UTC on a machine five hours behind it (the runner's zone never counts)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert night_date(replace(bloom_run(CELL), started_at=started_at), "r.json") == night_is
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_date_that_is_not_one_is_refused_naming_it() -> None:
    with pytest.raises(BloomperfError) as refused:
        parse_date("29/11/2026")
    assert str(refused.value) == "--date: '29/11/2026' is not a date like 2026-11-29"


def test_nights_of_one_date_are_named_in_turn(tmp_path: Path) -> None:
    day = date(2026, 11, 29)
    # Checked one at a time: a wrong name taken would make the next search run in circles.
    for name in ("2026-11-29.json", "2026-11-29-2.json", "2026-11-29-3.json", "2026-11-29-4.json"):
        path = night_file(tmp_path, day)
        assert path.name == name
        path.write_text("{}")
    ordered = sorted(
        (
            Path(n)
            for n in (
                "2026-11-29-10.json",
                "2026-11-29-2.json",
                "2026-11-29.json",
                "2026-11-28-3.json",
            )
        ),
        key=night_order,
    )
    assert [p.name for p in ordered] == [
        "2026-11-28-3.json",
        "2026-11-29.json",
        "2026-11-29-2.json",
        "2026-11-29-10.json",
    ]


def test_a_history_loads_every_night_in_order_past_temporary_files(tmp_path: Path) -> None:
    for i in reversed(range(6)):
        save_run(night_run(night(i), [CELL]), tmp_path / f"{night(i)}.json")
    for name in (".tmp-a.json", ".tmp-b.json", ".~x.json"):
        (tmp_path / name).write_text("not json")
    nights = load_history(tmp_path)
    assert [n.label for n in nights] == [str(night(i)) for i in range(6)]
    assert [n.path for n in nights] == [tmp_path / f"{night(i)}.json" for i in range(6)]


def test_a_night_is_dated_by_its_start_and_refusals_name_the_file(tmp_path: Path) -> None:
    result = tmp_path / "results.json"
    save_run(replace(bloom_run(CELL), started_at="2026-11-29T23:30:00Z"), result)
    path, added = add_to_history(result, tmp_path / "history")
    assert added and path.name == "2026-11-29.json"
    undated = tmp_path / "undated.json"
    save_run(bloom_run(CELL), undated)
    with pytest.raises(BloomperfError) as refused:
        add_to_history(undated, tmp_path / "history")
    assert str(refused.value) == (
        f"{undated}: the run has no started_at; give its night with --date"
    )
    broken = tmp_path / "broken.json"
    save_run(replace(bloom_run(CELL), started_at="last tuesday"), broken)
    with pytest.raises(BloomperfError) as refused:
        add_to_history(broken, tmp_path / "history")
    assert str(refused.value) == f"{broken}: started_at 'last tuesday' is not an ISO date-time"
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(BloomperfError) as refused:
        add_to_history(result, afile)
    assert str(refused.value) == f"{afile}: is not a directory"


def test_a_merged_root_gives_each_topology_its_folder(tmp_path: Path) -> None:
    for topology in ("1xH200", "8xA100-SXM4-80GB", "cpu"):
        folder = tmp_path / topology
        folder.mkdir()
        save_run(night_run(night(0), [CELL]), folder / f"{night(0)}.json")
    (tmp_path / "notes").mkdir()  # a folder without nights is not a topology's
    assert [f.name for f in history_folders(tmp_path)] == ["1xH200", "8xA100-SXM4-80GB", "cpu"]
    for topology in ("1xH200", "8xA100-SXM4-80GB", "cpu"):
        assert topology_history(tmp_path, topology) == tmp_path / topology
    with pytest.raises(BloomperfError) as refused:
        topology_history(tmp_path, "4xA100-SXM4-80GB")
    assert str(refused.value) == (
        f"{tmp_path}: holds no nights of topology 4xA100-SXM4-80GB "
        "(it holds: 1xH200, 8xA100-SXM4-80GB, cpu)"
    )
    single = tmp_path / "cpu"
    assert topology_history(single, "anything") == single


def test_a_root_without_nights_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BloomperfError) as refused:
        history_folders(tmp_path / "missing")
    assert str(refused.value) == f"{tmp_path / 'missing'}: no such history directory"
    (tmp_path / "empty").mkdir()
    with pytest.raises(BloomperfError) as refused:
        history_folders(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path}: holds no nights (YYYY-MM-DD.json), nor folders of them"
    )
    assert os.listdir(tmp_path) == ["empty"]
