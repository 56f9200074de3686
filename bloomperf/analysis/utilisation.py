"""How much of the GPUs' peak a cell used: MBU for decode, MFU for prefill.

- ``mbu_percent``: bytes one decode step reads (weights + KV cache,
  ``roofline.decode_step_bytes``) ÷ the measured median decode step (``tpot_ms``) ÷ the peak
  bandwidth of the GPUs the step uses at once (``roofline.parallel_gpus``).
- ``mfu_percent``: the prefill's FLOPs (2 × parameters × batch × prompt tokens) ÷ the measured
  prefill step (``ttft_ms``) ÷ the dense peak rate for the dtype (``hardware.GpuSpec``).

The same model as the roofline: the prompt length is its assumed ``scenario.PROMPT_TOKENS``.
On CPU, or a GPU without datasheet figures, both are null and ``utilisation_reason`` says why.
"""

from __future__ import annotations

from typing import Any

from bloomperf.analysis.memory_model import memory_model_of
from bloomperf.analysis.roofline import decode_step_bytes, parallel_gpus
from bloomperf.analysis.scenario import SuiteCell
from bloomperf.core.errors import BloomperfError


def cell_utilisation(
    cell: SuiteCell, ttft_ms: float | None, tpot_ms: float | None
) -> dict[str, Any]:
    """``mbu_percent``, ``mfu_percent`` and, where they are null, ``utilisation_reason``."""
    none: dict[str, Any] = {"mbu_percent": None, "mfu_percent": None}
    if cell.shape is None:
        return {**none, "utilisation_reason": "an external checkpoint: no shape to count bytes"}
    scenario = cell.scenario()
    if scenario is None:
        why = "cpu: no peak bandwidth or FLOP figures" if cell.topology == "cpu" else ""
        return {**none, "utilisation_reason": why or f"no datasheet figures for {cell.topology}"}
    if ttft_ms is None or tpot_ms is None:
        return {**none, "utilisation_reason": "no per-step timing"}
    try:
        n_layer = scenario.n_layer
    except BloomperfError as exc:
        return {**none, "utilisation_reason": str(exc)}
    if memory_model_of(scenario.backend) is None:
        reason = f"{scenario.backend}: no memory model says how many GPUs a step uses"
        return {**none, "utilisation_reason": reason}
    parallel = parallel_gpus(scenario.backend, scenario.n_gpus)
    step_bytes = decode_step_bytes(scenario, cell.batch)
    bandwidth = scenario.gpus.bandwidth_bytes_per_s * parallel
    flops = 2 * scenario.shape.parameters(n_layer) * cell.batch * scenario.prompt_tokens
    peak = scenario.gpus.peak_rate(scenario.dtype) * parallel
    return {
        "mbu_percent": 100.0 * step_bytes / (tpot_ms / 1000.0) / bandwidth,
        "mfu_percent": 100.0 * flops / (ttft_ms / 1000.0) / peak,
    }
