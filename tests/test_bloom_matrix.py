"""The benchmark matrix itself: ``pytest -m cpu`` (tiny model on CPU) or ``pytest -m gpu``.

Each item is one cell (backend × dtype × batch, id like ``accelerate-bf16-bs32``); the plugin
measures it on a shared worker group, records it in pytest-benchmark and asserts its verdict.
"""

from typing import Any

import pytest


@pytest.mark.cpu
def test_cpu_smoke(bloomperf_cell: Any, bloomperf: Any, benchmark: Any) -> None:
    """A smoke test, not a performance check: the cell runs through the real worker and its
    outcome and memory are judged against ``baselines/cpu.tiny.json``, but that baseline sets
    no ms/token tolerance (CPU timings on a shared machine say nothing), so a slowdown passes."""
    bloomperf.check(bloomperf_cell, benchmark)


@pytest.mark.gpu
def test_gpu(bloomperf_cell: Any, bloomperf: Any, benchmark: Any) -> None:
    bloomperf.check(bloomperf_cell, benchmark)
