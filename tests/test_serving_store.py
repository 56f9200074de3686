"""A serving sweep as results, field by field: the SLA's refusals at its limits, a rate's JSON
form with inf and NaN, the figures the gate judges, the sweep's one cell (its outcome, row and
dtype), the workload it records, and the former version 1 document read as a run. Each
expected value is written here by definition, not taken from the code under test."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.store.results import ModelInfo, Outcome, WorkloadInfo
from bloomperf.store.serving import (
    EFFECTIVE,
    ITL_P99,
    TTFT_P99,
    RateSummary,
    Sla,
    decode_rate,
    design_value,
    encode_rate,
    engine_dtype,
    read_sweep,
    run_from_sweep_v1,
    sweep_cell,
    sweep_details,
    sweep_figures,
    sweep_workload,
)

# The edges each limit of the SLA must be told apart at: 0 and 1, just inside and outside.
EDGES = st.sampled_from([-1.0, 0.0, 1e-9, 0.5, 1.0, 1.0 + 1e-9, 2.0, 5.0])


@given(EDGES, EDGES, EDGES)
def test_an_sla_is_refused_exactly_outside_its_limits_in_one_line(ttft, rate, attainment):
    valid = ttft > 0 and rate > 0 and 0 < attainment <= 1
    if valid:
        assert Sla(ttft, rate, attainment).tpot_s == 1 / rate
        return
    with pytest.raises(BloomperfError) as refused:
        Sla(ttft, rate, attainment)
    assert str(refused.value) == (
        f"--sla: ttft {ttft} s and token rate {rate}/s must be > 0 and"
        f" attainment {attainment} in (0, 1]"
    )


def rate(at: float, outcome: str = "ok", rps: float = 2.0, p99: float = 300.0) -> RateSummary:
    return RateSummary(
        at, outcome, "" if outcome == "ok" else f"{outcome} at {at}", 10, 10, 5.0, rps, rps * 8,
        {"p50": p99 / 2, "p99": p99}, {}, {"p99": p99 / 10}, 1.0,
    )  # fmt: skip


SPECIAL = st.sampled_from([math.inf, math.nan, 0.0, 2.5])


@given(SPECIAL, SPECIAL, SPECIAL)
def test_a_rates_json_form_says_inf_and_null_and_reads_back(at, rps, tokens):
    summary = RateSummary(at, "ok", "", 3, 3, 1.0, rps, tokens, {}, {}, {}, 1.0)
    data = json.loads(json.dumps(encode_rate(summary), allow_nan=False))

    def spelled(value: float) -> object:
        return "inf" if math.isinf(value) else None if math.isnan(value) else value

    keys = ("rate", "request_throughput", "output_throughput")
    assert [data[k] for k in keys] == [spelled(at), spelled(rps), spelled(tokens)]
    back = decode_rate(data)
    for key, value in zip(keys, (at, rps, tokens), strict=True):
        found = getattr(back, key)
        assert found == value or (math.isnan(found) and math.isnan(value))


OUTCOMES = st.sampled_from(["ok", "error", "timeout"])
RATES = st.lists(
    st.tuples(st.sampled_from([1.0, 2.0, 4.0, 8.0, math.inf]), OUTCOMES, st.floats(0.5, 9.0)),
    max_size=5,
    unique_by=lambda t: t[0],
)


@given(RATES, st.sampled_from([None, 0.0, 3.0, math.inf]))
def test_a_sweeps_figures_are_its_effective_rate_and_the_tails_at_its_lowest_ran_rate(
    points, effective
):
    """The effective throughput as given, or at inf the completed requests/s of the highest
    rate that ran; the p99s of the lowest rate that ran; a figure that is none, zero or
    infinite is left out."""
    rates = [rate(at, outcome, rps, 100.0 * rps) for at, outcome, rps in points]
    ran = sorted((r for r in rates if r.outcome == "ok"), key=lambda r: r.rate)
    expected: dict[str, tuple[float, ...]] = {}
    top = ran[-1].request_throughput if ran and effective == math.inf else effective
    if top is not None and 0 < top < math.inf:
        expected[EFFECTIVE] = (top,)
    if ran:
        expected[TTFT_P99] = (ran[0].ttft_ms["p99"],)
        expected[ITL_P99] = (ran[0].itl_ms["p99"],)
    assert sweep_figures(rates, effective) == expected


@given(RATES, st.sampled_from(["", "--dtype bfloat16", "--max-num-seqs 1 --dtype=half"]))
def test_a_sweeps_cell_is_ok_when_any_rate_ran_else_its_first_rates_outcome(points, args):
    rates = [rate(at, outcome) for at, outcome, _ in points]
    settings = {"workload": "fastgen-2600-60", "engine_args": args}
    cell = sweep_cell(settings, Sla(), rates, None)
    if any(r.outcome == "ok" for r in rates) or not rates:
        assert (cell.outcome, cell.message) == (Outcome.OK, "")
    else:
        assert (cell.outcome, cell.message) == (Outcome(rates[0].outcome), rates[0].message)
    dtype = {"": "fp32", "--dtype bfloat16": "bf16"}.get(args, "fp16")
    assert (cell.backend, cell.dtype, cell.batch_size) == ("serve-fastgen-2600-60", dtype, 1)
    default = sweep_cell({}, Sla(), rates, None)
    assert (default.backend, default.dtype) == ("serve-fastgen-1200-128", "fp32")


@pytest.mark.parametrize(
    ("args", "dtype"),
    [
        ("--dtype float32", "fp32"),
        ("--dtype=float", "fp32"),
        ("--max-num-seqs 1 --dtype bfloat16 --enforce-eager", "bf16"),
        ("--dtype=float16", "fp16"),
        ("--dtype half --max-num-seqs 2", "fp16"),
        ("--max-num-seqs 2", "fp32"),
        ("--dtype", "fp32"),  # a flag with no value: the server's default
    ],
)
def test_the_served_dtype_is_read_from_either_spelling_of_its_flag(args: str, dtype: str) -> None:
    assert engine_dtype(args) == dtype


def test_an_unknown_served_dtype_is_one_line_naming_the_three_names() -> None:
    with pytest.raises(BloomperfError) as refused:
        engine_dtype("--dtype bfloat61")
    assert (
        str(refused.value)
        == "--engine-args: --dtype 'bfloat61' is not float32, bfloat16 or float16"
    )


@pytest.mark.parametrize(
    ("settings", "new_tokens"),
    [
        ({"workload": "fastgen-1200-128", "max_model_len": 512}, 16),  # 128 * 512 / 4096
        ({"workload": "fastgen-1200-128", "max_model_len": 2048}, 64),
        ({"workload": "fastgen-2600-60", "max_model_len": 2048}, 30),
        ({"workload": "fastgen-2600-60"}, 8),  # the context defaults to 512: 7.5 rounds to 8
        ({"max_model_len": 4096}, 128),  # the default workload
        ({"workload": "fastgen-2600-60", "max_model_len": 8}, 1),  # never below one token
    ],
)
def test_a_sweeps_workload_is_its_mean_generation_length(
    settings: dict[str, Any], new_tokens: int
) -> None:
    assert sweep_workload(settings) == WorkloadInfo(new_tokens, cycles=1, warmup=0, prompts=())


def test_a_design_setting_that_is_no_list_of_numbers_compares_as_its_text() -> None:
    assert design_value("fast") == "fast" and design_value(" 4, 2,2") == (2.0, 4.0)


def v1_document(**changes: Any) -> dict[str, Any]:
    data = {
        "kind": "bloomperf-serving",
        "version": 1,
        "complete": True,
        "settings": {"workload": "fastgen-2600-60", "max_model_len": 2048, "model": "tiny"},
        "sla": {"ttft_s": 1.5, "token_rate": 2.0, "attainment": 0.8},
        "effective_rps": "inf",
        "rates": [encode_rate(rate(2.0, rps=1.5)), encode_rate(rate(math.inf, rps=3.5))],
    }
    return {**data, **changes}


def test_a_version_1_document_reads_as_a_run_of_one_cell_field_by_field() -> None:
    run = run_from_sweep_v1(v1_document(), "old.json")
    assert run.model == ModelInfo("tiny", "", 0, 0)
    assert run.workload == WorkloadInfo(30, 1, 0, ())
    assert (run.topology, run.environment, run.complete) == ("unrecorded", {}, True)
    (cell,) = run.cells
    assert cell.figures[EFFECTIVE] == (3.5,)  # every rate met the SLA: the rps at inf
    assert read_sweep(cell.details) == (
        Sla(1.5, 2.0, 0.8),
        [rate(2.0, rps=1.5), rate(math.inf, rps=3.5)],
        math.inf,
    )
    settings = {"workload": "fastgen-2600-60"}
    unnamed = run_from_sweep_v1(v1_document(settings=settings, complete=False), "old.json")
    assert unnamed.model.name == "unrecorded" and not unnamed.complete


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": 2}, "old.json: serving results version 2, want 1"),
        ({"sla": {"ttft": 1}}, "old.json: malformed serving results ("),
        ({"rates": [{"rate": 1}]}, "old.json: malformed serving results ("),
    ],
)
def test_a_version_1_document_that_is_not_one_is_refused_naming_the_file(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(BloomperfError) as refused:
        run_from_sweep_v1(v1_document(**changes), "old.json")
    assert str(refused.value).startswith(message)


def test_repeated_sweeps_keep_their_own_effective_rate_in_the_details() -> None:
    details = sweep_details({}, Sla(), [rate(1.0)], 1.0, [([rate(1.0)], math.inf), ([], None)])
    assert [r["effective_rps"] for r in details["repeats"]] == ["inf", None]
    assert details["effective_rps"] == 1.0 and details["sla"] == Sla().__dict__
