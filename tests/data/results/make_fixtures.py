"""Rebuild the result fixtures in this folder: `python -m tests.data.results.make_fixtures`.

* ``8xA100-SXM4-80GB.blog.results.json``: a ``bloomperf run`` results file whose figures are the
  blog's 8 x A100-80GB tables (the medians of five cycles within ±0.2 % of each figure, OOM where
  the blog has OOM, nothing where it has "–"), with NVML-style memory readings and load times.
* ``8xA100-SXM4-80GB.blog.benchmark.json``: the same cells written by real pytest-benchmark
  (``--benchmark-json``), in the plugin's ``extra_info`` layout.
* ``benchmarks/<machine>/0001_blog.json``, ``0002_slower.json``: pytest-benchmark storage
  (``--benchmark-save``); the second run has accelerate-bf16-bs8 10 % slower.

Not made here: ``cpu.tiny.plugin-benchmark.json`` was written by the bloomperf plugin itself,
``pytest -m cpu tests/test_bloom_matrix.py --benchmark-json=...`` on the 2-core CPU VM;
``1xH100-80GB-HBM3.oom.results.json`` by ``bloomperf run`` on a real H100 (the OOM step of
``benchmarks/gpu_check.sh``, 2026-12-05: accelerate bf16, 2-layer bloom-176b, 8 new tokens).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bloomperf.store.baseline import BaselineCell
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import CellResult, MemoryReading, Outcome, RunResult
from bloomperf.store.results.codec import run_to_dict, save_run
from tests.builders import (
    BENCHMARK_STORAGE,
    BLOG_BASELINE,
    BLOG_BENCHMARK,
    BLOG_RESULTS,
    BLOG_TOPOLOGY,
    GiB,
    blog_cells,
    bloom_run,
    scaled_run,
)

# Load times the blog gives for the row (pre-sharded checkpoints for DeepSpeed-Inference).
LOAD_TIMES = {
    ("accelerate", "bf16"): 121.0,
    ("ds-inference", "fp16"): 60.0,
    ("ds-inference", "int8"): 61.0,
    ("ds-zero", "bf16"): 462.0,
    ("accelerate", "int8"): 118.0,
}
ENVIRONMENT = {
    "topology": BLOG_TOPOLOGY,
    "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
    "cpu_model": "AMD EPYC 7543 32-Core Processor",
    "cpu_cores": 64,
    "ram_bytes": 512 * GiB,
    "python": "3.8.12",
    "packages": {"torch": "1.12.1", "transformers": "4.21.3", "deepspeed": "0.7.3"},
}

INNER_TEST = """
import json, os
import pytest

RESULTS = json.load(open(os.environ["BLOOMPERF_FIXTURE_RESULTS"]))
CONTEXT = {k: v for k, v in RESULTS.items() if k != "cells"}

@pytest.mark.parametrize("cell", RESULTS["cells"], ids=[c["id"] for c in RESULTS["cells"]])
def test_cell(benchmark, cell):
    benchmark.extra_info["bloomperf"] = cell
    benchmark.extra_info["bloomperf_run"] = CONTEXT
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
"""


def measured(b: BaselineCell) -> CellResult:
    """Five cycles within ±0.2 % of the blog's figure."""
    assert b.ms_per_token is not None
    v = b.ms_per_token
    # A made-up but plausible NVML sum over 8 GPUs: weights plus a KV cache that grows.
    memory = MemoryReading("nvml", (360 + b.batch_size // 2) * GiB)
    return CellResult(
        b.backend,
        b.dtype,
        b.batch_size,
        Outcome.OK,
        (v * 0.998, v * 1.002, v, v * 0.999, v * 1.001),
        load_time_s=LOAD_TIMES[(b.backend, b.dtype)],
        load_memory=memory,
        generate_memory=memory,
        details={"checkpoint": "pre-sharded"} if b.backend == "ds-inference" else {},
    )


def blog_run() -> RunResult:
    return bloom_run(
        *blog_cells(load_baseline(BLOG_BASELINE), measured),
        environment=ENVIRONMENT,
        started_at="2022-09-10T10:00:00Z",
        finished_at="2022-09-10T12:00:00Z",
    )


def slower_run(run: RunResult) -> RunResult:
    """The second stored run: accelerate-bf16-bs8 10 % slower."""
    return scaled_run(run, 1.10, "accelerate-bf16-bs8")


def pytest_benchmark(run: RunResult, work: Path, *args: str) -> None:
    results = work / "results.json"
    results.write_text(json.dumps(run_to_dict(run)))
    (work / "test_cells.py").write_text(INNER_TEST)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:bloomperf",
            "-p",
            "no:cacheprovider",
            "test_cells.py",
            *args,
        ],
        cwd=work,
        check=True,
        env={"BLOOMPERF_FIXTURE_RESULTS": str(results), "PATH": ""},
    )


def main() -> None:
    run = blog_run()
    save_run(run, BLOG_RESULTS)
    shutil.rmtree(BENCHMARK_STORAGE, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pytest_benchmark(
            run,
            work,
            "--benchmark-json",
            str(BLOG_BENCHMARK),
            "--benchmark-save",
            "blog",
            "--benchmark-storage",
            f"file://{BENCHMARK_STORAGE}",
        )
        pytest_benchmark(
            slower_run(run),
            work,
            "--benchmark-save",
            "slower",
            "--benchmark-storage",
            f"file://{BENCHMARK_STORAGE}",
        )


if __name__ == "__main__":
    main()
