"""Per-step timing through the real ``generate``: TTFT, TPOT and its tail, tokens/s."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy
import pytest

from bloomperf.store.latency import percentile, summarize_steps
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import cell_from_dict, cell_to_dict
from tests.builders import tiny_run

NEW_TOKENS = 32
FIELDS = ("ttft_ms", "tpot_ms", "tpot_p90_ms", "tpot_p99_ms", "tokens_per_s")


def run_tiny(
    tmp_path: Path, model: str = "tiny", cycles: int = 3, new_tokens: int = NEW_TOKENS
) -> dict[str, Any]:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "bloomperf", "run", "--model", model, "--no-lock",
            "--new-tokens", str(new_tokens), "--cycles", str(cycles),
            "--batch-sizes", "1,8", "--dtypes", "fp32", "--output", str(out),
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # 1: judged against a baseline, not our test
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def prefill_ms(path: str, batch_size: int, repeats: int = 15) -> float:
    """An independent prefill timing: one plain forward over the prompt batch, median."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bloomperf.catalog.workload import build_inputs

    torch.set_num_threads(1)  # as the worker runs on CPU
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    inputs = build_inputs(tokenizer, batch_size, torch.device("cpu"))
    times = []
    with torch.inference_mode():
        model(**inputs, use_cache=True)  # warm-up, as the worker's warm-up cycle
        for _ in range(repeats):
            start = time.perf_counter()
            model(**inputs, use_cache=True)
            times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def test_step_times_add_up_to_the_cycle_through_the_real_generate(tmp_path: Path) -> None:
    data = run_tiny(tmp_path)
    cells = [c for c in data["cells"] if c["outcome"] == "ok"]
    assert [c["batch_size"] for c in cells] == [1, 8]
    for cell in cells:
        for key in FIELDS:
            assert isinstance(cell[key], float) and cell[key] > 0, (cell["id"], key)
        assert cell["tokens_per_s_per_gpu"] is None  # CPU: no GPU to divide by
        assert cell["tpot_ms"] <= cell["tpot_p90_ms"] <= cell["tpot_p99_ms"]
        batch = cell["batch_size"]
        steps = cell["samples_step_ms"]
        assert len(steps) == 3 and all(len(s) == NEW_TOKENS for s in steps)
        # Each cycle's steps are marks inside the cycle's own synchronised interval: they never
        # exceed it, and cover it but for generate's return after the last mark (where one
        # scheduler hiccup of this shared 2-core host, ~10 ms, can land: hence the totals).
        cycles_ms = [sample * batch * NEW_TOKENS for sample in cell["samples_ms_per_token"]]
        for cycle_steps, cycle_ms in zip(steps, cycles_ms, strict=True):
            assert sum(cycle_steps) <= cycle_ms + 1e-6
        assert sum(map(sum, steps)) >= 0.8 * sum(cycles_ms)
        # tokens/s is batch x new tokens / cycle time, in seconds.
        cycle_s = cell["ms_per_token"] * batch * NEW_TOKENS / 1000.0
        assert cell["tokens_per_s"] == pytest.approx(batch * NEW_TOKENS / cycle_s, rel=1e-9)
        # TTFT against an independent prefill of the same checkpoint: generate's first step is
        # that forward plus generate's set-up (cache, processors), never less than the forward.
        forward = prefill_ms(data["model"]["path"], batch)
        assert 0.7 * forward <= cell["ttft_ms"] <= 10 * forward + 25.0, (cell["id"], forward)


def test_ttft_plus_decode_steps_is_within_20_percent_of_the_cycle(tmp_path: Path) -> None:
    """The issue's check. Medians ignore the machine's scheduling hiccups, so on the tiny model a
    busy shared host can push its steps' sum far above the median sum (10 ms preemptions against
    1 ms steps): the bloom-560m shape's 50-300 ms steps are long enough to compare honestly."""
    data = run_tiny(tmp_path, model="bloom-560m", cycles=2, new_tokens=8)
    for cell in data["cells"]:
        assert cell["outcome"] == "ok", cell["message"]
        cycle_ms = cell["ms_per_token"] * cell["batch_size"] * 8
        estimate = cell["ttft_ms"] + (8 - 1) * cell["tpot_ms"]
        assert estimate == pytest.approx(cycle_ms, rel=0.20), cell["id"]
        assert cell["ttft_ms"] > cell["tpot_ms"]  # a prompt of several tokens costs more


def test_the_summary_takes_prefill_first_and_decode_medians_and_tails() -> None:
    cycles = [(50.0, 10.0, 11.0, 12.0, 90.0), (70.0, 10.0, 10.0, 13.0, 11.0)]
    summary = summarize_steps(cycles)
    assert summary is not None
    assert summary.ttft_ms == 60.0  # median of the two prefill steps
    assert summary.tpot_ms == 11.0  # median of the eight decode steps
    decode = [10.0, 11.0, 12.0, 90.0, 10.0, 10.0, 13.0, 11.0]
    assert summary.tpot_p90_ms == pytest.approx(float(numpy.percentile(decode, 90)))
    assert summary.tpot_p99_ms == pytest.approx(float(numpy.percentile(decode, 99)))
    assert summarize_steps([]) is None and summarize_steps([(5.0,)]) is None
    assert percentile([3.0], 99.0) == 3.0
    with pytest.raises(ValueError) as raised:
        percentile([], 50.0)
    assert str(raised.value) == "percentile of no values"


def test_step_times_survive_the_results_file_and_old_files_read_without_them() -> None:
    cell = CellResult(
        "accelerate", "fp32", 2, Outcome.OK, samples_ms_per_token=(5.0,),
        samples_step_ms=((40.0, 8.0, 9.0),),
    )  # fmt: skip
    stored = cell_to_dict(cell)
    assert stored["ttft_ms"] == 40.0 and stored["tpot_ms"] == 8.5
    assert stored["tokens_per_s"] == 200.0  # 1000 / 5 ms per token
    again = cell_from_dict(json.loads(json.dumps(stored)), "r.json")
    assert again.samples_step_ms == cell.samples_step_ms
    del stored["samples_step_ms"]  # a file from before per-step timing
    assert cell_from_dict(stored, "r.json").steps is None


def test_diff_shows_ttft_and_tpot_beside_the_verdicts() -> None:
    from bloomperf.analysis.compare import judge
    from bloomperf.render.comparison import render_comparison

    cell = CellResult(
        "accelerate", "fp32", 4, Outcome.OK, samples_ms_per_token=(2.0,),
        samples_step_ms=((30.0, 5.0, 6.0, 7.0),),
    )  # fmt: skip
    run = tiny_run(cell, new_tokens=4, cycles=1)
    text = render_comparison(judge(run, None, no_baseline="none"), "text")
    assert "TTFT" in text and "30.00 ms" in text and "6.00 ms" in text and "500.0" in text
    data = json.loads(render_comparison(judge(run, None, no_baseline="none"), "json"))
    assert data["cells"][0]["latency"]["tpot_ms"] == 6.0
