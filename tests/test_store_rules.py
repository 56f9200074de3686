"""Store rules that mutmut's first full run found unstated (docs/testing.md): replacing one
cell of a run keeps every other cell, and a stored cell with a wrong backend or dtype is refused
in one line that names the file, the cell, the field and what is valid, in results files and
baselines alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.backends import BACKEND_NAMES, DTYPES, row_names
from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline import EXPECT_OK, BaselineCell
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.results import CellResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import cpu_baseline, ok_cell, tiny_run

cells = st.builds(
    lambda backend, dtype, batch, ms: replace(
        ok_cell(ms, batch_size=batch), backend=backend, dtype=dtype
    ),
    st.sampled_from(BACKEND_NAMES),
    st.sampled_from(DTYPES),
    st.sampled_from((1, 8, 32)),
    st.floats(0.5, 50.0),
)


@given(st.lists(cells, max_size=8, unique_by=lambda c: c.id), cells)
def test_a_cell_replaces_its_namesake_and_keeps_every_other_cell(
    present: list[CellResult], new: CellResult
) -> None:
    run = tiny_run(*present).with_cell(new)
    others = [c for c in present if c.id != new.id]
    assert [c for c in run.cells if c.id != new.id] == others
    assert [c for c in run.cells if c.id == new.id] == [new]


def write_results(folder: Path) -> Path:
    path = folder / "results.json"
    save_run(tiny_run(replace(ok_cell(2.0), backend="accelerate", dtype="fp32")), path)
    return path


def write_baseline(folder: Path) -> Path:
    path = folder / "cpu.tiny.json"
    save_baseline(cpu_baseline(BaselineCell("accelerate", "fp32", 1, EXPECT_OK, 2.0)), path)
    return path


VALID = {"backend": ", ".join(row_names()), "dtype": ", ".join(DTYPES)}
WRONG = [
    ("backend", "tgi", "unknown backend 'tgi' (valid: {valid})"),
    ("dtype", "fp8", "unknown dtype 'fp8' (valid: {valid})"),
    ("backend", 3, "field 'backend' must be a string, found int"),
    ("dtype", None, "field 'dtype' must be a string, found nothing"),
]


@pytest.mark.parametrize(("field", "value", "says"), WRONG)
@pytest.mark.parametrize(
    ("write", "read"), [(write_results, read_results), (write_baseline, load_baseline)]
)
def test_a_cells_backend_or_dtype_is_refused_in_one_line_naming_the_file_and_cell(
    tmp_path: Path,
    write: Callable[[Path], Path],
    read: Callable[[Path], object],
    field: str,
    value: object,
    says: str,
) -> None:
    path = write(tmp_path)
    data = json.loads(path.read_text())
    data["cells"][0][field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(BloomperfError) as refused:
        read(path)
    message = str(refused.value)
    assert message == f"{path} cell 0: {says.format(valid=VALID[field])}"


@pytest.mark.parametrize(
    ("write", "read"), [(write_results, read_results), (write_baseline, load_baseline)]
)
def test_a_cell_that_is_not_an_object_is_refused(
    tmp_path: Path, write: Callable[[Path], Path], read: Callable[[Path], object]
) -> None:
    path = write(tmp_path)
    data = json.loads(path.read_text())
    data["cells"][0] = 7
    path.write_text(json.dumps(data))
    with pytest.raises(BloomperfError) as refused:
        read(path)
    assert str(refused.value) == f"{path} cell 0: a cell must be an object"
