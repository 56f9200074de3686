"""Hostile documents for every reader, through the real CLI (hypothesis).

Results files, baselines, pytest-benchmark JSON, pytest-benchmark storage folders, history
folders and hostfiles, each a valid file with a few random edits (wrong types, paths as names,
NaN, huge or denormal numbers, escapes, truncation, stray bytes). Whatever the file holds, the
answer is bloomperf's own: exit 0, 1, or 2 with one line, and nothing written outside the
folder it belongs in.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.harness.hostfile import read_hostfile
from tests.fuzzing import (
    FUZZ,
    NASTY_TEXT,
    assert_gate_answer,
    retyped,
    run_cli,
    serialised,
    with_duplicate_key,
)

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "results"
RESULTS = json.loads((DATA / "8xA100-SXM4-80GB.blog.results.json").read_text())
BENCHMARK = json.loads((DATA / "8xA100-SXM4-80GB.blog.benchmark.json").read_text())
BASELINE = json.loads((REPO / "baselines" / "8xA100-SXM4-80GB.bloom-176b.json").read_text())
# Small documents keep each example fast and the edits where the readers look: a few cells,
# and a few keys of the free-form environment and machine records.
ENVIRONMENT = {
    "gpus": ["NVIDIA A100-SXM4-80GB"],
    "cpu_cores": 64,
    "ram_bytes": 2**39,
    "cpu_model": "AMD EPYC",
    "packages": {"torch": "2.13.0"},
    "python": "3.11.7",
}
RESULTS["cells"] = RESULTS["cells"][:3]
RESULTS["environment"] = ENVIRONMENT
BENCHMARK["benchmarks"] = BENCHMARK["benchmarks"][:2]
BENCHMARK["machine_info"] = {"node": "gpu-01"}
BENCHMARK["commit_info"] = {}
for bench in BENCHMARK["benchmarks"]:
    bench["stats"] = {"min": bench["stats"]["min"], "rounds": bench["stats"]["rounds"]}
    bench["extra_info"]["bloomperf_run"]["environment"] = ENVIRONMENT
BASELINE["cells"] = BASELINE["cells"][:5]


def folder() -> Any:
    return tempfile.TemporaryDirectory(prefix="bloomperf-fuzz-")


def files_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@FUZZ
@given(data=serialised(RESULTS))
def test_results_files(data: bytes) -> None:
    with folder() as tmp:
        root = Path(tmp)
        results = root / "r.json"
        results.write_bytes(data)
        code, _, err = run_cli("diff", results, "--baselines", REPO / "baselines")
        assert_gate_answer(code, err)
        baselines = root / "baselines"
        baselines.mkdir()
        code, _, err = run_cli("baseline", "accept", results, "--baselines", baselines, "--force")
        assert_gate_answer(code, err)
        written = files_under(root) - {results, baselines}
        assert all(p.parent == baselines for p in written), written
        code, _, err = run_cli("history", "add", results, "--history", root / "history")
        assert_gate_answer(code, err)


@FUZZ
@given(data=serialised(BASELINE))
def test_baselines(data: bytes) -> None:
    with folder() as tmp:
        baselines = Path(tmp)
        (baselines / "b.json").write_bytes(data)
        code, _, err = run_cli("baseline", "show", baselines / "b.json")
        assert_gate_answer(code, err)
        code, _, err = run_cli(
            "diff", DATA / "8xA100-SXM4-80GB.blog.results.json", "--baselines", baselines
        )
        assert_gate_answer(code, err)


@FUZZ
@given(data=serialised(BENCHMARK))
def test_pytest_benchmark_json(data: bytes) -> None:
    with folder() as tmp:
        bench = Path(tmp) / "bench.json"
        bench.write_bytes(data)
        code, _, err = run_cli("diff", bench, "--baselines", REPO / "baselines")
        assert_gate_answer(code, err)


# ---- the strict readers: one rule for every format -------------------------------------------

DOCUMENTS = {"results": RESULTS, "baseline": BASELINE, "pytest-benchmark": BENCHMARK}


def diff_reading(kind: str, path: Path) -> tuple[int, str, str]:
    """`diff` reading ``path`` as what it is: the results, or the baseline judged against."""
    if kind == "baseline":
        return run_cli("diff", DATA / "8xA100-SXM4-80GB.blog.results.json", "--baseline", path)
    return run_cli("diff", path, "--baselines", REPO / "baselines")


@FUZZ
@given(kind=st.sampled_from(sorted(DOCUMENTS)), data=st.data())
def test_a_value_of_another_json_type_is_refused_in_every_format(kind: str, data: Any) -> None:
    """Never coerced (``bool("false")`` is True): exit 2 with one line naming the file."""
    # Of pytest-benchmark's own fields bloomperf reads only the names and the date.
    within = ("extra_info", "fullname", "name", "datetime") if kind == "pytest-benchmark" else ()
    document = data.draw(retyped(DOCUMENTS[kind], ("kind", "schema_version"), within))
    with folder() as tmp:
        path = Path(tmp) / "d.json"
        path.write_text(json.dumps(document))
        code, _, err = diff_reading(kind, path)
        assert_gate_answer(code, err)
        assert code == 2 and str(path) in err, (code, err)


@FUZZ
@given(kind=st.sampled_from(sorted(DOCUMENTS)), data=st.data())
def test_a_key_named_twice_is_refused_in_every_format(kind: str, data: Any) -> None:
    with folder() as tmp:
        path = Path(tmp) / "d.json"
        path.write_bytes(data.draw(with_duplicate_key(DOCUMENTS[kind])))
        code, _, err = diff_reading(kind, path)
        assert code == 2 and "appears twice" in err, (code, err)


storage_names = st.sampled_from(
    ["0001_a.json", "0002_b.json", "9999_z.json", "0001_.json", "notes.json", "0003_x.txt"]
)


@FUZZ
@given(
    files=st.lists(st.tuples(storage_names, serialised(BENCHMARK)), min_size=0, max_size=3),
    nested=st.booleans(),
)
def test_pytest_benchmark_storage_folders(files: list[tuple[str, bytes]], nested: bool) -> None:
    with folder() as tmp:
        storage = Path(tmp) / "storage"
        machine = storage / "Linux-CPython-3.11-64bit" if nested else storage
        machine.mkdir(parents=True)
        for name, data in files:
            (machine / name).write_bytes(data)
        code, _, err = run_cli("diff", storage, "--baselines", REPO / "baselines")
        assert_gate_answer(code, err)


night_names = st.sampled_from(
    [
        "2026-11-01.json",
        "2026-11-01-2.json",
        "2026-11-02.json",
        "2026-13-45.json",
        "2026-11-03-1.json",
        "x.json",
        "2026-11-04.txt",
    ]
)


@FUZZ
@given(files=st.lists(st.tuples(night_names, serialised(RESULTS)), min_size=0, max_size=4))
def test_history_folders(files: list[tuple[str, bytes]]) -> None:
    with folder() as tmp:
        history = Path(tmp) / "history"
        history.mkdir()
        for name, data in files:
            (history / name).write_bytes(data)
        code, _, err = run_cli("history", "changes", "--history", history)
        assert_gate_answer(code, err)
        code, _, err = run_cli(
            "diff", DATA / "8xA100-SXM4-80GB.blog.results.json", "--history", history
        )
        assert_gate_answer(code, err)


host_lines = st.one_of(
    st.sampled_from(
        [
            "node1 slots=8",
            "node2 slots=8",
            "# comment",
            "",
            "node1 slots=0",
            "node-3 slots=99999999999999999999",
            "bad line",
            "n slots=8 extra",
        ]
    ),
    st.sampled_from(NASTY_TEXT),
    st.text(max_size=30),
)


@FUZZ
@given(lines=st.lists(host_lines, max_size=6), tail=st.binary(max_size=6))
def test_hostfiles(lines: list[str], tail: bytes) -> None:
    with folder() as tmp:
        hostfile = Path(tmp) / "hostfile"
        hostfile.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + tail)
        try:
            hosts = read_hostfile(hostfile)
        except BloomperfError as exc:
            assert "\n" not in str(exc).strip() or str(exc).count("\n") == 0
            return
        assert hosts and all(isinstance(n, int) and n > 0 for n in hosts.values())


@pytest.mark.parametrize("data", [b"", b"\x00" * 10, b"\xff\xfe", b"[" * 100000, b'{"a":' * 5000])
def test_raw_garbage_everywhere(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "garbage.json"
    path.write_bytes(data)
    for argv in (
        ["diff", path],
        ["baseline", "show", path],
        ["history", "add", path, "--history", tmp_path / "h"],
        ["baseline", "accept", path, "--baselines", tmp_path],
    ):
        code, _, err = run_cli(*argv)
        assert code == 2, (argv, err)
        assert_gate_answer(code, err, argv)
