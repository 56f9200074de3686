"""``baseline accept``'s rules, by property (mutmut's first full run left 78 of accept's 314
mutants alive): what a re-accepted cell keeps, what an OOM cell records, which provenance
entries survive, when a run is dated, and how the hardware and software are described.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import BUILT_INS
from bloomperf.store.baseline import EXPECT_OOM, OWN_FIELDS, Provenance
from bloomperf.store.baseline.accept import (
    accept_run,
    baseline_cell_of,
    describe_hardware,
    describe_software,
    provenance_of_run,
    software_environment,
)
from bloomperf.store.latency import per_cycle
from bloomperf.store.results import CellResult, Outcome
from tests.builders import GiB, bloom_run, ok_cell, tiny_run

STEPS = ((50.0, 10.0, 11.0, 30.0),) * 3
tolerances = st.none() | st.sampled_from((0.02, 0.07, 0.3))
GPU_TOLERANCES = {m.name: m.tolerance_for(cpu=False) for m in BUILT_INS}
CPU_TOLERANCES = {m.name: m.tolerance_for(cpu=True) for m in BUILT_INS}


def measured(batch_size: int = 1) -> CellResult:
    return replace(ok_cell(2.0, batch_size=batch_size), samples_step_ms=STEPS)


# The figures a run's cell yields beside its own fields (a serving sweep's are not among them).
LATENCY = tuple(m.name for m in BUILT_INS if m.name not in OWN_FIELDS and m.samples(measured()))


@settings(max_examples=40, deadline=None)
@given(
    topology=st.sampled_from(("cpu", "8xA100-SXM4-80GB")),
    ms=tolerances,
    memory=tolerances,
    load=tolerances,
    latency=st.dictionaries(st.sampled_from(LATENCY), tolerances),
)
def test_a_reaccepted_cell_keeps_the_tolerances_it_had(
    topology: str,
    ms: float | None,
    memory: float | None,
    load: float | None,
    latency: dict[str, float | None],
) -> None:
    """A tolerance someone set on a cell survives every later accept; where the cell had none,
    the topology's default applies (CPU: timing recorded, not judged)."""
    first = baseline_cell_of(measured(), None, topology, "p1")
    defaults = CPU_TOLERANCES if topology == "cpu" else GPU_TOLERANCES
    assert first.ms_per_token_tolerance == defaults["ms_per_token"]
    assert first.peak_memory_tolerance == defaults["peak_memory"]
    assert first.load_time_tolerance == defaults["load_time"]
    latency_default = {m: defaults[m] for m in LATENCY}
    assert first.figure_tolerances == latency_default
    tuned = replace(
        first,
        ms_per_token_tolerance=ms,
        peak_memory_tolerance=memory,
        load_time_tolerance=load,
        figure_tolerances=latency,
    )
    again = baseline_cell_of(measured(), tuned, topology, "p2")
    assert again.ms_per_token_tolerance == (ms if ms is not None else defaults["ms_per_token"])
    assert again.peak_memory_tolerance == (
        memory if memory is not None else defaults["peak_memory"]
    )
    assert again.load_time_tolerance == (load if load is not None else defaults["load_time"])
    kept = {m: t for m, t in latency.items() if t is not None}
    assert again.figure_tolerances == latency_default | kept
    assert again.provenance == "p2"


@pytest.mark.parametrize("topology", ["cpu", "8xA100-SXM4-80GB"])
def test_an_oom_cell_records_the_boundary_and_no_figure(topology: str) -> None:
    oom = replace(measured(), outcome=Outcome.OOM, message="CUDA out of memory")
    cell = baseline_cell_of(oom, None, topology, "p")
    assert cell.outcome == EXPECT_OOM
    assert (cell.ms_per_token, cell.ms_per_token_tolerance, cell.ms_per_token_samples) == (
        None,
        None,
        (),
    )
    assert (cell.peak_memory_bytes, cell.peak_memory_tolerance) == (None, None)
    assert cell.figure_samples == {}
    # The load happened before the OOM: its time is a figure like any other.
    assert cell.load_time_s == oom.load_time_s
    ok = baseline_cell_of(measured(), None, topology, "p")
    assert ok.ms_per_token_samples == measured().samples_ms_per_token
    assert ok.figure_samples == per_cycle(STEPS)
    assert ok.peak_memory_bytes == measured().peak_memory_bytes


def test_a_cell_without_a_load_time_has_no_load_tolerance() -> None:
    cell = baseline_cell_of(replace(measured(), load_time_s=None), None, "8xA100-SXM4-80GB", "p")
    assert (cell.load_time_s, cell.load_time_tolerance) == (None, None)
    assert cell.ms_per_token_tolerance == GPU_TOLERANCES["ms_per_token"]


@pytest.mark.parametrize(
    "details",
    [{}, {"serving": {"rates": [1.0, 4.0]}}, {"device_map": "auto", "serving": {"rates": [2.0]}}],
)
def test_the_baseline_keeps_only_the_details_a_report_draws(details: dict[str, object]) -> None:
    """A serving sweep's rates are kept to draw against; a device map describes one run only."""
    cell = baseline_cell_of(replace(measured(), details=details), None, "cpu", "p")
    assert cell.details == ({"serving": details["serving"]} if "serving" in details else {})


@settings(max_examples=30, deadline=None)
@given(
    first=st.sets(st.sampled_from((1, 2, 4)), min_size=1),
    second=st.sets(st.sampled_from((1, 2, 4)), min_size=1),
)
def test_provenance_lists_exactly_the_entries_cells_still_name(
    first: set[int], second: set[int]
) -> None:
    night_one = replace(
        bloom_run(*(measured(b) for b in sorted(first))), finished_at="2026-11-01T03:00:00Z"
    )
    night_two = replace(
        bloom_run(*(measured(b) for b in sorted(second))), finished_at="2026-11-02T03:00:00Z"
    )
    once = accept_run(night_one, None, source="one.json")
    twice = accept_run(night_two, once, source="two.json")
    named = {c.provenance for c in twice.cells}
    assert {p.id for p in twice.provenance} == named
    assert len(twice.provenance) == len(named)
    assert ("run-2026-11-01T03:00:00Z" in named) == bool(first - second)
    assert twice.provenance[-1].id == "run-2026-11-02T03:00:00Z"
    # The cells of the second night are the second night's, with its figures.
    assert {c.batch_size for c in twice.cells if c.provenance.endswith("11-02T03:00:00Z")} == second


@pytest.mark.parametrize(
    ("finished", "started", "now", "dated"),
    [
        (
            "2026-11-02T03:10:00Z",
            "2026-11-02T01:30:00Z",
            "2026-12-01T00:00:00Z",
            "2026-11-02T03:10:00Z",
        ),
        ("", "2026-11-02T01:30:00Z", "2026-12-01T00:00:00Z", "2026-11-02T01:30:00Z"),
        ("", "", "2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z"),
    ],
)
def test_a_run_is_dated_when_it_finished_else_started_else_now(
    finished: str, started: str, now: str, dated: str
) -> None:
    run = replace(bloom_run(measured()), finished_at=finished, started_at=started)
    provenance = provenance_of_run(run, "r.json", now)
    assert (provenance.id, provenance.date, provenance.source) == (f"run-{dated}", dated, "r.json")


def test_refusals_name_what_they_refuse() -> None:
    broken = replace(measured(8), outcome=Outcome.TIMEOUT)
    run = bloom_run(measured(), broken)
    with pytest.raises(BloomperfError) as refused:
        accept_run(run, None, source="r.json")
    assert str(refused.value) == (
        "r.json: refusing cells that did not finish: ds-inference-fp16-bs8 (timeout); "
        "use --force to accept the rest"
    )
    forced = accept_run(run, None, source="r.json", force=True)
    assert [c.batch_size for c in forced.cells] == [1]
    with pytest.raises(BloomperfError) as other:
        accept_run(tiny_run(measured()), forced, source="t.json")
    assert str(other.value) == "t.json: model 'tiny' is not the baseline's 'bloom-176b'"


FINGERPRINT = {
    "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
    "cpu_model": "AMD EPYC 7763",
    "cpu_cores": 256,
    "ram_bytes": 2015 * GiB,
    "packages": {"torch": "2.4.0", "deepspeed": "0.14.4"},
    "python": "3.11.7",
    "driver": "550.54.15",
    "cuda_driver": "12.4",
    "cuda_torch": "12.1",
    "nccl": "2.20.5",
    "provenance": {"git": {"commit": "c32c671", "dirty": True}},
}


def test_the_hardware_as_the_fingerprint_describes_it() -> None:
    assert describe_hardware(FINGERPRINT, "8xA100-SXM4-80GB") == (
        "8 x NVIDIA A100-SXM4-80GB; AMD EPYC 7763, 256 cores, 2015 GiB RAM"
    )
    mixed = {"gpus": ["A", "B", "B"], "cpu_model": "Xeon"}
    assert describe_hardware(mixed, "t") == "1 x A + 2 x B; Xeon"
    assert describe_hardware({"cpu_model": "Xeon", "ram_bytes": 24 * GiB}, "t") == (
        "Xeon, 24 GiB RAM"
    )
    assert describe_hardware({}, "cpu") == "cpu"
    assert describe_hardware({"gpus": [], "cpu_model": ""}, "1xH200") == "1xH200"


def test_the_software_and_back() -> None:
    software = describe_software(FINGERPRINT)
    assert software == {
        "torch": "2.4.0",
        "deepspeed": "0.14.4",
        "python": "3.11.7",
        "driver": "550.54.15",
        "cuda_driver": "12.4",
        "cuda_torch": "12.1",
        "nccl": "2.20.5",
        "bloomperf_commit": "c32c671",
        "bloomperf_dirty": "yes",
    }
    clean = {**FINGERPRINT, "provenance": {"git": {"commit": "abc", "dirty": False}}}
    assert describe_software(clean)["bloomperf_dirty"] == "no"
    assert "bloomperf_dirty" not in describe_software(
        {**FINGERPRINT, "provenance": {"git": {"commit": "abc"}}}
    )
    assert describe_software({"python": "", "packages": "not a map"}) == {}
    run = replace(bloom_run(measured(), environment=FINGERPRINT), finished_at="2026-11-02")
    provenance = provenance_of_run(run, "r.json", None)
    # What a later run's fingerprint is compared with: the same facts, read back.
    assert describe_software(software_environment(provenance)) == provenance.software


def test_accept_dates_keeps_and_describes_through_the_whole_command() -> None:
    """accept_run itself: an undated run is dated ``now``; a re-accepted cell keeps the
    tolerance set on it; a run without a fingerprint is described by its topology."""
    undated = replace(bloom_run(measured()), started_at="", finished_at="")
    first = accept_run(undated, None, source="r.json", now="2026-12-01T00:00:00Z")
    assert [p.id for p in first.provenance] == ["run-2026-12-01T00:00:00Z"]
    assert first.provenance[0].hardware == "8xA100-SXM4-80GB"
    assert first.topology_description == "8xA100-SXM4-80GB"
    tuned = replace(first, cells=(replace(first.cells[0], ms_per_token_tolerance=0.02),))
    again = accept_run(undated, tuned, source="r.json", now="2026-12-02T00:00:00Z")
    assert again.cells[0].ms_per_token_tolerance == 0.02


def test_a_fingerprint_of_the_wrong_types_is_described_by_the_topology() -> None:
    assert describe_hardware({"cpu_model": 5, "gpus": "A100"}, "cpu") == "cpu"


@pytest.mark.parametrize(
    ("software", "git"),
    [
        ({"torch": "2.4.0"}, None),
        ({"torch": "2.4.0", "bloomperf_commit": "abc"}, {"commit": "abc", "dirty": None}),
        (
            {"torch": "2.4.0", "bloomperf_commit": "abc", "bloomperf_dirty": "no"},
            {"commit": "abc", "dirty": False},
        ),
    ],
)
def test_a_provenance_reads_back_as_the_fingerprint_it_came_from(
    software: dict[str, str], git: dict[str, object] | None
) -> None:
    environment = software_environment(
        Provenance("p", "s", "2026-11-30", "cpu", {**software, "python": "3.11.7"})
    )
    assert environment["packages"] == {"torch": "2.4.0"}
    assert environment["python"] == "3.11.7"
    assert environment.get("provenance") == (None if git is None else {"git": git})
