"""Schema migrations: an older file is brought up to date on read, a newer one is refused with one
line naming it (exit 2), and every writer stamps the current version."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bloomperf import cli
from bloomperf.analysis.compare import judge
from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline import codec as baseline_json
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.results import codec as results_json
from bloomperf.store.results import files as resultfiles
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from bloomperf.store.schema import DocumentKind, read_versioned, write_versioned

REPO = Path(__file__).resolve().parent.parent
BASELINE_FILE = REPO / "baselines" / "8xA100-SXM4-80GB.bloom-176b.json"
RESULTS_FILE = REPO / "tests" / "data" / "results" / "8xA100-SXM4-80GB.blog.results.json"


def update_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """v2 renamed ``n`` to ``count``."""
    return {k: v for k, v in data.items() if k != "n"} | {"count": data["n"], "steps": ["2"]}


def update_to_3(data: dict[str, Any]) -> dict[str, Any]:
    """v3 keeps counts as strings (and must see v2's layout: ``count``, not ``n``)."""
    return data | {"count": str(data["count"]), "steps": [*data["steps"], "3"]}


TEST_KIND = DocumentKind("bloomperf-test", 3, {2: update_to_2, 3: update_to_3})


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_an_old_file_is_upgraded_step_by_step_on_read(tmp_path: Path) -> None:
    v1 = write(tmp_path / "v1.json", {"kind": "bloomperf-test", "schema_version": 1, "n": 7})
    assert read_versioned(v1, TEST_KIND) == {
        "kind": "bloomperf-test",
        "schema_version": 3,
        "count": "7",
        "steps": ["2", "3"],
    }
    v2 = {"kind": "bloomperf-test", "schema_version": 2, "count": 5, "steps": ["2"]}
    assert read_versioned(write(tmp_path / "v2.json", v2), TEST_KIND)["steps"] == ["2", "3"]
    v3 = {"kind": "bloomperf-test", "schema_version": 3, "count": "1", "steps": []}
    assert read_versioned(write(tmp_path / "v3.json", v3), TEST_KIND) == v3


@pytest.mark.parametrize(
    ("version", "fragment"),
    [
        (4, "schema_version 4 is not supported (this bloomperf reads 1 to 3); upgrade bloomperf"),
        (0, "schema_version 0 is not supported (this bloomperf reads 1 to 3); re-create it"),
        ("1", "schema_version '1' is not supported"),
        (True, "schema_version True is not supported"),
    ],
)
def test_a_newer_or_nonsense_version_is_refused(
    tmp_path: Path, version: object, fragment: str
) -> None:
    path = write(tmp_path / "odd.json", {"kind": "bloomperf-test", "schema_version": version})
    with pytest.raises(BloomperfError) as raised:
        read_versioned(path, TEST_KIND)
    assert str(raised.value).startswith(f"{path}: {fragment}")
    assert "\n" not in str(raised.value)


ONE_VERSION = DocumentKind("bloomperf-one", 1)


@pytest.mark.parametrize(
    ("content", "kind", "message"),
    [
        ("[1]", TEST_KIND, "expected a JSON object, found list"),
        ('{"kind": "other"}', TEST_KIND, "not a bloomperf-test file (kind is 'other')"),
        ("{}", TEST_KIND, "not a bloomperf-test file (kind is None)"),
        (
            '{"kind": "bloomperf-one", "schema_version": 2}',
            ONE_VERSION,
            "schema_version 2 is not supported (this bloomperf reads 1); upgrade bloomperf to "
            "read it",
        ),
    ],
)
def test_a_file_of_another_shape_or_kind_is_refused_naming_what_it_is(
    tmp_path: Path, content: str, kind: DocumentKind, message: str
) -> None:
    path = tmp_path / "odd.json"
    path.write_text(content)
    with pytest.raises(BloomperfError) as raised:
        read_versioned(path, kind)
    assert str(raised.value) == f"{path}: {message}"


def test_a_folder_is_refused_naming_the_kind_expected(tmp_path: Path) -> None:
    with pytest.raises(BloomperfError) as raised:
        read_versioned(tmp_path, TEST_KIND)
    assert str(raised.value) == f"{tmp_path}: is a directory, expected a bloomperf-test JSON file"


def test_writing_stamps_the_current_version_first(tmp_path: Path) -> None:
    stale = {"count": "1", "schema_version": 1, "kind": "bloomperf-test", "steps": []}
    write_versioned(tmp_path / "out.json", TEST_KIND, stale)
    written = json.loads((tmp_path / "out.json").read_text())
    assert list(written) == ["kind", "schema_version", "count", "steps"]
    assert written["schema_version"] == 3
    assert read_versioned(tmp_path / "out.json", TEST_KIND) == written


def test_a_kind_must_list_a_step_for_every_version_after_the_first() -> None:
    with pytest.raises(ValueError, match=r"steps for N in 2\.\.3, found \[3\]"):
        DocumentKind("bloomperf-test", 3, {3: update_to_3})


def test_a_newer_baseline_or_results_file_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    newer = json.loads(BASELINE_FILE.read_text()) | {"schema_version": 3}
    path = write(tmp_path / "newer.json", newer)
    assert cli.main(["baseline", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: schema_version 3 is not supported" in err
    newer = json.loads(RESULTS_FILE.read_text()) | {"schema_version": 3}
    path = write(tmp_path / "newer-results.json", newer)
    assert cli.main(["diff", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: schema_version 3 is not supported" in err


def rename_workload(data: dict[str, Any]) -> dict[str, Any]:
    """A pretend v2 of the real kinds: ``workload`` was called ``load`` in v1."""
    return {k: v for k, v in data.items() if k != "load"} | {"workload": data["load"]}


def as_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "workload"} | {"load": data["workload"]}


def test_the_real_readers_upgrade_and_the_writers_write_the_current_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline and results readers run their kind's steps; their writers stamp its version."""
    monkeypatch.setattr(
        baseline_json, "BASELINE", DocumentKind("bloomperf-baseline", 2, {2: rename_workload})
    )
    monkeypatch.setattr(
        results_json, "RESULTS", DocumentKind("bloomperf-results", 2, {2: rename_workload})
    )
    monkeypatch.setattr(resultfiles, "RESULTS", results_json.RESULTS)  # the reader's own name

    old_baseline = write(tmp_path / "b.json", as_v1(json.loads(BASELINE_FILE.read_text())))
    baseline = load_baseline(old_baseline)
    assert baseline.new_tokens == json.loads(BASELINE_FILE.read_text())["workload"]["new_tokens"]
    save_baseline(baseline, tmp_path / "b2.json")
    assert json.loads((tmp_path / "b2.json").read_text())["schema_version"] == 2

    old_results = write(tmp_path / "r.json", as_v1(json.loads(RESULTS_FILE.read_text())))
    run = read_results(old_results)
    assert run.workload.new_tokens == json.loads(RESULTS_FILE.read_text())["workload"]["new_tokens"]
    save_run(run, tmp_path / "r2.json")
    written = json.loads((tmp_path / "r2.json").read_text())
    assert (written["kind"], written["schema_version"]) == ("bloomperf-results", 2)


OLD_BASELINES = sorted((REPO / "baselines").glob("*.json"))
# The results files written before version 2 (a GPU run's, recorded since, is version 2).
OLD_RESULTS = [
    path
    for path in sorted((REPO / "tests" / "data" / "results").glob("*.results.json"))
    if json.loads(path.read_text())["schema_version"] == 1
]
assert len(OLD_RESULTS) >= 2, OLD_RESULTS


@pytest.mark.parametrize("path", OLD_BASELINES, ids=lambda p: p.name)
def test_a_version_1_baseline_reads_the_same_after_its_migration(
    path: Path, tmp_path: Path
) -> None:
    """Today's baselines (version 1, TTFT/TPOT under ``latency``) read as version 2: the cycles
    land in ``figures`` unchanged, and writing them back (version 2) reads back equal."""
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    baseline = load_baseline(path)
    for cell, stored in zip(baseline.cells, raw["cells"], strict=True):
        latency = stored.get("latency", {})
        assert cell.figure_samples == {k: tuple(v["samples"]) for k, v in latency.items()}
        assert cell.figure_tolerances == {k: v.get("tolerance") for k, v in latency.items()}
    save_baseline(baseline, tmp_path / "v2.json")
    written = json.loads((tmp_path / "v2.json").read_text())
    assert written["schema_version"] == 2 and all("latency" not in c for c in written["cells"])
    again = load_baseline(tmp_path / "v2.json")
    assert replace(again, path="") == replace(baseline, path="")


@pytest.mark.parametrize("path", OLD_RESULTS, ids=lambda p: p.name)
def test_a_version_1_results_file_reads_the_same_after_its_migration(
    path: Path, tmp_path: Path
) -> None:
    """Today's results (version 1) read with no per-cycle figures, and their verdicts against
    the repository's baseline do not change when written back as version 2."""
    assert json.loads(path.read_text())["schema_version"] == 1
    run = read_results(path)
    assert all(c.figures == {} for c in run.cells)
    save_run(run, tmp_path / "v2.json")
    again = read_results(tmp_path / "v2.json")
    assert again == run
    baseline = load_baseline(BASELINE_FILE)
    assert judge(again, baseline) == judge(run, baseline)
