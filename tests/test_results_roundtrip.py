"""Results files, by property (mutmut's first full run left 445 of the codec's 882 mutants alive:
no test wrote every field and read it back):

* every run, with every optional part (memory readings with per-device and per-node figures,
  energy, telemetry, step times, details) present or absent, reads back equal to what was saved;
* the figures written beside a cell for other readers (id, ms/token, peak memory, energy per
  token, flags, latency) are the cell's own;
* any value of the written file replaced by one of the wrong type is refused in one line that
  starts with the file's path and names where in the file it is.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.core.errors import BloomperfError
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import (
    CellResult,
    EnergyReading,
    MemoryReading,
    Outcome,
    RunResult,
    latency_to_dict,
)
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from bloomperf.store.telemetry import Telemetry
from tests.builders import tiny_run
from tests.fuzzing import assert_names_the_place, retype, typed_places

SETTINGS = settings(
    max_examples=int(os.environ.get("ROUNDTRIP_EXAMPLES", "60")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
positive = st.floats(0.01, 1e6, allow_nan=False, allow_infinity=False)
sizes = st.sampled_from([0, 1]) | st.integers(0, 2**45)  # zero is a size a reader may not lose
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)

memory = st.builds(
    MemoryReading,
    source=st.sampled_from(("nvml", "rss", "ranks", "unavailable")),
    peak_bytes=st.none() | sizes,
    per_device_bytes=st.lists(sizes, max_size=3).map(tuple),
    process_bytes=st.none() | sizes,
    torch_allocated_bytes=st.none() | sizes,
    torch_reserved_bytes=st.none() | sizes,
    reason=text,
    start_bytes=st.none() | sizes,
    per_node_bytes=st.lists(st.tuples(st.sampled_from(("n0", "n1")), sizes), max_size=2).map(tuple),
)
energy = st.builds(
    EnergyReading,
    source=st.sampled_from(("nvml", "rapl", "unavailable")),
    energy_j=st.none() | positive,
    seconds=st.just(0.0) | positive,
    tokens=st.integers(0, 10**6),
    reason=text,
)
clock = st.tuples(st.integers(100, 2000), st.integers(100, 2000))
telemetry = st.builds(
    Telemetry,
    samples=st.integers(0, 500),
    sm_clock_mhz=st.none() | clock,
    mem_clock_mhz=st.none() | clock,
    max_power_w=st.none() | positive,
    max_temperature_c=st.none() | st.integers(20, 95),
    reasons=st.integers(0, 2**16),
    flags=st.lists(st.sampled_from(("thermal throttling", "SM clock moved")), max_size=2).map(
        tuple
    ),
    reason=text,
)
# Rounded as the file keeps them (microseconds; CPU time in clock ticks), so they read back equal.
loads = st.builds(
    CycleLoad,
    wall_s=positive.map(lambda s: round(s, 6)),
    wait_s=st.none() | st.floats(0, 100).map(lambda s: round(s, 6)),
    other_cpu_s=st.none() | st.floats(0, 100).map(lambda s: round(s, 4)),
    width=st.integers(1, 8),
    gpu_others=st.none() | st.integers(0, 3),
    cpus=st.none() | st.integers(1, 4),
)
figures = st.dictionaries(
    st.sampled_from(("serving_effective_rps", "sm_util_pct", "a_metric_not_installed")),
    st.lists(positive, min_size=1, max_size=4).map(tuple),
    max_size=2,
)
details = st.dictionaries(
    st.sampled_from(("tp", "kernel_inject", "device_map", "load_count")),
    st.one_of(st.integers(0, 8), st.booleans(), st.sampled_from(("auto", "balanced"))),
    max_size=3,
)


@st.composite
def cells(draw: st.DrawFn, batch_size: int) -> CellResult:
    outcome = draw(st.sampled_from(list(Outcome)))
    cycles = draw(st.integers(0, 4)) if outcome is Outcome.OK else 0
    steps = draw(st.integers(1, 4))
    return CellResult(
        backend=draw(st.sampled_from(BACKEND_NAMES)),
        dtype=draw(st.sampled_from(DTYPES)),
        batch_size=batch_size,
        outcome=outcome,
        samples_ms_per_token=tuple(draw(positive) for _ in range(cycles)),
        load_time_s=draw(st.none() | positive),
        load_memory=draw(st.none() | memory),
        generate_memory=draw(st.none() | memory),
        message=draw(text),
        details=draw(details),
        samples_step_ms=tuple(
            tuple(draw(positive) for _ in range(steps)) for _ in range(draw(st.integers(0, cycles)))
        ),
        energy=draw(st.none() | energy),
        telemetry=draw(st.none() | telemetry),
        figures=draw(figures),
        loads=tuple(draw(loads) for _ in range(cycles)),
    )


@st.composite
def runs(draw: st.DrawFn) -> RunResult:
    batches = draw(st.lists(st.integers(1, 4096), max_size=3, unique=True))
    run = tiny_run(
        *(draw(cells(b)) for b in batches),
        new_tokens=draw(st.integers(1, 200)),
        cycles=draw(st.integers(1, 10)),
        environment=draw(st.dictionaries(st.sampled_from(("torch", "cuda")), text, max_size=2)),
    )
    return RunResult(
        model=run.model,
        workload=replace(run.workload, warmup=draw(st.integers(0, 3))),
        topology=draw(st.sampled_from(("cpu", "8xA100-SXM4-80GB", "1xH200"))),
        environment=run.environment,
        cells=run.cells,
        started_at=draw(st.sampled_from(("", "2026-11-29T10:00:00Z"))),
        finished_at=draw(st.sampled_from(("", "2026-11-29T10:05:00Z"))),
        complete=draw(st.booleans()),
        synthetic=draw(st.sampled_from(("", "slowdown 10 % injected"))),
    )


@SETTINGS
@given(run=runs())
def test_every_run_reads_back_as_it_was_saved(tmp_path: Path, run: RunResult) -> None:
    path = tmp_path / "results.json"
    save_run(run, path)
    assert read_results(path) == run


@SETTINGS
@given(run=runs())
def test_the_figures_beside_each_cell_are_the_cells_own(tmp_path: Path, run: RunResult) -> None:
    path = tmp_path / "results.json"
    save_run(run, path)
    written = json.loads(path.read_text())
    assert [c["id"] for c in written["cells"]] == [c.id for c in run.cells]
    for cell, data in zip(run.cells, written["cells"], strict=True):
        assert data["ms_per_token"] == cell.ms_per_token
        assert data["peak_memory_bytes"] == cell.peak_memory_bytes
        assert data["flags"] == (list(cell.telemetry.flags) if cell.telemetry else [])
        assert data["energy_j"] == (cell.energy.energy_j if cell.energy else None)
        assert data["j_per_token"] == (cell.energy.j_per_token if cell.energy else None)
        assert data["avg_power_w"] == (cell.energy.avg_power_w if cell.energy else None)
        for key, value in latency_to_dict(cell).items():
            assert data[key] == value, key


@SETTINGS
@given(run=runs(), data=st.data())
def test_a_wrongly_typed_value_is_refused_naming_the_file_and_the_place(
    tmp_path: Path, run: RunResult, data: st.DataObject
) -> None:
    path = tmp_path / "results.json"
    save_run(run, path)
    document = json.loads(path.read_text())
    places = [(where, kind) for where, kind in typed_places(document) if kind is not type(None)]
    where, kind = data.draw(st.sampled_from(places))
    path.write_text(json.dumps(retype(document, where, kind)))
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert_names_the_place(str(refused.value), path, where)


@SETTINGS
@given(run=runs())
def test_a_version_1_file_reads_as_its_run_without_figures_or_loads(
    tmp_path: Path, run: RunResult
) -> None:
    """Version 1 cells had neither ``figures`` nor ``loads``: such a file reads as the same run
    with both empty (schema migration ``update_to_2``)."""
    path = tmp_path / "results.json"
    save_run(run, path)
    document = json.loads(path.read_text())
    assert document["schema_version"] == 2
    document["schema_version"] = 1
    for cell in document["cells"]:
        del cell["figures"], cell["loads"]
    path.write_text(json.dumps(document))
    expected = [replace(cell, figures={}, loads=()) for cell in run.cells]
    assert read_results(path) == replace(run, cells=tuple(expected))
