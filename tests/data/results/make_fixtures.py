"""Rebuild the result fixtures in this folder: `python tests/data/results/make_fixtures.py`.

* ``8xA100-SXM4-80GB.blog.results.json``: a ``bloomperf run`` results file whose figures are the
  blog's 8 x A100-80GB tables (the medians of five cycles within ±0.2 % of each figure, OOM where
  the blog has OOM, nothing where it has "–"), with NVML-style memory readings and load times.
* ``8xA100-SXM4-80GB.blog.benchmark.json``: the same cells written by real pytest-benchmark
  (``--benchmark-json``), in the plugin's ``extra_info`` layout.
* ``benchmarks/<machine>/0001_blog.json``, ``0002_slower.json``: pytest-benchmark storage
  (``--benchmark-save``); the second run has accelerate-bf16-bs8 10 % slower.

Not made here: ``cpu.tiny.plugin-benchmark.json`` was written by the bloomperf plugin itself,
``pytest -m cpu tests/test_bloom_matrix.py --benchmark-json=...`` on the 2-core CPU VM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bloomperf.baseline import EXPECT_OK, EXPECT_OOM, load_baseline
from bloomperf.results import (
    CellResult,
    MemoryReading,
    ModelInfo,
    Outcome,
    RunResult,
    WorkloadInfo,
    run_to_dict,
    save_run,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
BASELINE = REPO / "baselines" / "8xA100-SXM4-80GB.bloom-176b.json"
# Load times the blog gives for the row (pre-sharded checkpoints for DeepSpeed-Inference).
LOAD_TIMES = {
    ("accelerate", "bf16"): 121.0,
    ("ds-inference", "fp16"): 60.0,
    ("ds-inference", "int8"): 61.0,
    ("ds-zero", "bf16"): 462.0,
    ("accelerate", "int8"): 118.0,
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


def blog_run() -> RunResult:
    baseline = load_baseline(BASELINE)
    cells = []
    for b in baseline.cells:
        if b.outcome == EXPECT_OOM:
            cells.append(
                CellResult(
                    b.backend,
                    b.dtype,
                    b.batch_size,
                    Outcome.OOM,
                    message="CUDA out of memory. Tried to allocate 2.00 GiB",
                )
            )
        elif b.outcome == EXPECT_OK and b.ms_per_token is not None:
            v = b.ms_per_token
            samples = (v * 0.998, v * 1.002, v, v * 0.999, v * 1.001)
            gib = 2**30
            # A made-up but plausible NVML sum over 8 GPUs: weights plus a KV cache that grows.
            memory = MemoryReading("nvml", (360 + b.batch_size // 2) * gib)
            cells.append(
                CellResult(
                    b.backend,
                    b.dtype,
                    b.batch_size,
                    Outcome.OK,
                    samples,
                    load_time_s=LOAD_TIMES[(b.backend, b.dtype)],
                    load_memory=memory,
                    generate_memory=memory,
                    details={"checkpoint": "pre-sharded"} if b.backend == "ds-inference" else {},
                )
            )
    return RunResult(
        model=ModelInfo("bloom-176b", "bigscience/bloom", 70, 176_247_271_424),
        workload=WorkloadInfo(
            new_tokens=100,
            cycles=5,
            warmup=1,
            prompts=("DeepSpeed is a machine learning framework",),
        ),
        topology="8xA100-SXM4-80GB",
        environment={
            "topology": "8xA100-SXM4-80GB",
            "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
            "cpu_model": "AMD EPYC 7543 32-Core Processor",
            "cpu_cores": 64,
            "ram_bytes": 512 * 2**30,
            "python": "3.8.12",
            "packages": {"torch": "1.12.1", "transformers": "4.21.3", "deepspeed": "0.7.3"},
        },
        cells=tuple(cells),
        started_at="2022-09-10T10:00:00Z",
        finished_at="2022-09-10T12:00:00Z",
        complete=True,
    )


def slower(run: RunResult, cell_id: str, factor: float) -> RunResult:
    cells = tuple(
        replace(c, samples_ms_per_token=tuple(s * factor for s in c.samples_ms_per_token))
        if c.id == cell_id
        else c
        for c in run.cells
    )
    return replace(run, cells=cells)


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
    save_run(run, HERE / "8xA100-SXM4-80GB.blog.results.json")
    storage = HERE / "benchmarks"
    shutil.rmtree(storage, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pytest_benchmark(
            run,
            work,
            "--benchmark-json",
            str(HERE / "8xA100-SXM4-80GB.blog.benchmark.json"),
            "--benchmark-save",
            "blog",
            "--benchmark-storage",
            f"file://{storage}",
        )
        pytest_benchmark(
            slower(run, "accelerate-bf16-bs8", 1.10),
            work,
            "--benchmark-save",
            "slower",
            "--benchmark-storage",
            f"file://{storage}",
        )


if __name__ == "__main__":
    main()
