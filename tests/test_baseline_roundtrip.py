"""Baseline files, by property (mutmut's first full run left 162 of the baseline codec's 727
mutants alive: no test wrote every field of a baseline and read it back):

* every baseline (cells of each outcome with or without each figure, tolerance, recorded cycles
  and latency; per-backend load times; aliases, notes, provenance) reads back equal;
* a wrongly typed value anywhere is refused in one line that starts with the file's path and
  names the place;
* the rules that are not types (a tolerance is a fraction below 1; an OOM cell has no figure;
  every cell and load time names a described provenance; no cell twice) are refused with the
  line that says which.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline import (
    EXPECT_NOT_RUN,
    EXPECT_OK,
    EXPECT_OOM,
    Baseline,
    BaselineCell,
    LoadTime,
    Provenance,
)
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from tests.fuzzing import assert_names_the_place, retype, typed_places

SETTINGS = settings(
    max_examples=int(os.environ.get("ROUNDTRIP_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
positive = st.floats(0.01, 1e5, allow_nan=False, allow_infinity=False)
tolerance = st.none() | st.floats(0.0, 0.99)
PROVENANCE = (
    Provenance("blog", "the blog's tables", "2022-10-01", "8xA100", {"deepspeed": "0.7.2"}),
    Provenance("run", "bloomperf run", "2026-11-30", "cpu", {}),
)


@st.composite
def baseline_cells(draw: st.DrawFn, batch_size: int) -> BaselineCell:
    outcome = draw(st.sampled_from((EXPECT_OK, EXPECT_OOM, EXPECT_NOT_RUN)))
    ok = outcome == EXPECT_OK
    metrics = draw(
        st.lists(st.sampled_from(("ttft_ms", "tpot_ms", "tpot_p99_ms")), unique=True, max_size=3)
    )
    return BaselineCell(
        backend=draw(st.sampled_from(BACKEND_NAMES)),
        dtype=draw(st.sampled_from(DTYPES)),
        batch_size=batch_size,
        outcome=outcome,
        ms_per_token=draw(st.none() | positive) if ok else None,
        ms_per_token_tolerance=draw(tolerance),
        ms_per_token_decimals=draw(st.none() | st.integers(0, 12)),
        ms_per_token_samples=tuple(draw(st.lists(positive, max_size=4))),
        peak_memory_bytes=draw(st.none() | st.integers(0, 2**45)),
        peak_memory_tolerance=draw(tolerance),
        load_time_s=draw(st.none() | positive),
        load_time_tolerance=draw(tolerance),
        provenance=draw(st.sampled_from([p.id for p in PROVENANCE])),
        figure_samples={m: tuple(draw(st.lists(positive, max_size=3))) for m in metrics},
        figure_tolerances={m: draw(tolerance) for m in metrics},
        details=draw(st.sampled_from([{}, {"serving": {"effective_rps": 6.0, "rates": []}}])),
    )


load_times = st.builds(
    LoadTime,
    backend=st.sampled_from(BACKEND_NAMES),
    dtype=st.sampled_from(DTYPES),
    variant=st.sampled_from(("", "pre-sharded", "unsharded")),
    seconds=positive,
    tolerance=tolerance,
    provenance=st.sampled_from([p.id for p in PROVENANCE]),
)


@st.composite
def baselines(draw: st.DrawFn) -> Baseline:
    batches = draw(st.lists(st.integers(1, 4096), max_size=4, unique=True))
    return Baseline(
        topology=draw(st.sampled_from(("cpu", "8xA100-SXM4-80GB"))),
        topology_aliases=tuple(
            draw(st.lists(st.sampled_from(("8xA100-80GB", "a100x8")), unique=True, max_size=2))
        ),
        topology_description=draw(st.sampled_from(("", "8 x A100 80GB, NVLink"))),
        model=draw(st.sampled_from(("bloom-176b", "tiny"))),
        model_aliases=tuple(draw(st.lists(st.sampled_from(("bigscience-bloom",)), max_size=1))),
        model_layers=draw(st.none() | st.integers(1, 70)),
        new_tokens=draw(st.none() | st.integers(1, 200)),
        provenance=PROVENANCE,
        cells=tuple(draw(baseline_cells(b)) for b in batches),
        load_times=tuple(draw(st.lists(load_times, max_size=2))),
        notes=tuple(draw(st.lists(st.sampled_from(("from the blog", "measured")), max_size=2))),
    )


@SETTINGS
@given(baseline=baselines())
def test_every_baseline_reads_back_as_it_was_saved(tmp_path: Path, baseline: Baseline) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(baseline, path)
    loaded = load_baseline(path)
    assert loaded.path == str(path)
    assert replace(loaded, path="") == baseline


@SETTINGS
@given(baseline=baselines(), data=st.data())
def test_a_wrongly_typed_value_is_refused_naming_the_file_and_the_place(
    tmp_path: Path, baseline: Baseline, data: st.DataObject
) -> None:
    path = tmp_path / "baseline.json"
    save_baseline(baseline, path)
    document = json.loads(path.read_text())
    places = [(where, kind) for where, kind in typed_places(document) if kind is not type(None)]
    where, kind = data.draw(st.sampled_from(places))
    path.write_text(json.dumps(retype(document, where, kind)))
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert_names_the_place(str(refused.value), path, where)


def one_cell(tmp_path: Path, cell: dict[str, Any], **top: Any) -> Path:
    """A baseline file of one cell given as JSON."""
    path = tmp_path / "baseline.json"
    save_baseline(
        Baseline(
            "cpu",
            (),
            "",
            "tiny",
            (),
            None,
            None,
            PROVENANCE,
            (BaselineCell("accelerate", "fp32", 1, EXPECT_OK, 2.0, provenance="run"),),
        ),
        path,
    )
    document = json.loads(path.read_text())
    document["cells"][0].update(cell)
    document.update(top)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("cell", "says"),
    [
        (
            {"ms_per_token_tolerance": 1.0},
            "field 'ms_per_token_tolerance' must be a fraction below 1 (0.05 = 5%), found 1.0",
        ),
        (
            {"peak_memory_tolerance": 5},
            "field 'peak_memory_tolerance' must be a fraction below 1 (0.05 = 5%), found 5.0",
        ),
        ({"outcome": "oom"}, "an 'oom' cell cannot have ms_per_token"),
        ({"outcome": "crashed"}, "unknown outcome 'crashed' (valid: ok, oom, not-run)"),
        ({"provenance": "elsewhere"}, "accelerate-fp32-bs1 names unknown provenance 'elsewhere'"),
        (
            {"figures": {"ttft_ms": {"samples": [1.0], "tolerance": 2.0}}},
            "field 'tolerance' must be a fraction below 1 (0.05 = 5%), found 2.0",
        ),
        ({"figures": {"tpot_p50": {"samples": [1.0]}}}, "unknown metric 'tpot_p50'"),
        ({"figures": {"ms_per_token": {"samples": [1.0]}}}, "unknown metric 'ms_per_token'"),
        ({"figures": {"ttft_ms": {"tolerance": 0.1}}}, "ttft_ms has no samples"),
    ],
)
def test_each_rule_of_a_baseline_cell_is_refused_with_its_reason(
    tmp_path: Path, cell: dict[str, Any], says: str
) -> None:
    path = one_cell(tmp_path, cell)
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    where = f"{path} cell 0" + (" figures" if "figures" in cell else "")
    if "provenance" in cell:
        where = str(path)
    assert str(refused.value) == f"{where}: {says}"


def test_a_cell_twice_is_refused(tmp_path: Path) -> None:
    path = one_cell(tmp_path, {})
    document = json.loads(path.read_text())
    document["cells"].append(document["cells"][0])
    path.write_text(json.dumps(document))
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert str(refused.value) == f"{path}: cell accelerate-fp32-bs1 appears twice"


def test_a_load_time_names_a_described_provenance(tmp_path: Path) -> None:
    load = {"backend": "accelerate", "dtype": "fp32", "seconds": 30, "provenance": "x"}
    path = one_cell(tmp_path, {}, load_times=[load])
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert str(refused.value) == (f"{path}: load time accelerate-fp32 names unknown provenance 'x'")


@SETTINGS
@given(baseline=baselines())
def test_a_version_1_baseline_reads_with_its_latency_map_as_the_figures(
    tmp_path: Path, baseline: Baseline
) -> None:
    """Version 1 named a cell's figures map ``latency``: such a file reads as the same
    baseline (schema migration ``update_to_2``)."""
    path = tmp_path / "baseline.json"
    save_baseline(baseline, path)
    document = json.loads(path.read_text())
    assert document["schema_version"] == 2
    document["schema_version"] = 1
    for cell in document["cells"]:
        if "figures" in cell:
            cell["latency"] = cell.pop("figures")
    path.write_text(json.dumps(document))
    assert replace(load_baseline(path), path="") == baseline


def test_a_version_1_cell_that_is_not_an_object_is_refused_naming_it(tmp_path: Path) -> None:
    path = one_cell(tmp_path, {})
    document = json.loads(path.read_text())
    document["schema_version"] = 1
    document["cells"].append("accelerate-fp32-bs2")
    path.write_text(json.dumps(document))
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert_names_the_place(str(refused.value), path, ("cells", 1))


def test_a_load_time_or_details_of_the_wrong_kind_is_one_line_naming_it(tmp_path: Path) -> None:
    path = one_cell(tmp_path, {}, load_times=[7])
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert str(refused.value) == f"{path} load time 0: a load time must be an object"
    path = one_cell(tmp_path, {"details": ["serving"]})
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert str(refused.value) == f"{path} cell 0: field 'details' must be an object, found list"
