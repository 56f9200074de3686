"""Baseline files: the transcribed blog tables, JSON round trips, finding, accepting, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bloomperf.core.errors import BloomperfError
from bloomperf.render.baseline import render_baseline_json, render_baseline_text
from bloomperf.store.baseline import (
    EXPECT_NOT_RUN,
    EXPECT_OK,
    BaselineCell,
    Expected,
    expected_cell,
    expected_figure,
    oom_boundary,
    with_figures,
)
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.baseline.codec import (
    baseline_to_dict,
    check_consistent,
    load_baseline,
    save_baseline,
)
from bloomperf.store.baseline.search import baseline_file_name, find_baseline, resolve_baseline
from bloomperf.store.results import CellResult, Outcome
from tests.builders import BASELINES, BLOOM, rss, tiny_run

# The blog's tables, as printed (its non-breaking hyphens written as "-").
BLOG_8X80 = """\
Solution (dtype)|Batch 1|Batch 8|Batch 16|Batch 32|Batch 64|Batch 128|Batch 256|Batch 512
Accelerate bf16|230.38 ms|31.78 ms|17.84 ms|10.89 ms|OOM|–|–|–
Accelerate int8|286.56 ms|40.92 ms|22.65 ms|13.27 ms|OOM|–|–|–
DeepSpeed-Inference fp16|44.02 ms|5.70 ms|3.01 ms|1.68 ms|1.00 ms|0.69 ms|OOM|–
DeepSpeed-Inference int8|89.09 ms|11.44 ms|5.88 ms|3.09 ms|1.71 ms|1.02 ms|0.71 ms|OOM
DeepSpeed-ZeRO bf16|283 ms|34.88 ms|OOM|–|–|–|–|–"""

BLOG_4X80 = """\
Solution (dtype)|Batch 1|Batch 8|Batch 16|Batch 32|Batch 64|Batch 128
Accelerate int8|284.15 ms|40.14 ms|21.97 ms|OOM|–|–
DeepSpeed-Inference int8|156.51 ms|20.11 ms|10.38 ms|5.50 ms|2.96 ms|OOM"""

BLOG_LOAD_TIMES = {
    ("accelerate", "bf16", ""): 121,
    ("ds-inference", "int8", "pre-sharded"): 61,
    ("ds-inference", "fp16", "pre-sharded"): 60,
    ("ds-inference", "fp16", "unsharded"): 662,
    ("ds-zero", "bf16", ""): 462,
}


def blog_rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in table.splitlines()]


def shown_rows(text: str, rows: int) -> list[list[str]]:
    """The throughput table of ``baseline show``: columns are separated by two spaces or more."""
    lines = text.splitlines()[1 : 2 + rows]
    return [[c.strip() for c in line.split("  ") if c.strip()] for line in lines]


@pytest.mark.parametrize(
    ("topology", "table"), [("8xA100-80GB", BLOG_8X80), ("4xA100-80GB", BLOG_4X80)]
)
def test_show_prints_the_blogs_table_unchanged(topology: str, table: str) -> None:
    baseline = resolve_baseline(topology, None, BASELINES)
    expected = blog_rows(table)
    assert shown_rows(render_baseline_text(baseline), len(expected) - 1) == expected


@pytest.mark.parametrize(
    "name", ["8xA100-SXM4-80GB.bloom-176b.json", "4xA100-SXM4-80GB.bloom-176b.json"]
)
def test_transcribed_baseline_round_trips_through_json(name: str, tmp_path: Path) -> None:
    path = BASELINES / name
    baseline = load_baseline(path)
    # The repository's files are version 1 (today's): read through update_to_2, written as 2.
    assert baseline_to_dict(baseline) == json.loads(path.read_text()) | {"schema_version": 2}
    shown = json.loads(render_baseline_json(baseline))
    copy = tmp_path / name
    copy.write_text(json.dumps(shown))
    assert replace(load_baseline(copy), path="") == replace(baseline, path="")


def test_show_json_lists_every_cell_with_ms_per_token_and_the_load_times() -> None:
    baseline = resolve_baseline("8xA100-SXM4-80GB", "bloom-176b", BASELINES)
    data = json.loads(render_baseline_json(baseline))
    cells = {(c["backend"], c["dtype"], c["batch_size"]): c for c in data["cells"]}
    assert len(cells) == 40
    assert cells[("accelerate", "bf16", 1)]["ms_per_token"] == 230.38
    assert cells[("ds-zero", "bf16", 1)]["ms_per_token"] == 283
    assert cells[("ds-inference", "int8", 256)]["ms_per_token"] == 0.71
    assert cells[("ds-inference", "int8", 512)]["outcome"] == "oom"
    assert cells[("ds-inference", "int8", 512)]["ms_per_token"] is None
    assert cells[("ds-zero", "bf16", 32)]["outcome"] == "not-run"
    loads = {(t["backend"], t["dtype"], t["variant"]): t["seconds"] for t in data["load_times"]}
    assert loads == BLOG_LOAD_TIMES


def test_oom_boundaries_follow_the_tables() -> None:
    b8 = resolve_baseline("8xA100-80GB", None, BASELINES)
    assert oom_boundary(b8, "accelerate", "bf16") == 64
    assert oom_boundary(b8, "ds-inference", "int8") == 512
    assert oom_boundary(b8, "ds-zero", "bf16") == 16
    assert oom_boundary(b8, "ds-autotp", "fp16") is None
    b4 = resolve_baseline("4xA100-80GB", None, BASELINES)
    assert oom_boundary(b4, "accelerate", "int8") == 32
    assert oom_boundary(b4, "ds-inference", "int8") == 128


def test_find_baseline_by_alias_and_model_alias() -> None:
    found = find_baseline("8xa100-80gb", "bigscience/bloom", BASELINES)
    assert found is not None and found.topology == "8xA100-SXM4-80GB"
    assert find_baseline("8xH100-SXM5-80GB", "bloom-176b", BASELINES) is None
    assert find_baseline("8xA100-SXM4-80GB", "tiny", BASELINES) is None


def test_expected_cell_fills_the_load_time_only_when_the_variant_is_clear() -> None:
    b8 = resolve_baseline("8xA100-80GB", None, BASELINES)
    accel = CellResult("accelerate", "bf16", 8, Outcome.OK, (31.0,), load_time_s=120.0)
    expected = expected_cell(b8, accel)
    assert expected is not None and expected.load_time_s == 121
    fp16 = CellResult("ds-inference", "fp16", 8, Outcome.OK, (5.7,))
    assert expected_cell(b8, fp16).load_time_s is None  # type: ignore[union-attr]
    unsharded = replace(fp16, details={"checkpoint": "unsharded"})
    assert expected_cell(b8, unsharded).load_time_s == 662  # type: ignore[union-attr]
    beyond = CellResult("accelerate", "bf16", 1024, Outcome.OOM)
    assert expected_cell(b8, beyond).outcome == EXPECT_NOT_RUN  # type: ignore[union-attr]
    assert expected_cell(b8, CellResult("ds-autotp", "fp16", 1, Outcome.OK)) is None


# ---- bad input ------------------------------------------------------------------------------


def write(tmp_path: Path, data: object, name: str = "b.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def transcribed() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BASELINES / "4xA100-SXM4-80GB.bloom-176b.json").read_text())
    return data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: d | {"schema_version": 3}, "schema_version 3 is not supported"),
        (lambda d: d | {"kind": "bloomperf-results"}, "not a bloomperf-baseline file"),
        (lambda d: set_cell(d, backend="tgi"), "unknown backend 'tgi'"),
        (lambda d: set_cell(d, outcome="maybe"), "unknown outcome 'maybe'"),
        (lambda d: set_cell(d, ms_per_token_tolerance=5), "must be a fraction below 1"),
        (lambda d: set_cell(d, ms_per_token="fast"), "'ms_per_token' must be a number"),
        (lambda d: set_cell(d, provenance="nowhere"), "unknown provenance 'nowhere'"),
        (lambda d: d | {"cells": d["cells"] + d["cells"][:1]}, "appears twice"),
    ],
)
def test_bad_baselines_give_one_line_errors(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], object], message: str
) -> None:
    path = write(tmp_path, mutate(transcribed()))
    with pytest.raises(BloomperfError) as info:
        load_baseline(path)
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def set_cell(data: dict[str, Any], **fields: object) -> dict[str, Any]:
    cells = [dict(c) for c in data["cells"]]
    cells[0].update(fields)
    return data | {"cells": cells}


# ---- accept ---------------------------------------------------------------------------------


def test_accept_writes_a_cpu_baseline_that_judges_memory_but_not_time(tmp_path: Path) -> None:
    run = tiny_run(
        CellResult("accelerate", "fp32", 1, Outcome.OK, (1.5, 1.6, 1.4), 0.3, rss(400), rss(420)),
        CellResult("accelerate", "fp32", 8, Outcome.OK, (0.2, 0.21, 0.19), 0.3, rss(400), rss(430)),
    )
    accepted = accept_run(run, None, source="run.json")
    path = tmp_path / baseline_file_name(accepted.topology, accepted.model)
    save_baseline(accepted, path)
    assert path.name == "cpu.tiny.json"
    loaded = load_baseline(path)
    cell = loaded.cell("accelerate", "fp32", 8)
    assert cell is not None and cell.outcome == "ok"
    assert cell.ms_per_token == 0.2 and cell.ms_per_token_tolerance is None
    assert cell.peak_memory_bytes == 430 * 2**20 and cell.peak_memory_tolerance == 0.5
    assert loaded.new_tokens == 20 and loaded.model_layers == 2
    assert [p.source for p in loaded.provenance] == ["run.json"]
    assert loaded.provenance[0].software == {"torch": "2.13.0+cpu", "python": "3.11.7"}
    assert loaded.provenance[0].hardware == "AMD EPYC, 2 cores, 24 GiB RAM"


def test_accept_updates_measured_cells_and_keeps_the_provenance_of_the_rest() -> None:
    b4 = resolve_baseline("4xA100-80GB", None, BASELINES)
    run = tiny_run(
        CellResult("ds-inference", "int8", 128, Outcome.OK, (1.9,), 70.0),
        CellResult("ds-inference", "int8", 256, Outcome.OOM),
        topology="4xA100-SXM4-80GB",
    )
    run = replace(run, model=BLOOM)
    accepted = accept_run(run, b4, source="after.json")
    new = accepted.cell("ds-inference", "int8", 128)
    assert new is not None and new.outcome == "ok" and new.ms_per_token == 1.9
    assert new.ms_per_token_tolerance == 0.05 and new.load_time_tolerance == 0.25
    assert accepted.cell("ds-inference", "int8", 256).outcome == "oom"  # type: ignore[union-attr]
    assert oom_boundary(accepted, "ds-inference", "int8") == 256
    old = accepted.cell("accelerate", "int8", 1)
    assert old == b4.cell("accelerate", "int8", 1)
    assert [p.id for p in accepted.provenance] == [b4.provenance[0].id, new.provenance]
    check_consistent(accepted, "accepted")


def test_accept_refuses_errors_and_timeouts_unless_forced() -> None:
    run = tiny_run(
        CellResult("accelerate", "fp32", 1, Outcome.OK, (1.5,)),
        CellResult("accelerate", "fp32", 8, Outcome.TIMEOUT, message="hung"),
        CellResult("accelerate", "fp32", 16, Outcome.ERROR, message="boom"),
    )
    refused = r"accelerate-fp32-bs8 \(timeout\), accelerate-fp32-bs16 \(error\)"
    with pytest.raises(BloomperfError, match=refused):
        accept_run(run, None, source="run.json")
    forced = accept_run(run, None, source="run.json", force=True)
    assert [c.id for c in forced.cells] == ["accelerate-fp32-bs1"]


# A cell that already expects something of every kind, so a field left unwritten shows.
STALE = BaselineCell(
    "hf",
    "bf16",
    1,
    EXPECT_OK,
    ms_per_token=9.0,
    ms_per_token_tolerance=0.9,
    ms_per_token_samples=(9.0,),
    peak_memory_bytes=9,
    peak_memory_tolerance=0.9,
    load_time_s=9.0,
    load_time_tolerance=0.9,
    figure_samples={"stale_ms": (9.0,)},
    figure_tolerances={"stale_ms": 0.9},
)
FIGURES = {
    "ms_per_token": Expected(20.0, 0.05, (19.0, 20.0, 22.0)),
    "peak_memory": Expected(4096.0, 0.1),
    "load_time": Expected(31.5, 0.2),
    "ttft_ms": Expected(80.0, None, (70.0, 80.0, 95.0, 100.0)),
}


@pytest.mark.parametrize("names", [(), ("ms_per_token",), ("load_time", "ttft_ms"), (*FIGURES,)])
def test_with_figures_writes_exactly_the_figures_given(names: tuple[str, ...]) -> None:
    """Every figure given lands in its own field, every other one is cleared, the stale one
    included: the cell expects ``figures`` and nothing else."""
    cell = with_figures(STALE, {n: FIGURES[n] for n in names})
    given = set(names)
    assert cell.ms_per_token == (20.0 if "ms_per_token" in given else None)
    assert cell.ms_per_token_tolerance == (0.05 if "ms_per_token" in given else None)
    assert cell.ms_per_token_samples == ((19.0, 20.0, 22.0) if "ms_per_token" in given else ())
    assert cell.peak_memory_bytes == (4096 if "peak_memory" in given else None)
    assert cell.load_time_s == (31.5 if "load_time" in given else None)
    assert cell.load_time_tolerance == (0.2 if "load_time" in given else None)
    ttft = "ttft_ms" in given
    assert cell.figure_samples == ({"ttft_ms": (70.0, 80.0, 95.0, 100.0)} if ttft else {})
    assert cell.figure_tolerances == ({"ttft_ms": None} if ttft else {})


def test_expected_figure_reads_each_metric_from_where_it_is_kept() -> None:
    """An own field as stored; any other metric as the median of its cycles (the mean of the
    two middle ones for an even count) with its own tolerance; an unknown one as nothing."""
    cell = replace(
        STALE,
        figure_samples={"ttft_ms": (100.0, 70.0, 95.0, 80.0), "tpot_ms": (3.0,)},
        figure_tolerances={"ttft_ms": 0.25},
    )
    assert expected_figure(cell, "ms_per_token") == Expected(9.0, 0.9, (9.0,))
    assert expected_figure(cell, "ttft_ms") == Expected(87.5, 0.25, (100.0, 70.0, 95.0, 80.0))
    assert expected_figure(cell, "tpot_ms") == Expected(3.0, None, (3.0,))
    missing = expected_figure(cell, "stale_ms")
    assert (missing.value, missing.tolerance, missing.samples) == (None, None, ())
