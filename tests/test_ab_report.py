"""What `bloomperf ab` writes and prints, by value: a compared cell in the results document (its
arms, figures, samples, how busy the machine was), the cell in progress, the verdict table of
ms/token and the one of the serving metrics, and the lines about pairs set aside. Every expected
value is written out here, not computed by the code under test."""

from __future__ import annotations

import pytest

from bloomperf.analysis.contention import Busy
from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER, PairedEstimate
from bloomperf.cli.ab_report import (
    busy_lines,
    comparison_json,
    log_json,
    render_metric_table,
    render_table,
)
from bloomperf.harness.interleave import Comparison, PairLog, Sample, Settings
from bloomperf.harness.matrix import Cell
from bloomperf.store.results import CellResult, Outcome

CELL = Cell("accelerate", "fp32", 8)
ESTIMATE = PairedEstimate(1.25, 1.125, 1.5, 3, 0.99)
# Confidence 0.9 over the looks: each look's interval at 97.50 % (interleave's own rule).
SETTINGS = Settings(confidence=0.9, min_pairs=2, max_pairs=5)


def samples(a: list[float], b: list[float]) -> tuple[Sample, ...]:
    """One pair per index, A first; each arm's values in order."""
    out = []
    for pair, (x, y) in enumerate(zip(a, b, strict=True)):
        out.append(Sample("a", pair, 0, 2 * pair, x))
        out.append(Sample("b", pair, 1, 2 * pair + 1, y))
    return tuple(out)


def arm(ms: tuple[float, ...], load_s: float | None, message: str = "") -> CellResult:
    return CellResult("accelerate", "fp32", 8, Outcome.OK, ms, load_s, message=message)


def test_a_compared_cell_is_written_with_every_field_by_value() -> None:
    message = "x" * 2500 + "END"
    busy = Busy(pairs=5, set_aside=2, max_wait_share=0.25, median_other_cores=0.5, gpu_neighbours=1)
    comparison = Comparison(
        CELL,
        Outcome.OK,
        SLOWER,
        ESTIMATE,
        samples([10.0, 12.0, 11.0], [13.0, 15.0, 14.0]),
        12.3456,
        "decided",
        arms={"a": arm((10.0, 12.0, 11.0), 2.5, message), "b": arm((14.0,), None)},
        message="y" * 2100 + "the cell's own",
        busy=busy,
    )
    assert comparison_json(comparison) == {
        "id": "accelerate-fp32-bs8",
        "backend": "accelerate",
        "dtype": "fp32",
        "batch_size": 8,
        "metric": "ms_per_token",
        "outcome": "ok",
        "verdict": "slower",
        "ratio": 1.25,
        "low": 1.125,
        "high": 1.5,
        "pairs": 3,
        "pairs_measured": 5,
        "pairs_set_aside": 2,
        "busy": {
            "pairs": 5,
            "set_aside": 2,
            "max_wait_share": 0.25,
            "median_other_cores": 0.5,
            "gpu_neighbours": 1,
        },
        "busy_verdict": False,  # decided: the pairs left were enough
        "stopped": "decided",
        "elapsed_s": 12.346,
        "message": "y" * 1986 + "the cell's own",  # its last 2000 characters
        "arms": {
            "a": {
                "outcome": "ok",
                "median_ms_per_token": 11.0,  # the median of the pairs' A values
                "load_time_s": 2.5,
                "peak_memory_bytes": None,
                "figures": {"ms_per_token": 11.0, "load_time": 2.5},
                "message": ("x" * 2500 + "END")[-2000:],  # its last 2000 characters
            },
            "b": {
                "outcome": "ok",
                "median_ms_per_token": 14.0,
                "load_time_s": None,
                "peak_memory_bytes": None,
                "figures": {"ms_per_token": 14.0},
                "message": "",
            },
        },
        "samples": [
            {"arm": arm_name, "pair": pair, "position": position, "sequence": 2 * pair + position,
             "ms_per_token": value, "load": None, "set_aside": False}
            for pair, (a, b) in enumerate([(10.0, 13.0), (12.0, 15.0), (11.0, 14.0)])
            for arm_name, position, value in (("a", 0, a), ("b", 1, b))
        ],
    }  # fmt: skip


def test_a_serving_figure_names_its_values_value_and_median_and_an_unjudged_cell_says_so() -> None:
    comparison = Comparison(
        CELL,
        Outcome.OK,
        INCONCLUSIVE,
        None,
        samples([4.0], [6.0]),
        1.0,
        "max-pairs",
        arms={"a": arm((), None), "b": arm((), None)},
        busy=Busy(pairs=4, set_aside=3, max_wait_share=None, median_other_cores=1.0,
                  gpu_neighbours=0),
        metric="serving_ttft_p99_ms",
    )  # fmt: skip
    found = comparison_json(comparison)
    assert (found["ratio"], found["low"], found["high"], found["pairs"]) == (None, None, None, 0)
    assert (found["pairs_measured"], found["pairs_set_aside"], found["busy_verdict"]) == (
        4,
        3,
        True,
    )
    assert found["busy"]["median_other_cores"] == 1.0
    assert found["arms"]["a"]["median"] == 4.0 and found["arms"]["b"]["median"] == 6.0
    assert "median_ms_per_token" not in found["arms"]["a"]
    assert [s["value"] for s in found["samples"]] == [4.0, 6.0]
    assert all("ms_per_token" not in s for s in found["samples"])
    # No pairs at all: nothing measured, nothing set aside, no busy figures.
    bare = comparison_json(Comparison(CELL, Outcome.ERROR, None, None, (), 0.0, "failed"))
    assert (bare["pairs_measured"], bare["pairs_set_aside"], bare["busy"]) == (0, 0, None)
    assert bare["busy_verdict"] is False and bare["arms"] == {} and bare["samples"] == []
    # Pairs measured and none set aside: no busy figures either.
    clean = Comparison(CELL, Outcome.OK, SAME, ESTIMATE, (), 1.0, "decided",
                       busy=Busy(6, 0, 0.1, 0.2, 0))  # fmt: skip
    assert (comparison_json(clean)["pairs_measured"], comparison_json(clean)["busy"]) == (6, None)


def test_the_cell_in_progress_is_written_with_its_pairs_and_interval() -> None:
    log = PairLog(CELL, SETTINGS)
    assert log_json(log) == {
        "id": "accelerate-fp32-bs8",
        "backend": "accelerate",
        "dtype": "fp32",
        "batch_size": 8,
        "pairs": 0,
        "pairs_set_aside": 0,
        "ratio": None,
        "low": None,
        "high": None,
        "samples": [],
    }
    for a, b in [(10.0, 20.0), (10.0, 20.0), (10.0, 20.0)]:
        log.add_pair({"a": a, "b": b}, ("b", "a"))
    log.decided()  # a look at the interval, as the loop takes one
    found = log_json(log)
    assert (found["pairs"], found["pairs_set_aside"]) == (3, 0)
    # Three pairs of B/A = 2 exactly: the interval is that point.
    assert found["ratio"] == found["low"] == found["high"] == pytest.approx(2.0, rel=1e-12)
    assert found["samples"][:2] == [
        {"arm": "b", "pair": 0, "position": 0, "sequence": 0, "ms_per_token": 20.0,
         "load": None, "set_aside": False},
        {"arm": "a", "pair": 0, "position": 1, "sequence": 1, "ms_per_token": 10.0,
         "load": None, "set_aside": False},
    ]  # fmt: skip


def test_the_verdict_table_of_ms_per_token_by_value() -> None:
    rows = [
        Comparison(CELL, Outcome.OK, SLOWER, ESTIMATE, samples([10.0], [12.5]), 1.0, "decided"),
        Comparison(
            Cell("accelerate", "fp32", 16), Outcome.ERROR, None, None, (), 1.0, "failed",
            message="CUDA error\nsecond line",
        ),
        Comparison(Cell("accelerate", "fp32", 32), Outcome.TIMEOUT, None, None, (), 1.0, "failed"),
        Comparison(
            Cell("accelerate", "bf16", 1), Outcome.OK, INCONCLUSIVE, None, samples([2.0], [2.0]),
            1.0, "max-time", busy=Busy(10, 9, 0.5, 1.5, 0),
        ),
    ]  # fmt: skip
    assert render_table(rows, SETTINGS).splitlines() == [
        "| cell | A ms/token | B ms/token | B/A | interval | pairs | verdict |",
        "|---|---|---|---|---|---|---|",
        "| accelerate-fp32-bs8 | 10.000 | 12.500 | 1.250 | \\[1.125, 1.500\\] | 3 | slower |",
        "| accelerate-fp32-bs16 | – | – | – | – | 0 | error: CUDA error |",
        "| accelerate-fp32-bs32 | – | – | – | – | 0 | timeout:  |",
        "| accelerate-bf16-bs1 | 2.000 | 2.000 | – | – | 0 | inconclusive: busy |",
        "(intervals at 97.50 % each: 90 % over all the looks at them)",
        "accelerate-bf16-bs1: inconclusive: the machine was busy (1 of 10 pairs clean; workers "
        "waited up to",
        "  50 % of a cycle; others used 1.50 cores (median))",
    ]


def test_the_verdict_table_of_the_serving_metrics_by_value() -> None:
    serving = Cell("vllm", "fp32", 1)

    def judged(metric: str, verdict: str | None, a: float, b: float) -> Comparison:
        estimate = PairedEstimate(b / a, b / a - 0.5, b / a + 0.5, 3, 0.9)
        return Comparison(serving, Outcome.OK, verdict, estimate, samples([a], [b]), 1.0,
                          "decided", metric=metric)  # fmt: skip

    rows = [
        judged("serving_effective_rps", SLOWER, 4.0, 2.0),
        judged("serving_ttft_p99_ms", FASTER, 100.0, 50.0),
        judged("serving_itl_p99_ms", SAME, 8.0, 8.0),
        Comparison(serving, Outcome.ERROR, None, None, (), 1.0, "failed",
                   message="server died\nlog tail", metric="serving_itl_p99_ms"),
        Comparison(serving, Outcome.TIMEOUT, None, None, (), 1.0, "failed",
                   metric="serving_ttft_p99_ms"),
    ]  # fmt: skip
    assert render_metric_table(rows, SETTINGS).splitlines() == [
        "| cell | metric | A | B | B/A | interval | pairs | verdict |",
        "|---|---|---|---|---|---|---|---|",
        "| vllm-fp32-bs1 | eff. req/s | 4 req/s | 2 req/s | 0.500 | \\[0.000, 1.000\\] "
        "| 3 | worse |",
        "| vllm-fp32-bs1 | served TTFT p99 | 100.00 ms | 50.00 ms | 0.500 | \\[0.000, 1.000\\] "
        "| 3 | better |",
        "| vllm-fp32-bs1 | served ITL p99 | 8.00 ms | 8.00 ms | 1.000 | \\[0.500, 1.500\\] "
        "| 3 | same |",
        "| vllm-fp32-bs1 | served ITL p99 | – | – | – | – | 0 | error: server died |",
        "| vllm-fp32-bs1 | served TTFT p99 | – | – | – | – | 0 | timeout:  |",
        "(worse: B/A beyond the metric's tolerance in its direction; intervals at 97.50 % each, "
        "90 % in all)",
    ]


def test_a_line_for_each_cell_with_pairs_set_aside_and_none_for_the_others() -> None:
    def cell(batch: int, verdict: str, busy: Busy | None) -> Comparison:
        return Comparison(Cell("accelerate", "fp32", batch), Outcome.OK, verdict, ESTIMATE, (),
                          1.0, "decided", busy=busy)  # fmt: skip

    rows = [
        cell(1, SAME, None),
        cell(2, SAME, Busy(8, 0, 0.1, 0.1, 0)),  # measured, nothing set aside
        cell(4, SAME, Busy(8, 2, None, None, 0)),
        cell(8, INCONCLUSIVE, Busy(8, 7, None, None, 3)),
    ]
    assert busy_lines(rows) == [
        "accelerate-fp32-bs4: pairs set aside (6 of 8 pairs clean)",
        "accelerate-fp32-bs8: inconclusive: the machine was busy (1 of 8 pairs clean; 3 other "
        "processes on",
        "  the GPU)",
    ]
    assert busy_lines(rows[:2]) == []
