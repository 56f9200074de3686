"""What a failed rank reports, and which report explains a group's failure.

A cell's outcome is ``oom`` when the failure is an allocation failure, whichever library raised
it; every other exception is ``error``. The texts below are those the libraries really raise
(quoted from their sources); several allocate outside torch's caching allocator, so their
failures are plain ``RuntimeError``s, not ``torch.OutOfMemoryError``.

Every rank of a group can fail on its own, but only rank 0 talks to the controller. A rank
other than 0 therefore writes its report to a file in the group's folder before it exits (and
before DeepSpeed's launcher, seeing it exit, kills the group); the controller reads those files
when the group fails, so the cell says what rank 1 hit instead of "worker died".
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bloomperf.core.jsonfile import write_text_atomic

OOM_TEXTS = (
    # torch's CUDA caching allocator (torch.OutOfMemoryError, c10/cuda/CUDACachingAllocator.cpp):
    #   "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of ..."
    # a failed cudaMalloc through C10_CUDA_CHECK (torch.AcceleratorError): "CUDA error: out of
    # memory"; NCCL, as torch's C10D_NCCL_CHECK formats it (torch.distributed.DistBackendError):
    #   "NCCL error in: ...ProcessGroupNCCL.cpp:N, unhandled cuda error ..., NCCL version 2.x
    #    ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n
    #    Cuda failure 2 'out of memory'"  (NCCL's CUCHECK/CUDACHECK warnings)
    "out of memory",
    # NCCL's host allocation (ncclCalloc in alloc.h): "Failed to malloc %ld bytes", returned as
    # ncclSystemError ("ncclSystemError: System call (e.g. socket, malloc) ... failed ...").
    "Failed to malloc",
    # DeepSpeed-Inference's kernel workspace, cudaMalloc'd outside torch
    # (ops/csrc/transformer/inference/includes/inference_context.h):
    #   "Workspace can't be allocated, no enough memory." and
    #   "Workspace can't be allocated, not enough memory"
    "Workspace can't be allocated",
    # ... and when its cudaMalloc returned nothing (GenWorkSpace, after printing "Requested:
    # Free: Total:"): "Workspace is null."
    "Workspace is null.",
    # cuBLAS's handle or workspace (ATen/cuda/Exceptions.h, TORCH_CUDABLAS_CHECK):
    #   "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    "CUBLAS_STATUS_ALLOC_FAILED",
    # The CPU allocator (c10/core/impl/alloc_cpu.cpp): "[enforce fail at alloc_cpu.cpp:N] err ==
    # 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12"
    "DefaultCPUAllocator: can't allocate memory",
)
# vLLM's refusals of a KV cache, raised as ValueError while the engine starts
# (vllm/v1/core/kv_cache_utils.py): the weights left no memory for cache blocks, or one
# sequence of max_model_len does not fit in what is left. Its free-memory check at startup
# ("... is less than desired GPU memory utilization") is not here: it is about other processes.
KV_CACHE_REFUSALS = (
    "No available memory for the cache blocks.",
    "cache is needed, which is larger than the available KV cache memory",
    "not enough GPU memory available to serve even a single token",
)
REPORT_GLOB = "failed-rank*.json"


def classify_failure(exc: BaseException) -> str:
    """``oom`` for an allocation failure (GPU, NCCL, cuBLAS, DeepSpeed's workspace, CPU) or
    vLLM's refusal of a KV cache, else ``error``."""
    if isinstance(exc, MemoryError):
        return "oom"
    # torch is not imported here: a worker whose failure was importing it still gets an answer.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    text = str(exc)
    if isinstance(exc, RuntimeError) and any(oom in text for oom in OOM_TEXTS):
        return "oom"
    if isinstance(exc, ValueError) and any(refusal in text for refusal in KV_CACHE_REFUSALS):
        return "oom"
    return "error"


def failure_report(exc: BaseException, rank: int, world_size: int) -> dict[str, Any]:
    """The ``failed`` message of one rank (sent by rank 0, written to a file by the others)."""
    where = f"rank {rank}: " if world_size > 1 else ""
    return {
        "event": "failed",
        "outcome": classify_failure(exc),
        "message": f"{where}{type(exc).__name__}: {exc}".strip()[:2000],
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
        "rank": rank,
        "at": time.time(),
    }


def write_rank_report(folder: Path, report: dict[str, Any]) -> None:
    """Write the report where the controller looks, atomically (it may read at any moment)."""
    write_text_atomic(folder / f"failed-rank{report['rank']}.json", json.dumps(report))


def read_rank_reports(folder: Path) -> list[dict[str, Any]]:
    """The reports the group's ranks left in ``folder`` (unreadable ones are skipped)."""
    reports = []
    for path in sorted(folder.glob(REPORT_GLOB)):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("outcome") in ("oom", "error"):
            reports.append(report)
    return reports


def root_cause(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report that explains a group's failure: an OOM first (a rank that lost its peer
    reports a communication error afterwards), then the earliest."""
    if not reports:
        return None
    return min(reports, key=lambda r: (r.get("outcome") != "oom", float(r.get("at") or 0)))
