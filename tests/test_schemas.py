"""The JSON Schemas bloomperf ships (``bloomperf/store/schemas``): valid schemas, met by real files
(the fixtures, the shipped baselines; a real run's results and history night are checked in
``test_sinks.py``), stating the same bounds, names and versions as the code, and refusing the
wrongly typed values the readers refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzzing import retyped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from bloomperf.catalog.names import MODEL_NAME, TOPOLOGY_ID
from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline import EXPECTED_OUTCOMES
from bloomperf.store.baseline.codec import BASELINE, baseline_from_dict
from bloomperf.store.results import MAX_BATCH_SIZE, MAX_CELLS, MAX_CYCLES, MAX_NEW_TOKENS, Outcome
from bloomperf.store.results.codec import RESULTS, run_from_dict
from bloomperf.store.schema import upgrade
from tests.schemas import KINDS, schema, schema_errors

ROOT = Path(__file__).resolve().parents[1]
RESULTS_FILES = sorted((ROOT / "tests" / "data" / "results").glob("*.results.json"))
# A night is a results document; each kind's current version, which its schema describes.
CURRENT = {"results": RESULTS, "history-night": RESULTS, "baseline": BASELINE}
BASELINE_FILES = sorted((ROOT / "bloomperf" / "baselines").glob("*.json"))


@pytest.mark.parametrize("kind", KINDS)
def test_each_schema_is_a_valid_draft_2020_12_schema(kind: str) -> None:
    Draft202012Validator.check_schema(schema(kind))


@pytest.mark.parametrize(
    ("kind", "path"),
    [("results", p) for p in RESULTS_FILES]
    + [("history-night", p) for p in RESULTS_FILES]
    + [("baseline", p) for p in BASELINE_FILES],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_the_real_files_meet_their_schema(kind: str, path: Path) -> None:
    """The schema is the current version's: an older real file meets it once migrated."""
    document = upgrade(json.loads(path.read_text()), str(path), CURRENT[kind])
    assert schema_errors(kind, document) == []


def test_the_schemas_state_the_versions_and_bounds_the_code_has() -> None:
    results, baseline = schema("results"), schema("baseline")
    for published, kind in ((results, RESULTS), (baseline, BASELINE)):
        assert published["properties"]["kind"] == {"const": kind.name}
        assert published["properties"]["schema_version"] == {"const": kind.version}
        assert published["properties"]["cells"]["maxItems"] == MAX_CELLS
        cell = published["$defs"]["cell"]["properties"]
        assert cell["batch_size"]["maximum"] == MAX_BATCH_SIZE
    cell = results["$defs"]["cell"]["properties"]
    assert cell["outcome"]["enum"] == [o.value for o in Outcome]
    assert cell["samples_ms_per_token"]["maxItems"] == MAX_CYCLES
    assert cell["samples_step_ms"]["items"]["maxItems"] == MAX_NEW_TOKENS + 1
    workload = results["properties"]["workload"]["properties"]
    assert workload["new_tokens"]["maximum"] == MAX_NEW_TOKENS
    assert workload["cycles"]["maximum"] == workload["warmup"]["maximum"] == MAX_CYCLES
    assert baseline["$defs"]["cell"]["properties"]["outcome"]["enum"] == list(EXPECTED_OUTCOMES)
    assert results["properties"]["topology"]["pattern"] == f"^{TOPOLOGY_ID.pattern}$"
    assert results["properties"]["model"]["properties"]["name"]["pattern"] == (
        f"^{MODEL_NAME.pattern}$"
    )


READERS = {"results": run_from_dict, "baseline": baseline_from_dict}
# At the current version, so that the schema's version check alone never refuses them.
DOCUMENTS = {
    kind: upgrade(json.loads(path.read_text()), str(path), CURRENT[kind])
    for kind, path in (
        ("results", RESULTS_FILES[0]),
        ("baseline", ROOT / "bloomperf" / "baselines" / "cpu.tiny.json"),
    )
}


def refused_by_reader(kind: str, document: Any) -> bool:
    try:
        READERS[kind](document, "f.json")
    except BloomperfError:
        return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(sorted(READERS)))
def test_a_value_of_the_wrong_type_the_reader_refuses_the_schema_refuses(
    data: st.DataObject, kind: str
) -> None:
    """The schema is a contract other tools can check before bloomperf reads a file: whatever
    wrongly typed value the reader refuses, the schema refuses too."""
    document = data.draw(retyped(DOCUMENTS[kind], ("kind", "schema_version")))
    if refused_by_reader(kind, document):
        assert schema_errors(kind, document), document
