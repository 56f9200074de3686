"""Where a run's results file goes and what is kept of a file already there (in-process; the
session that keeps it aside is tests/test_hostile_paths.py's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bloomperf.core.errors import BloomperfError
from bloomperf.store.results.output import keep_previous, previous_path, results_path


def test_without_output_a_run_writes_a_utc_named_file_in_results() -> None:
    path = results_path(None, None, "bloomperf")
    assert path.parent == Path("results")
    assert re.fullmatch(r"bloomperf-\d{8}-\d{6}Z\.json", path.name), path


@pytest.mark.parametrize(
    ("name", "aside"),
    [
        ("keep.json", "keep.previous.json"),
        ("keep.txt", "keep.txt.previous"),
        ("keep", "keep.previous"),
        ("keep.JSON", "keep.JSON.previous"),
        ("a.b.json", "a.b.previous.json"),
    ],
)
def test_a_file_is_kept_aside_before_its_json_suffix_or_after_any_other(
    tmp_path: Path, name: str, aside: str
) -> None:
    assert previous_path(tmp_path / name) == tmp_path / aside


@pytest.mark.parametrize("data", [b"{", b'{"cells": []}'])
def test_a_file_of_one_byte_or_more_is_copied_aside_unchanged(tmp_path: Path, data: bytes) -> None:
    output = tmp_path / "r.json"
    output.write_bytes(data)
    assert keep_previous(output) == tmp_path / "r.previous.json"
    assert (tmp_path / "r.previous.json").read_bytes() == data
    assert output.read_bytes() == data


def test_an_empty_or_missing_file_is_not_kept(tmp_path: Path) -> None:
    assert keep_previous(tmp_path / "r.json") is None
    (tmp_path / "r.json").write_bytes(b"")
    assert keep_previous(tmp_path / "r.json") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_an_output_that_cannot_be_read_is_refused_with_the_systems_reason(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("x")
    output = tmp_path / "file" / "r.json"  # under a file, not a folder
    with pytest.raises(BloomperfError) as refused:
        keep_previous(output)
    assert str(refused.value) == f"--output {output}: cannot read: Not a directory"
