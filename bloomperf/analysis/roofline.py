"""The roofline: a lower bound on the time per generated token, from bytes and FLOPs.

A decode step reads every weight once and the KV cache (at its mean length), and does
2 x parameters x batch FLOPs; the larger of bytes / bandwidth and FLOPs / peak rate bounds the
step. ``bloomperf.analysis.utilisation`` divides the same bytes and FLOPs by measured steps (MBU,
MFU).
"""

from __future__ import annotations

from bloomperf.analysis.memory_model import kv_bytes, memory_model_of
from bloomperf.analysis.scenario import Scenario
from bloomperf.catalog.weights import embedding_bytes, layer_bytes
from bloomperf.core.errors import BloomperfError


def roofline_ms_per_token(scenario: Scenario, batch: int, *, streams: int | None = None) -> float:
    """A lower bound on ms per generated token (the blog's metric: step time / batch).

    Tensor-parallel backends use every GPU's bandwidth at once; Accelerate's pipeline runs one
    GPU at a time, and each ZeRO rank runs the whole model for its own batch. ``streams``:
    independent batches generated at once; ZeRO's default is one per GPU, as the blog's script
    counts every rank's tokens. (ZeRO's all-gathers over the interconnect, its real limit, are
    not in this bound.)
    """
    s = scenario
    parallel = parallel_gpus(s.backend, s.n_gpus)
    memory_s = decode_step_bytes(s, batch) / (s.gpus.bandwidth_bytes_per_s * parallel)
    flops = 2 * s.shape.parameters(s.n_layer) * batch
    compute_s = flops / (s.gpus.peak_rate(s.dtype) * parallel)
    if streams is None:
        model = memory_model_of(s.backend)
        streams = s.n_gpus if model is not None and model.batch_per_rank else 1
    return max(memory_s, compute_s) * 1000.0 / (batch * streams)


def parallel_gpus(backend: str, n_gpus: int) -> int:
    """GPUs whose bandwidth and FLOPs one step uses at once: every GPU under tensor
    parallelism; one under Accelerate's pipeline (one stage at a time) and per ZeRO rank (as
    the backend's memory model says; one without a model is counted on one GPU)."""
    model = memory_model_of(backend)
    return n_gpus if model is not None and model.tensor_parallel else 1


def decode_step_bytes(scenario: Scenario, batch: int) -> int:
    """Bytes one decode step reads: every weight once, and the KV cache at its mean length."""
    shape, n_layer, dtype = scenario.shape, scenario.n_layer, scenario.dtype
    weights = n_layer * layer_bytes(shape, dtype) + embedding_bytes(shape, dtype)
    mean_tokens = scenario.prompt_tokens + scenario.new_tokens // 2
    return weights + kv_bytes(shape, n_layer, dtype, batch, mean_tokens)


def efficiency(measured_ms_per_token: float, bound_ms_per_token: float) -> float:
    """The bound as a percentage of the measured time: 100% would run at the roofline."""
    if measured_ms_per_token <= 0:
        raise BloomperfError(f"measured ms/token must be positive, got {measured_ms_per_token}")
    return 100.0 * bound_ms_per_token / measured_ms_per_token
