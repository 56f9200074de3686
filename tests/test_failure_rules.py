"""Which failures are OOMs, what a failed rank reports, and which rank's report explains its
group's failure, as properties over any text, exception type, rank and report file (the real
libraries' texts are in test_faults.py and test_vllm_backend.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.catalog.failures import (
    KV_CACHE_REFUSALS,
    OOM_TEXTS,
    classify_failure,
    failure_report,
    read_rank_reports,
    root_cause,
    write_rank_report,
)

# Text around a quoted message, never containing one of the quoted texts by chance.
AROUND = st.text(st.characters(codec="ascii", categories=("L", "N", "Zs")), max_size=40)
QUOTED = (*OOM_TEXTS, *KV_CACHE_REFUSALS)
PLAIN = AROUND.filter(lambda text: not any(quote in text for quote in QUOTED))


class AcceleratorError(RuntimeError):
    """A library's own RuntimeError subclass (torch.AcceleratorError, DistBackendError)."""


@given(
    st.sampled_from(OOM_TEXTS), AROUND, AROUND, st.sampled_from([RuntimeError, AcceleratorError])
)
def test_a_runtime_error_quoting_an_allocation_failure_is_an_oom(oom, before, after, kind):
    assert classify_failure(kind(before + oom + after)) == "oom"


@given(st.sampled_from(KV_CACHE_REFUSALS), AROUND, AROUND)
def test_a_value_error_quoting_a_kv_cache_refusal_is_an_oom(refusal, before, after):
    assert classify_failure(ValueError(before + refusal + after)) == "oom"


@given(st.sampled_from(OOM_TEXTS), AROUND)
def test_an_allocation_text_outside_a_runtime_error_is_an_error(oom, after):
    """The texts are read only where the libraries raise them: an OSError or a KeyError that
    happens to quote one (a path, a dictionary key) is not an allocation failure."""
    for kind in (OSError, KeyError, TypeError, ValueError):
        assert classify_failure(kind(oom + after)) == "error", kind


@given(st.sampled_from(KV_CACHE_REFUSALS))
def test_a_kv_cache_refusal_outside_a_value_error_is_an_error(refusal):
    assert classify_failure(RuntimeError(refusal)) == "error"
    assert classify_failure(OSError(refusal)) == "error"


@given(PLAIN, st.sampled_from([RuntimeError, ValueError, OSError, AcceleratorError]))
def test_any_other_text_is_an_error(text, kind):
    assert classify_failure(kind(text)) == "error"


@given(PLAIN)
def test_memory_errors_and_torchs_out_of_memory_are_ooms_whatever_they_say(text):
    assert classify_failure(MemoryError(text)) == "oom"
    assert classify_failure(torch.OutOfMemoryError(text)) == "oom"


@given(
    st.integers(0, 7),
    st.integers(1, 8),
    st.text(max_size=3000),
    st.sampled_from([RuntimeError, MemoryError, ValueError]),
)
def test_a_report_names_its_rank_only_in_a_group_and_keeps_the_messages_start(
    rank, world_size, text, kind
):
    exc = kind(text)
    report = failure_report(exc, rank, world_size)
    where = f"rank {rank}: " if world_size > 1 else ""
    whole = f"{where}{kind.__name__}: {text}".strip()
    assert report["message"] == whole[:2000]
    assert report["outcome"] == classify_failure(exc) and report["rank"] == rank
    assert report["event"] == "failed" and 0 < len(report["traceback"]) <= 8000


def test_a_report_is_timed_when_made_and_its_traceback_reads_as_python_prints_it():
    before = time.time()
    try:
        raise KeyError("lost")
    except KeyError as exc:
        report = failure_report(exc, 0, 1)
    assert before <= report["at"] <= time.time()
    assert report["traceback"].startswith("Traceback (most recent call last):\n  File ")
    assert report["traceback"].endswith("\nKeyError: 'lost'\n")


def test_a_reports_traceback_keeps_its_last_8000_characters():
    try:
        raise RuntimeError("x" * 20_000 + "THE END")
    except RuntimeError as exc:
        report = failure_report(exc, 1, 2)
    assert len(report["traceback"]) == 8000 and report["traceback"].rstrip().endswith("THE END")
    assert (
        report["message"].startswith("rank 1: RuntimeError: xxx") and len(report["message"]) == 2000
    )


REPORT = st.fixed_dictionaries(
    {
        "event": st.just("failed"),
        "outcome": st.sampled_from(["oom", "error"]),
        "message": st.text(max_size=20),
        "rank": st.integers(0, 9),
        "at": st.floats(0, 1e9, allow_nan=False),
    }
)


@settings(deadline=None)  # files written per example: no deadline on a busy machine
@given(st.lists(REPORT, max_size=6, unique_by=lambda r: r["rank"]))
def test_reports_written_by_the_ranks_are_read_back_in_rank_order(tmp_path_factory, reports):
    folder = tmp_path_factory.mktemp("group")
    for report in reports:
        write_rank_report(folder, report)
    (folder / "failed-rank98.json").write_text("{not json")  # a rank killed mid-write
    (folder / "failed-rank-0.json").write_text("")  # ... read before every other report
    (folder / "failed-rank99.json").write_text(json.dumps({"outcome": "slow"}))
    (folder / "failed-rank97.json").write_text(json.dumps(["oom"]))
    (folder / "other.json").write_text(json.dumps(reports[0] if reports else {}))
    expected = sorted(reports, key=lambda r: f"failed-rank{r['rank']}.json")
    assert read_rank_reports(folder) == expected


def test_a_folder_without_reports_reads_none(tmp_path: Path):
    assert read_rank_reports(tmp_path) == [] and read_rank_reports(tmp_path / "gone") == []


@given(st.lists(REPORT, max_size=8, unique_by=lambda r: r["at"]))
def test_the_root_cause_is_the_earliest_oom_else_the_earliest_failure(reports):
    """A rank whose peer died of an OOM fails afterwards with a communication error: the OOM
    explains the group even when it was reported later."""
    cause = root_cause(reports)
    if not reports:
        assert cause is None
        return
    ooms = [r for r in reports if r["outcome"] == "oom"]
    candidates = ooms or reports
    earliest = min(r["at"] for r in candidates)
    assert cause is not None and cause["at"] == earliest
    assert cause["outcome"] == ("oom" if ooms else "error")


@pytest.mark.parametrize("missing", [None, 0])
def test_a_report_without_a_time_counts_as_the_earliest_of_its_kind(missing):
    timed = {"outcome": "error", "at": 5.0, "rank": 1}
    untimed = {"outcome": "error", "at": missing, "rank": 2}
    assert root_cause([timed, untimed]) is untimed
    assert root_cause([{"outcome": "oom", "at": 9.0, "rank": 3}, timed, untimed])["rank"] == 3
