"""The benchmark matrix itself: ``pytest -m cpu`` (tiny model on CPU) or ``pytest -m gpu``.

Each item is one cell (backend × dtype × batch, id like ``accelerate-bf16-bs32``); the plugin
measures it on a shared worker group, records it in pytest-benchmark and asserts its verdict.
"""

from typing import Any

import pytest


@pytest.mark.cpu
def test_cpu(bloomperf_cell: Any, bloomperf: Any, benchmark: Any) -> None:
    bloomperf.check(bloomperf_cell, benchmark)


@pytest.mark.gpu
def test_gpu(bloomperf_cell: Any, bloomperf: Any, benchmark: Any) -> None:
    bloomperf.check(bloomperf_cell, benchmark)
