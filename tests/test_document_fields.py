"""Every field of a full baseline and a full results file, one at a time (the round-trip
properties sample places; these visit each one):

* replaced by a value of the wrong type, the file is refused in one line that starts with the
  file's path and names the place;
* removed, an optional field reads as its empty default and a required one is refused naming it;
* the numeric limits a field has (new tokens at least 1, recorded cycles positive) hold at the
  limit itself.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline import EXPECT_OK, Baseline, BaselineCell, LoadTime, Provenance
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.contention import CycleLoad
from bloomperf.store.results import (
    MAX_BATCH_SIZE,
    MAX_CYCLES,
    MAX_NEW_TOKENS,
    MAX_RUN_SAMPLES,
    EnergyReading,
    MemoryReading,
    Outcome,
)
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from bloomperf.store.telemetry import Telemetry
from tests.builders import ok_cell, tiny_run
from tests.fuzzing import assert_names_the_place, parent_of, retype, typed_places

PROVENANCE = (
    Provenance("blog", "the blog's tables", "2022-10-01", "8xA100", {"deepspeed": "0.7.2"}),
    Provenance("run", "bloomperf run", "2026-11-30", "cpu", {}),
)
FULL_BASELINE = Baseline(
    "8xA100-SXM4-80GB",
    ("a100x8",),
    "8 x A100 80GB",
    "bloom-176b",
    ("bigscience-bloom",),
    70,
    100,
    PROVENANCE,
    (
        BaselineCell(
            "accelerate",
            "bf16",
            1,
            EXPECT_OK,
            10.0,
            0.05,
            2,
            (10.0, 10.1),
            100,
            0.1,
            60.0,
            0.2,
            "run",
            {"ttft_ms": (1.0, 1.1)},
            {"ttft_ms": 0.1},
            {"serving": {"effective_rps": 6.0}},
        ),
    ),
    (LoadTime("accelerate", "bf16", "pre-sharded", 60.0, 0.2, "blog"),),
    ("from the blog",),
)
FULL_CELL = replace(
    ok_cell(2.0),
    backend="accelerate",
    dtype="fp32",
    load_memory=MemoryReading("nvml", 10, (5, 5), 4, 3, 6, "r", 1, (("n0", 10),)),
    generate_memory=MemoryReading("nvml", 20, (10, 10), 8, 6, 12, "", 2, (("n0", 20),)),
    message="ok",
    details={"tp": 2},
    samples_step_ms=((5.0, 1.0, 1.1), (5.1, 1.0, 1.2), (5.0, 1.1, 1.0)),
    energy=EnergyReading("nvml", 100.0, 2.0, 300, ""),
    telemetry=Telemetry(4, (1400, 1410), (1593, 1593), 300.0, 60, 0, ("throttled",), ""),
    # A figure of a metric that measures its own (one a missing package registered included),
    # and each timed cycle's load with every optional part.
    figures={"sm_util_pct": (80.0, 81.5, 79.0), "not_installed_here": (1.0,)},
    loads=(CycleLoad(1.5, 0.25, 0.5, 2, 0, 2),) * 3,
)
FULL_RUN = replace(tiny_run(FULL_CELL), synthetic="slowdown 10 %")


def write(path: Path, save: Callable[[Any, Path], None], full: object, document: Any) -> Path:
    """``full`` saved at ``path``, then replaced by ``document`` (its edited JSON) if given."""
    save(full, path)
    if document is not None:
        path.write_text(json.dumps(document))
    return path


def write_baseline(folder: Path, document: dict[str, Any] | None = None) -> Path:
    return write(folder / "baseline.json", save_baseline, FULL_BASELINE, document)


def write_results(folder: Path, document: dict[str, Any] | None = None) -> Path:
    return write(folder / "results.json", save_run, FULL_RUN, document)


KINDS = {
    "baseline": (write_baseline, load_baseline),
    "results": (write_results, read_results),
}


def places(kind: str) -> list[tuple[tuple[Any, ...], type]]:
    document = full_document(kind)
    return [
        (where, type_)
        for where, type_ in typed_places(document)
        if type_ is not type(None) and where[0] not in ("kind", "schema_version")
    ]


def full_document(kind: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        write_kind, _ = KINDS[kind]
        data: dict[str, Any] = json.loads(write_kind(Path(folder)).read_text())
        return data


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_field_of_the_wrong_type_is_refused_naming_its_place(
    tmp_path: Path, kind: str
) -> None:
    write_kind, read = KINDS[kind]
    for where, type_ in places(kind):
        path = write_kind(tmp_path, retype(full_document(kind), where, type_))
        with pytest.raises(BloomperfError) as refused:
            read(path)
        assert_names_the_place(str(refused.value), path, where)


# Fields a file may leave out, and what they read as then.
OPTIONAL_BASELINE: dict[tuple[Any, ...], Callable[[Baseline], object]] = {
    ("topology", "aliases"): lambda b: b.topology_aliases == (),
    ("topology", "description"): lambda b: b.topology_description == "",
    ("model", "aliases"): lambda b: b.model_aliases == (),
    ("model", "layers"): lambda b: b.model_layers is None,
    ("workload",): lambda b: b.new_tokens is None,
    ("workload", "new_tokens"): lambda b: b.new_tokens is None,
    ("notes",): lambda b: b.notes == (),
    ("cells",): lambda b: b.cells == (),  # an empty baseline: it judges nothing
    ("load_times",): lambda b: b.load_times == (),
    ("cells", 0, "ms_per_token_samples"): lambda b: b.cells[0].ms_per_token_samples == (),
    ("cells", 0, "figures"): lambda b: b.cells[0].figure_samples == {},
    ("cells", 0, "provenance"): None,  # then it names no provenance: refused (see below)
    ("load_times", 0, "provenance"): None,
    ("load_times", 0, "variant"): lambda b: b.load_times[0].variant == "",
    ("cells", 0, "details"): lambda b: b.cells[0].details == {},
    ("provenance", 0, "software"): lambda b: b.provenance[0].software == {},
}
REQUIRED_BASELINE = [
    ("topology",),
    ("topology", "id"),
    ("model",),
    ("model", "name"),
    ("provenance",),
    ("cells", 0, "backend"),
    ("cells", 0, "outcome"),
    ("cells", 0, "batch_size"),
    ("load_times", 0, "seconds"),
    ("provenance", 0, "id"),
    ("provenance", 0, "date"),
]


@pytest.mark.parametrize("where", sorted(OPTIONAL_BASELINE, key=str))
def test_an_optional_baseline_field_may_be_left_out(tmp_path: Path, where: tuple[Any, ...]) -> None:
    document = copy.deepcopy(full_document("baseline"))
    node, key = parent_of(document, where)
    del node[key]
    path = write_baseline(tmp_path, document)
    check = OPTIONAL_BASELINE[where]
    if check is None:
        with pytest.raises(BloomperfError, match="names unknown provenance ''"):
            load_baseline(path)
        return
    assert check(load_baseline(path)), where


@pytest.mark.parametrize("where", REQUIRED_BASELINE, ids=str)
def test_a_required_baseline_field_left_out_is_refused_naming_it(
    tmp_path: Path, where: tuple[Any, ...]
) -> None:
    document = copy.deepcopy(full_document("baseline"))
    node, key = parent_of(document, where)
    del node[key]
    path = write_baseline(tmp_path, document)
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert_names_the_place(str(refused.value), path, where)


@pytest.mark.parametrize(
    ("where", "value", "accepted"),
    [
        (("workload", "new_tokens"), 1, True),
        (("workload", "new_tokens"), 0, False),
        (("cells", 0, "ms_per_token_samples", 0), 0.0, False),
        (("cells", 0, "ms_per_token_samples", 0), -1.0, False),
        (("cells", 0, "figures", "ttft_ms", "samples", 0), 0.0, False),
        (("cells", 0, "ms_per_token_tolerance"), 0.0, True),
        (("cells", 0, "ms_per_token_tolerance"), 0.999, True),
        (("cells", 0, "ms_per_token"), 0.0, False),
        (("cells", 0, "load_time_s"), 0.0, False),
        (("load_times", 0, "seconds"), 0, False),
        (("cells", 0, "batch_size"), 0, False),
        (("cells", 0, "batch_size"), MAX_BATCH_SIZE, True),
        (("cells", 0, "batch_size"), MAX_BATCH_SIZE + 1, False),
        (("cells", 0, "ms_per_token_decimals"), 12, True),
        (("cells", 0, "ms_per_token_decimals"), 13, False),
        (("topology", "id"), "eight GPUs!", False),
        (("topology", "aliases", 0), "eight GPUs!", False),
        (("model", "name"), "BLOOM 176B!", False),
        (("model", "aliases", 0), "BLOOM 176B!", False),
        (("provenance", 0, "software", "deepspeed"), 7, False),
        (("provenance", 0, "software"), ["deepspeed"], False),
        (("load_times", 0), 7, False),
    ],
    ids=str,
)
def test_baseline_limits_hold_at_the_limit(
    tmp_path: Path, where: tuple[Any, ...], value: object, accepted: bool
) -> None:
    document = copy.deepcopy(full_document("baseline"))
    node, key = parent_of(document, where)
    node[key] = value
    path = write_baseline(tmp_path, document)
    if accepted:
        load_baseline(path)
        return
    with pytest.raises(BloomperfError) as refused:
        load_baseline(path)
    assert_names_the_place(str(refused.value), path, where)


def test_the_full_documents_read_back_whole(tmp_path: Path) -> None:
    assert replace(load_baseline(write_baseline(tmp_path)), path="") == FULL_BASELINE
    assert read_results(write_results(tmp_path)) == FULL_RUN
    assert FULL_RUN.cells[0].outcome is Outcome.OK


# Fields a results file may leave out, and what they read as then.
OPTIONAL_RESULTS: dict[tuple[Any, ...], Callable[[Any], object]] = {
    ("cells", 0, "message"): lambda r: r.cells[0].message == "",
    ("cells", 0, "details"): lambda r: r.cells[0].details == {},
    ("cells", 0, "energy", "reason"): lambda r: r.cells[0].energy.reason == "",
    ("cells", 0, "load_memory", "reason"): lambda r: r.cells[0].load_memory.reason == "",
    ("cells", 0, "load_memory", "per_device_bytes"): lambda r: (
        r.cells[0].load_memory.per_device_bytes == ()
    ),
    ("cells", 0, "load_memory", "per_node_bytes"): lambda r: (
        r.cells[0].load_memory.per_node_bytes == ()
    ),
    ("cells", 0, "samples_step_ms"): lambda r: r.cells[0].samples_step_ms == (),
    ("cells", 0, "telemetry"): lambda r: r.cells[0].telemetry is None,
    ("started_at",): lambda r: r.started_at == "",
    ("synthetic",): lambda r: r.synthetic == "",
    ("complete",): lambda r: r.complete is False,
    ("environment",): lambda r: r.environment == {},
    ("finished_at",): lambda r: r.finished_at == "",
    ("model", "path"): lambda r: r.model.path == "",
    ("model", "layers"): lambda r: r.model.layers == 0,
    ("model", "parameters"): lambda r: r.model.parameters == 0,
    ("workload", "prompts"): lambda r: r.workload.prompts == (),
}


@pytest.mark.parametrize("where", sorted(OPTIONAL_RESULTS, key=str), ids=str)
def test_an_optional_results_field_may_be_left_out(tmp_path: Path, where: tuple[Any, ...]) -> None:
    document = copy.deepcopy(full_document("results"))
    node, key = parent_of(document, where)
    del node[key]
    assert OPTIONAL_RESULTS[where](read_results(write_results(tmp_path, document))), where


MAX_STEPS = MAX_NEW_TOKENS + 1  # a prefill step and one per new token


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        (("cells", 0, "batch_size"), 0, None),
        (("cells", 0, "batch_size"), MAX_BATCH_SIZE, ""),
        (("cells", 0, "batch_size"), MAX_BATCH_SIZE + 1, None),
        (("cells", 0, "samples_step_ms", 0, 1), 0.0, None),
        (("cells", 0, "samples_step_ms", 0), [1.0] * MAX_STEPS, ""),
        (
            ("cells", 0, "samples_step_ms", 0),
            [1.0] * (MAX_STEPS + 1),
            f"cell 0 samples_step_ms[0]: a cycle of {MAX_STEPS + 1} steps, over {MAX_STEPS}",
        ),
        (("cells", 0, "samples_ms_per_token"), [1.0] * MAX_CYCLES, ""),
        (
            ("cells", 0, "samples_ms_per_token"),
            [1.0] * (MAX_CYCLES + 1),
            f"cell 0: field 'samples_ms_per_token' has {MAX_CYCLES + 1} entries, over {MAX_CYCLES}",
        ),
        (("workload", "new_tokens"), 0, None),
        (("workload", "new_tokens"), MAX_NEW_TOKENS, ""),
        (("workload", "new_tokens"), MAX_NEW_TOKENS + 1, None),
        (("workload", "cycles"), 0, None),
        (("workload", "cycles"), MAX_CYCLES, ""),
        (("workload", "cycles"), MAX_CYCLES + 1, None),
        (("workload", "warmup"), MAX_CYCLES, ""),
        (("workload", "warmup"), MAX_CYCLES + 1, None),
        (("topology",), "eight GPUs!", None),
        (("model", "name"), "BLOOM 176B!", None),
        (("cells", 0, "details"), [1], None),
        (("environment",), [1], None),
        (
            ("cells", 0, "outcome"),
            "crashed",
            "cell 0: unknown outcome 'crashed' (valid: ok, oom, error, timeout, skipped)",
        ),
        (
            ("cells", 0, "load_memory", "per_node_bytes", 0),
            ["n0"],
            "cell 0: per_node_bytes[0] must be a [node, bytes] pair",
        ),
    ],
    ids=str,
)
def test_results_limits_hold_at_the_limit(
    tmp_path: Path, where: tuple[Any, ...], value: object, says: str | None
) -> None:
    """``says``: "" accepted; None refused naming the place; else refused with that line."""
    document = copy.deepcopy(full_document("results"))
    node, key = parent_of(document, where)
    node[key] = value
    path = write_results(tmp_path, document)
    if says == "":
        read_results(path)
        return
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    if says is None:
        assert_names_the_place(str(refused.value), path, where)
    else:
        assert str(refused.value) == f"{path} {says}"


def test_a_run_of_too_many_samples_in_all_is_refused(tmp_path: Path) -> None:
    cells = [
        replace(
            FULL_CELL, batch_size=b, samples_ms_per_token=(1.0,) * MAX_CYCLES, samples_step_ms=()
        )
        for b in range(1, MAX_RUN_SAMPLES // MAX_CYCLES + 1)
    ]
    path = tmp_path / "results.json"
    save_run(replace(FULL_RUN, cells=tuple(cells)), path)
    assert len(read_results(path).cells) == len(cells)  # exactly the limit: read
    more = [
        *cells,
        replace(
            FULL_CELL,
            batch_size=len(cells) + 1,
            samples_ms_per_token=(1.0,),
            samples_step_ms=((1.0, 1.0),),
        ),
    ]
    save_run(replace(FULL_RUN, cells=tuple(more)), path)
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    total = MAX_RUN_SAMPLES + 2
    assert str(refused.value) == (f"{path}: {total} timed samples in all, over {MAX_RUN_SAMPLES}")


def test_a_cell_twice_in_one_results_file_is_refused(tmp_path: Path) -> None:
    document = copy.deepcopy(full_document("results"))
    document["cells"].append(document["cells"][0])
    path = write_results(tmp_path, document)
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value) == f"{path}: cell accelerate-fp32-bs1 appears twice"
