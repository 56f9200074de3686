"""Verdicts per cell and metric against the transcribed 8 x A100-80GB baseline."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bloomperf.analysis import compare as cmp
from bloomperf.render.comparison import render_comparison
from bloomperf.store.baseline import Baseline, BaselineCell, beyond_boundary, expected_cell
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import CellResult, MemoryReading, Outcome, RunResult
from tests.builders import BASELINES, cell_of, rss, scaled, scaled_run


def test_a_run_made_from_the_baseline_is_all_same(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    # Self-consistency of the verdict, not agreement with the blog: the fixture run is generated
    # from the transcribed baseline (medians within ±0.2 %, tests/data/results/make_fixtures.py).
    comparison = cmp.compare_run(blog_run, blog_baseline)
    assert comparison.counts == {"same": 23, "expected-oom": 5}
    assert not comparison.failed and comparison.failures() == []
    assert comparison.missing == ()


def test_one_cell_ten_percent_slower_flags_exactly_that_cell(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    slower = scaled_run(blog_run, 1.10, "ds-inference-fp16-bs64")
    comparison = cmp.compare_run(slower, blog_baseline)
    regressed = [v.id for v in comparison.cells if v.status == "regressed"]
    assert regressed == ["ds-inference-fp16-bs64"]
    assert comparison.failed
    (message,) = comparison.failures()
    assert "ds-inference-fp16-bs64: ms/token regressed" in message
    assert "measured 1.10 ms vs expected 1.00 ms ±5%" in message
    assert "ratio 1.100" in message


def test_a_faster_cell_is_improved_and_passes(blog_run: RunResult, blog_baseline: Baseline) -> None:
    faster = scaled_run(blog_run, 0.8, "accelerate-int8-bs1")
    verdicts = {v.id: v for v in cmp.compare_run(faster, blog_baseline).cells}
    assert verdicts["accelerate-int8-bs1"].status == "improved"
    assert verdicts["accelerate-int8-bs1"].fails() is None


def test_within_tolerance_is_same(blog_run: RunResult, blog_baseline: Baseline) -> None:
    cell = scaled(cell_of(blog_run, "accelerate-bf16-bs16"), 1.03)
    assert cmp.compare_cell(cell, expected_cell(blog_baseline, cell)).status == "same"


def test_an_oom_where_a_number_was_expected_fails(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    oom = CellResult("accelerate", "bf16", 32, Outcome.OOM, message="CUDA out of memory")
    verdict = cmp.compare_cell(oom, expected_cell(blog_baseline, oom))
    assert verdict.status == "unexpected-oom"
    message = verdict.fails()
    assert message is not None
    assert "measured out of memory vs expected to run (10.89 ms in the baseline)" in message
    comparison = cmp.compare_run(blog_run.with_cell(oom), blog_baseline)
    assert comparison.failed and comparison.counts["unexpected-oom"] == 1


def test_a_number_where_an_oom_was_expected_reports_the_moved_boundary(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    ran = CellResult("accelerate", "bf16", 64, Outcome.OK, (6.1, 6.0, 6.2))
    verdict = cmp.compare_cell(ran, expected_cell(blog_baseline, ran))
    assert verdict.status == "boundary-moved-up"
    assert verdict.fails() is None
    assert "ran at 6.10 ms where the baseline expects OOM" in verdict.explain()
    strict = cmp.compare_cell(ran, expected_cell(blog_baseline, ran), strict=True)
    assert strict.fails() is not None and "--strict" in str(strict.fails())
    comparison = cmp.compare_run(blog_run.with_cell(ran), blog_baseline)
    assert not comparison.failed
    text = render_comparison(comparison)
    assert "6.10 ms (OOM expected)" in text
    assert "accelerate-bf16-bs64: boundary moved up" in text
    assert cmp.compare_run(blog_run.with_cell(ran), blog_baseline, strict=True).failed


def test_beyond_the_boundary_an_oom_is_expected_and_a_run_moves_it(blog_baseline: Baseline) -> None:
    # The first expected OOM is the boundary: it is itself measured, what lies past it is not.
    assert not beyond_boundary(blog_baseline, "accelerate", "bf16", 64)
    assert beyond_boundary(blog_baseline, "accelerate", "bf16", 128)
    assert not beyond_boundary(blog_baseline, "ds-inference", "int8", 512)
    assert beyond_boundary(blog_baseline, "ds-inference", "int8", 1024)
    assert not beyond_boundary(blog_baseline, "ds-autotp", "fp16", 4096)  # never OOMs there
    probe = CellResult("ds-zero", "bf16", 1024, Outcome.OOM)
    assert cmp.compare_cell(probe, expected_cell(blog_baseline, probe)).status == "expected-oom"
    probe_ok = CellResult("ds-zero", "bf16", 32, Outcome.OK, (20.0,))
    assert cmp.compare_cell(probe_ok, expected_cell(blog_baseline, probe_ok)).status == (
        "boundary-moved-up"
    )


def test_a_result_from_another_gpu_model_is_incomparable(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    h100 = replace(blog_run, topology="8xH100-SXM5-80GB")
    comparison = cmp.compare_run(scaled_run(h100, 2.0), blog_baseline)
    assert {v.status for v in comparison.cells} == {"incomparable"}
    assert not comparison.failed
    assert "topology 8xH100-SXM5-80GB is not the baseline's 8xA100-SXM4-80GB" in (
        comparison.incomparable
    )
    assert "incomparable: topology 8xH100-SXM5-80GB" in render_comparison(comparison)


def test_fewer_layers_or_other_token_counts_are_incomparable(
    blog_run: RunResult, blog_baseline: Baseline
) -> None:
    short = replace(blog_run, model=replace(blog_run.model, layers=4))
    assert "4 layers" in str(cmp.incomparable_reason(short, blog_baseline))
    other = replace(blog_run, workload=replace(blog_run.workload, new_tokens=20))
    assert "20 new tokens" in str(cmp.incomparable_reason(other, blog_baseline))
    alias = replace(
        blog_run, topology="8xA100-80GB", model=replace(blog_run.model, name="bigscience/bloom")
    )
    assert cmp.incomparable_reason(alias, blog_baseline) is None


def test_no_baseline_cell_is_recorded_not_failed(blog_baseline: Baseline) -> None:
    autotp = CellResult("ds-autotp", "fp16", 8, Outcome.OK, (7.0,))
    verdict = cmp.compare_cell(autotp, expected_cell(blog_baseline, autotp))
    assert verdict.status == "no-baseline" and verdict.fails() is None
    assert cmp.compare_cell(replace(autotp, outcome=Outcome.OOM), None).status == "no-baseline"


def test_errors_and_timeouts_fail_skips_do_not(blog_baseline: Baseline) -> None:
    error = CellResult("accelerate", "bf16", 8, Outcome.ERROR, message="RuntimeError: NCCL")
    timeout = replace(error, outcome=Outcome.TIMEOUT, message="no answer after 600 s")
    skipped = replace(error, outcome=Outcome.SKIPPED, message="beyond the OOM boundary")
    assert cmp.compare_cell(error, expected_cell(blog_baseline, error)).fails() == (
        "accelerate-bf16-bs8: error: RuntimeError: NCCL"
    )
    assert "timeout: no answer" in str(cmp.compare_cell(timeout, None).fails())
    assert cmp.compare_cell(skipped, expected_cell(blog_baseline, skipped)).fails() is None


def test_memory_and_load_time_are_judged_with_their_own_tolerances() -> None:
    expected = BaselineCell(
        "accelerate",
        "fp32",
        8,
        "ok",
        ms_per_token=0.2,
        ms_per_token_tolerance=None,
        peak_memory_bytes=400 * 2**20,
        peak_memory_tolerance=0.5,
        load_time_s=60.0,
        load_time_tolerance=0.25,
    )
    fine = CellResult(
        "accelerate",
        "fp32",
        8,
        Outcome.OK,
        (0.9, 1.0, 1.1),
        load_time_s=70.0,
        generate_memory=rss(500),
    )
    verdict = cmp.compare_cell(fine, expected)
    assert verdict.status == "same"  # ms/token 5x slower, but a CPU baseline does not judge it
    assert verdict.metric("ms_per_token").status == "not-judged"  # type: ignore[union-attr]
    bloated = replace(fine, generate_memory=rss(900), load_time_s=90.0)
    verdict = cmp.compare_cell(bloated, expected)
    assert verdict.status == "regressed"
    message = str(verdict.fails())
    assert "peak memory regressed: measured 0.88 GiB vs expected 0.39 GiB ±50%" in message
    assert "load time regressed: measured 90 s vs expected 60 s ±25%" in message
    unmeasured = replace(fine, generate_memory=None, samples_ms_per_token=())
    statuses = {m.metric: m.status for m in cmp.compare_cell(unmeasured, expected).metrics}
    assert statuses == {
        "ms_per_token": "not-measured",
        "peak_memory": "not-measured",
        "load_time": "same",
    }


def test_several_cycles_per_side_use_the_interval(blog_baseline: Baseline) -> None:
    expected = BaselineCell(
        "accelerate",
        "bf16",
        1,
        "ok",
        ms_per_token=100.0,
        ms_per_token_tolerance=0.05,
        ms_per_token_samples=(80.0, 100.0, 120.0, 90.0, 110.0),
    )
    # 8 % slower in the median, but the baseline's own cycles spread ±20 %: not significant.
    noisy = CellResult("accelerate", "bf16", 1, Outcome.OK, (88.0, 108.0, 128.0, 98.0, 118.0))
    assert cmp.compare_cell(noisy, expected).status == "same"


def test_render_markdown_and_json(blog_run: RunResult, blog_baseline: Baseline) -> None:
    slower = scaled_run(blog_run, 1.2, "ds-zero-bf16-bs8")
    comparison = cmp.compare_run(slower, blog_baseline)
    markdown = render_comparison(comparison, "markdown")
    assert "| DeepSpeed-ZeRO bf16 | 283.00 ms | 41.86 ms (+20.0%) REGRESSED |" in markdown
    assert "| OOM (expected) |" in markdown
    data = json.loads(render_comparison(comparison, "json"))
    assert data["failed"] is True and data["counts"]["regressed"] == 1
    (bad,) = [c for c in data["cells"] if c["status"] == "regressed"]
    assert bad["id"] == "ds-zero-bf16-bs8"
    (ms,) = [m for m in bad["metrics"] if m["metric"] == "ms_per_token"]
    assert ms["expected"] == 34.88 and ms["tolerance"] == 0.05
    assert ms["ratio"] == pytest.approx(1.2)


def test_the_cpu_baseline_judges_outcomes_and_memory_never_timing() -> None:
    cpu = load_baseline(BASELINES / "cpu.tiny.json")
    assert {c.outcome for c in cpu.cells} == {"ok"} and len(cpu.cells) == 9
    for b in cpu.cells:
        assert b.ms_per_token_tolerance is None and b.peak_memory_tolerance == 0.5
        assert b.ms_per_token is not None and b.peak_memory_bytes is not None
        memory = MemoryReading("rss", b.peak_memory_bytes)
        slow = CellResult(
            b.backend,
            b.dtype,
            b.batch_size,
            Outcome.OK,
            (b.ms_per_token * 25,),
            generate_memory=memory,
        )
        assert cmp.compare_cell(slow, expected_cell(cpu, slow)).status == "same"
        bloated = replace(slow, generate_memory=MemoryReading("rss", b.peak_memory_bytes * 2))
        assert cmp.compare_cell(bloated, expected_cell(cpu, bloated)).status == "regressed"
        oom = replace(slow, outcome=Outcome.OOM, samples_ms_per_token=())
        assert cmp.compare_cell(oom, expected_cell(cpu, oom)).status == "unexpected-oom"
