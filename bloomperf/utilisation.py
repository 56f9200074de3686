"""How much of the GPUs' peak a cell used: MBU for decode, MFU for prefill.

- ``mbu_percent``: bytes one decode step reads (weights + KV cache, ``predict.decode_step_bytes``)
  ÷ the measured median decode step (``tpot_ms``) ÷ the peak bandwidth of the GPUs the step uses
  at once (``predict.parallel_gpus``).
- ``mfu_percent``: the prefill's FLOPs (2 × parameters × batch × prompt tokens) ÷ the measured
  prefill step (``ttft_ms``) ÷ the dense peak rate for the dtype (``hardware.GpuSpec``).

The same memory/roofline model as ``predict``: the prompt length is its assumed 10 tokens.
On CPU, or a GPU without datasheet figures, both are null and ``utilisation_reason`` says why.
"""

from __future__ import annotations

from typing import Any

from bloomperf.errors import BloomperfError
from bloomperf.hardware import known_topology
from bloomperf.models import ModelShape, check_layers
from bloomperf.predict import PROMPT_TOKENS, decode_step_bytes, parallel_gpus


def cell_utilisation(
    shape: ModelShape | None,
    layers: int | None,
    topology: str,
    backend: str,
    dtype: str,
    batch: int,
    new_tokens: int,
    ttft_ms: float | None,
    tpot_ms: float | None,
) -> dict[str, Any]:
    """``mbu_percent``, ``mfu_percent`` and, where they are null, ``utilisation_reason``."""
    none: dict[str, Any] = {"mbu_percent": None, "mfu_percent": None}
    if shape is None:
        return {**none, "utilisation_reason": "an external checkpoint: no shape to count bytes"}
    known = known_topology(topology)
    if known is None:
        why = "cpu: no peak bandwidth or FLOP figures" if topology == "cpu" else ""
        return {**none, "utilisation_reason": why or f"no datasheet figures for {topology}"}
    if ttft_ms is None or tpot_ms is None:
        return {**none, "utilisation_reason": "no per-step timing"}
    nodes, per_node, gpus = known
    try:
        n_layer = check_layers(layers, shape.n_layer, shape.name)
    except BloomperfError as exc:
        return {**none, "utilisation_reason": str(exc)}
    parallel = parallel_gpus(backend, nodes * per_node)
    step_bytes = decode_step_bytes(shape, n_layer, dtype, batch, PROMPT_TOKENS, new_tokens)
    bandwidth = gpus.bandwidth_bytes_per_s * parallel
    flops = 2 * shape.parameters(n_layer) * batch * PROMPT_TOKENS
    peak = gpus.peak_rate(dtype) * parallel
    return {
        "mbu_percent": 100.0 * step_bytes / (tpot_ms / 1000.0) / bandwidth,
        "mfu_percent": 100.0 * flops / (ttft_ms / 1000.0) / peak,
    }
