"""Reading results in every format a run leaves (``store/results/files.py``), in process: a
results file, a pytest-benchmark JSON file (each benchmark's own cell, the cells that timed
nothing carried in the run's context, another plugin's benchmarks beside them), a storage folder
(its newest file), several files merged; and each refusal, one line naming the file."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.store.results import MAX_CELLS, CellResult, Outcome, RunResult
from bloomperf.store.results.codec import cell_to_dict, run_to_dict, save_run
from bloomperf.store.results.files import (
    merge_runs,
    newest_storage_file,
    read_many,
    read_results,
    refuse_synthetic,
)
from tests.builders import ok_cell, tiny_run

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def cell(batch_size: int, outcome: Outcome, ms: float = 2.0) -> CellResult:
    if outcome is Outcome.OK:
        return ok_cell(ms, batch_size=batch_size)
    return CellResult("ds-inference", "fp16", batch_size, outcome, message=outcome.value)


def bench(c: CellResult, context: dict[str, Any], name: str = "") -> dict[str, Any]:
    """A benchmark entry as the bloomperf plugin writes it."""
    return {
        "name": name or f"test_cell[{c.id}]",
        "fullname": f"tests/test_bloom.py::test_cell[{c.id}]" if not name else "",
        "extra_info": {"bloomperf": cell_to_dict(c), "bloomperf_run": context},
    }


def context_of(run: RunResult, carried: list[CellResult]) -> dict[str, Any]:
    return {**run_to_dict(run), "cells": [cell_to_dict(c) for c in carried]}


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


OUTCOMES = st.sampled_from(list(Outcome))


@SETTINGS
@given(
    outcomes=st.lists(OUTCOMES, min_size=1, max_size=6),
    others=st.integers(0, 2),
    stale=st.booleans(),
    order=st.randoms(use_true_random=False),
)
def test_a_benchmark_file_reads_as_the_run_its_cells_came_from(
    tmp_path: Path, outcomes: list[Outcome], others: int, stale: bool, order: Any
) -> None:
    """Cells that timed (OK) are benchmarks of their own; the others travel in the run's
    context. Another plugin's benchmarks are skipped, and a benchmark's own cell wins over a
    stale copy of it in the context, wherever the benchmarks are in the file."""
    cells = [cell(b, o) for b, o in enumerate(outcomes, 1)]
    run = tiny_run(*cells)
    timed = [c for c in cells if c.outcome is Outcome.OK]
    carried = [c for c in cells if c.outcome is not Outcome.OK]
    if stale and timed:  # an earlier session's failure of a cell that has since timed
        carried.append(replace(timed[0], outcome=Outcome.ERROR, samples_ms_per_token=()))
    context = context_of(run, carried)
    benchmarks = [bench(c, context) for c in timed]
    benchmarks += [{"name": f"other_{i}", "extra_info": {"x": 1}} for i in range(others)]
    order.shuffle(benchmarks)
    if not timed:
        benchmarks.append(bench(carried[0], context))  # a benchmark of its own for once
    path = write(tmp_path / "bench.json", {"benchmarks": benchmarks, "datetime": "unused"})
    found = read_results(path)
    assert {c.id: c for c in found.cells} == {c.id: c for c in cells}
    assert replace(found, cells=run.cells) == run


def test_a_benchmark_files_finish_is_its_contexts_else_the_files_datetime(tmp_path: Path) -> None:
    run = tiny_run(cell(1, Outcome.OK))
    for finished, expected in (("2026-11-29T10:05:00Z", "2026-11-29T10:05:00Z"), ("", "then")):
        context = context_of(replace(run, finished_at=finished), [])
        data = {"benchmarks": [bench(run.cells[0], context)], "datetime": "then"}
        assert read_results(write(tmp_path / "b.json", data)).finished_at == expected


NAMED = "{path} tests/test_bloom.py::test_cell[{id}]"
NONE_OURS = (
    "{path}: no bloomperf cells in this pytest-benchmark file"
    " (was it written with the bloomperf plugin?)"
)


def unnamed_copy(benchmarks: list[Any]) -> list[Any]:
    return [*benchmarks, {"extra_info": benchmarks[0]["extra_info"]}]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: [*b, 7], "{path}: benchmark 1 is not an object"),
        (lambda b: [*b, b[0]], NAMED + ": cell {id} appears twice"),
        (unnamed_copy, "{path} benchmark 1: cell {id} appears twice"),
        (lambda b: [{"name": "other", "extra_info": {}}], NONE_OURS),
    ],
    ids=["not-an-object", "twice", "twice-unnamed", "none-of-ours"],
)
def test_a_broken_benchmark_file_is_refused_in_one_line_naming_it(
    tmp_path: Path, edit: Any, message: str
) -> None:
    run = tiny_run(cell(1, Outcome.OK))
    benchmarks = edit([bench(run.cells[0], context_of(run, []))])
    path = write(tmp_path / "b.json", {"benchmarks": benchmarks})
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value) == message.format(path=path, id=run.cells[0].id)


def test_a_benchmark_of_another_run_is_refused_naming_both(tmp_path: Path) -> None:
    one, two = tiny_run(cell(1, Outcome.OK)), tiny_run(cell(2, Outcome.OK), topology="1xH200")
    benchmarks = [
        bench(one.cells[0], context_of(one, [])),
        bench(two.cells[0], context_of(two, [])),
    ]
    path = write(tmp_path / "b.json", {"benchmarks": benchmarks})
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    name = f"{path} tests/test_bloom.py::test_cell[{two.cells[0].id}]"
    assert str(refused.value) == (
        f"{name}: from another run (1xH200, tiny) than the first benchmark (cpu, tiny)"
    )


def test_a_benchmark_file_of_too_many_cells_is_refused(tmp_path: Path) -> None:
    run = tiny_run(cell(1, Outcome.OK))
    carried = [cell(b, Outcome.OOM) for b in range(2, MAX_CELLS + 2)]
    context = context_of(run, carried)
    path = write(tmp_path / "b.json", {"benchmarks": [bench(run.cells[0], context)]})
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value) == f"{path}: {MAX_CELLS + 1} cells, over {MAX_CELLS}"
    context["cells"] = context["cells"][:-1]  # exactly the most
    assert (
        len(read_results(write(path, {"benchmarks": [bench(run.cells[0], context)]})).cells)
        == MAX_CELLS
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "{path}: expected a JSON object, found list"),
        (
            {"kind": "bloomperf-baseline"},
            "{path}: is a baseline, not results (pass it with --baseline)",
        ),
        ({"cells": []}, "{path}: neither a bloomperf results file nor a pytest-benchmark file"),
        ({"kind": "bloomperf-serving", "version": 9}, "{path}: serving results version 9, want 1"),
    ],
    ids=["list", "baseline", "neither", "serving-v9"],
)
def test_a_file_of_no_results_format_is_refused_saying_which_it_is(
    tmp_path: Path, data: object, message: str
) -> None:
    path = write(tmp_path / "r.json", data)
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value) == message.format(path=path)


def storage(folder: Path, name: str, run: RunResult, mtime: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = write(folder / name, {"benchmarks": [bench(run.cells[0], context_of(run, []))]})
    os.utime(path, (mtime, mtime))
    return path


def test_a_storage_folder_means_its_newest_file_by_run_number_then_time(tmp_path: Path) -> None:
    """By run number first (a copy resets times), then modification time (between machine
    folders), then name; in the folder itself or one machine folder down."""
    runs = [tiny_run(cell(b, Outcome.OK)) for b in (1, 2, 3, 4)]
    storage(tmp_path, "0002_b.json", runs[0], 300)
    storage(tmp_path / "Linux-CPython-3.11", "0003_a.json", runs[1], 100)
    storage(tmp_path, "0001_z.json", runs[2], 900)
    assert newest_storage_file(tmp_path).name == "0003_a.json"
    assert read_results(tmp_path) == runs[1]
    storage(tmp_path / "Darwin", "0003_a.json", runs[3], 200)  # same number, newer
    assert newest_storage_file(tmp_path) == tmp_path / "Darwin" / "0003_a.json"
    storage(tmp_path / "Darwin", "0003_b.json", runs[3], 200)  # same number and time: by name
    assert newest_storage_file(tmp_path).name == "0003_b.json"
    (tmp_path / "notes.json").write_text("{}")  # not a storage file name: never read
    (tmp_path / "a" / "b").mkdir(parents=True)
    storage(tmp_path / "a" / "b", "0009_deep.json", runs[0], 999)  # two levels down: not looked at
    assert newest_storage_file(tmp_path).name == "0003_b.json"


def test_a_folder_with_no_storage_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(BloomperfError) as refused:
        read_results(tmp_path)
    assert str(refused.value) == f"{tmp_path}: no pytest-benchmark files (NNNN_name.json) in it"


def test_synthetic_results_are_refused_unless_allowed() -> None:
    run = tiny_run(cell(1, Outcome.OK))
    fake = replace(run, synthetic="slowdown 10 % injected")
    assert refuse_synthetic(run, "r.json", False) is run
    assert refuse_synthetic(fake, "r.json", True) is fake
    with pytest.raises(BloomperfError) as refused:
        refuse_synthetic(fake, "r.json", False)
    assert str(refused.value) == (
        "r.json: synthetic results (slowdown 10 % injected); --allow-synthetic uses them anyway"
    )


def test_several_files_merge_later_ones_winning_per_cell(tmp_path: Path) -> None:
    first = tiny_run(cell(1, Outcome.OK, 2.0), cell(2, Outcome.OOM))
    second = tiny_run(cell(2, Outcome.OK, 3.0), cell(4, Outcome.OK, 5.0))
    third = tiny_run(cell(1, Outcome.ERROR))
    paths = []
    for index, run in enumerate((first, second, third)):
        save_run(run, tmp_path / f"{index}.json")
        paths.append(str(tmp_path / f"{index}.json"))
    merged = read_many(paths)
    assert {c.id: c for c in merged.cells} == {
        c.id: c for c in (third.cells[0], second.cells[0], second.cells[1])
    }
    assert read_many(paths[:1]) == first
    other = tiny_run(cell(1, Outcome.OK), topology="1xH200")
    with pytest.raises(BloomperfError) as refused:
        merge_runs([first, second, other], ["a.json", "b.json", "c.json"])
    assert str(refused.value) == (
        "c.json: results of 1xH200 / tiny cannot be merged with a.json (cpu / tiny)"
    )


def one_benchmark_file(tmp_path: Path, edit: Any) -> tuple[Path, str]:
    """A valid one-benchmark file after ``edit(document, benchmark, extra)``; and the name its
    benchmark is refused under."""
    run = tiny_run(cell(1, Outcome.OK))
    entry = bench(run.cells[0], context_of(run, []))
    document = {"benchmarks": [entry], "datetime": "2026-12-01T00:00:00"}
    edit(document, entry, entry["extra_info"])
    path = write(tmp_path / "b.json", document)
    return path, f"{path} {entry.get('fullname') or entry.get('name') or 'benchmark 0'}"


def context(extra: dict[str, Any]) -> dict[str, Any]:
    context: dict[str, Any] = extra["bloomperf_run"]
    return context


# Each place of a benchmark file, broken, and the start of the one line that refuses it.
BROKEN = {
    "benchmarks": (lambda d, b, e: d.update(benchmarks={}), "{path}: field 'benchmarks'"),
    "name": (lambda d, b, e: b.update(fullname="", name=5), "{path} benchmark 0: field 'name'"),
    "extra_info": (lambda d, b, e: b.update(extra_info=[]), "{name}: field 'extra_info'"),
    "cell": (lambda d, b, e: e["bloomperf"].update(outcome=5), "{name}: field 'outcome'"),
    "context": (lambda d, b, e: e.update(bloomperf_run=[]), "{name}: field 'bloomperf_run'"),
    "context kind": (lambda d, b, e: context(e).update(kind="x"), "{name} bloomperf_run: not"),
    "context field": (lambda d, b, e: context(e).update(topology=5), "{name}: field 'topology'"),
    "datetime": (
        lambda d, b, e: (d.update(datetime=5), e["bloomperf_run"].update(finished_at="")),
        "{path}: field 'datetime'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("place", sorted(BROKEN))
def test_each_place_of_a_benchmark_file_is_named_when_broken(tmp_path: Path, place: str) -> None:
    edit, start = BROKEN[place]
    path, name = one_benchmark_file(tmp_path, edit)
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value).startswith(start.format(path=path, name=name)), refused.value


def test_what_a_benchmark_file_may_leave_out(tmp_path: Path) -> None:
    """No ``extra_info`` (another plugin's entry), no cells in the context, no ``datetime``
    and no finish in the context, a benchmark named only by ``name``."""

    def edit(document: dict[str, Any], entry: dict[str, Any], extra: dict[str, Any]) -> None:
        document["benchmarks"].append({"name": "another plugin's"})
        del extra["bloomperf_run"]["cells"], document["datetime"]
        extra["bloomperf_run"]["finished_at"] = ""
        entry.update(fullname="", name="only_a_name")

    path, _ = one_benchmark_file(tmp_path, edit)
    run = read_results(path)
    assert len(run.cells) == 1 and run.finished_at == ""
    twice = json.loads(path.read_text())
    twice["benchmarks"].append(twice["benchmarks"][0])
    with pytest.raises(BloomperfError) as refused:
        read_results(write(path, twice))
    assert str(refused.value).startswith(f"{path} only_a_name: cell ")


def test_a_benchmark_file_of_too_many_samples_in_all_is_refused_naming_it(tmp_path: Path) -> None:
    from bloomperf.store.results import MAX_CYCLES, MAX_RUN_SAMPLES

    count = MAX_RUN_SAMPLES // MAX_CYCLES + 1
    run = tiny_run(*(cell(b, Outcome.OK) for b in range(1, count + 1)))
    full = [replace(c, samples_ms_per_token=(1.0,) * MAX_CYCLES) for c in run.cells]
    context = context_of(run, [])
    path = write(tmp_path / "b.json", {"benchmarks": [bench(c, context) for c in full]})
    with pytest.raises(BloomperfError) as refused:
        read_results(path)
    assert str(refused.value) == (
        f"{path}: {count * MAX_CYCLES} timed samples in all, over {MAX_RUN_SAMPLES}"
    )


def test_a_path_that_is_no_regular_file_says_what_was_expected() -> None:
    with pytest.raises(BloomperfError) as refused:
        read_results(Path("/dev/null"))
    assert str(refused.value) == "/dev/null: is not a regular file, expected a results JSON file"
