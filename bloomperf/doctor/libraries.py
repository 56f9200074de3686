"""The doctor's library checks: torch's CUDA against the driver, bitsandbytes' CUDA library,
DeepSpeed's JIT prerequisites (nvcc matching torch's CUDA by DeepSpeed's own rule, ninja), and
whether transformers allows DeepSpeed's fused BLOOM kernels.

torch, bitsandbytes and DeepSpeed are imported in a child process (``probe_libraries``), so a
library that crashes on import cannot take the doctor down; its findings come back as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from bloomperf.backends.compat import installed_version, version_tuple
from bloomperf.backends.ds_inference import fused_kernels_unsupported
from bloomperf.doctor.check import Check, gpu_or_warn

PROBE_MARKER = "BLOOMPERF_PROBE "
PROBE_TIMEOUT_S = 300.0


def check_torch_cuda(facts: dict[str, Any], cuda_driver: str | None, device: str) -> Check:
    torch = facts.get("torch") or {}
    if "error" in torch:
        return Check("torch-cuda", "fail", f"torch does not import: {torch['error']}")
    built = torch.get("cuda")
    if not built:
        status = "fail" if device == "cuda" else "ok"
        return Check("torch-cuda", status, f"torch {torch.get('version')} is a CPU build")
    if cuda_driver is None:
        return Check(
            "torch-cuda",
            gpu_or_warn(device),
            f"torch built with CUDA {built}; no driver to check it against",
        )
    wanted, offered = version_tuple(built)[:2], version_tuple(cuda_driver)[:2]
    if wanted[0] > offered[0]:
        return Check(
            "torch-cuda",
            "fail",
            f"torch built with CUDA {built} needs a driver for "
            f"CUDA {wanted[0]}; this driver supports {cuda_driver}",
        )
    if wanted > offered:
        return Check(
            "torch-cuda",
            "warn",
            f"torch's CUDA {built} is newer than the driver's "
            f"{cuda_driver}: minor-version compatibility runs it, "
            "but JIT-compiled PTX (DeepSpeed's ops) may not load",
        )
    seen = f"{torch.get('devices')} GPUs" if torch.get("available") else "no GPU"
    status = "ok" if torch.get("available") or device != "cuda" else "fail"
    return Check(
        "torch-cuda",
        status,
        f"torch {torch.get('version')} built with CUDA {built}, driver supports "
        f"{cuda_driver}; torch sees {seen}",
    )


def check_bitsandbytes(facts: dict[str, Any], device: str) -> Check:
    bnb = facts.get("bitsandbytes") or {}
    if "error" in bnb:
        return Check("bitsandbytes", gpu_or_warn(device), f"int8 cannot run: {bnb['error']}")
    if bnb.get("cuda_library"):
        return Check("bitsandbytes", "ok", f"CUDA library loaded: {bnb.get('library')}")
    if bnb.get("backend") == "CUDA":
        why = "; ".join(bnb.get("load") or ["no reason given"])
        return Check("bitsandbytes", "fail", f"the CUDA library did not load: {why}")
    return Check(
        "bitsandbytes",
        gpu_or_warn(device),
        f"{bnb.get('backend')} library only (torch sees no GPU): int8 runs on CPU",
    )


def check_deepspeed_jit(facts: dict[str, Any], device: str) -> Check:
    """DeepSpeed JIT-builds its fused kernels with nvcc, which must match torch's CUDA (its own
    rule, ``assert_no_cuda_mismatch``), driven by ninja."""
    ds = facts.get("deepspeed") or {}
    if "error" in ds:
        return Check("deepspeed-jit", gpu_or_warn(device), f"DeepSpeed: {ds['error']}")
    missing = []
    if not ds.get("nvcc"):
        missing.append(f"no nvcc ({ds.get('nvcc_error') or 'CUDA_HOME not found'})")
    elif ds.get("mismatch"):
        missing.append(str(ds["mismatch"]))
    if not ds.get("ninja"):
        missing.append("no ninja")
    if missing:
        return Check(
            "deepspeed-jit",
            gpu_or_warn(device),
            f"DeepSpeed {ds.get('version')} cannot build its fused kernels: " + "; ".join(missing),
        )
    return Check(
        "deepspeed-jit",
        "ok",
        f"DeepSpeed {ds.get('version')}: nvcc {ds['nvcc']} matches torch's CUDA, ninja present",
    )


def check_fused_bloom() -> Check:
    reason = fused_kernels_unsupported()
    if reason:
        return Check("fused-bloom", "warn", f"ds-inference cells are skipped: {reason}")
    return Check(
        "fused-bloom",
        "ok",
        f"transformers {installed_version('transformers')} allows the fused kernels",
    )


def probe_libraries(timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """``library_facts()`` as a child process found them."""
    argv = [sys.executable, "-c", "import bloomperf.doctor.libraries as d; d.print_library_facts()"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"torch": {"error": f"importing the libraries took over {timeout_s:g} s"}}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(PROBE_MARKER):
            facts: dict[str, Any] = json.loads(line[len(PROBE_MARKER) :])
            return facts
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"torch": {"error": f"the probe died (exit {done.returncode}): {tail[:200]}"}}


def print_library_facts() -> None:
    print(PROBE_MARKER + json.dumps(library_facts()), flush=True)


def library_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"torch": {"error": one_line(exc)}}
    facts: dict[str, Any] = {
        "torch": {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "available": torch.cuda.is_available(),
            "devices": torch.cuda.device_count(),
        }
    }
    facts["bitsandbytes"] = bitsandbytes_facts()
    facts["deepspeed"] = deepspeed_facts(torch.version.cuda)
    return facts


def bitsandbytes_facts() -> dict[str, Any]:
    try:
        from bitsandbytes import cextension
    except Exception as exc:
        return {"error": one_line(exc)}
    lib = cextension.lib
    # The mock bitsandbytes installs when its native library fails to load keeps the error.
    failed = isinstance(lib, cextension.ErrorHandlerMockBNBNativeLibrary)
    loaded = getattr(lib, "__dict__", {}).get("_lib")
    return {
        "backend": cextension.BNB_BACKEND,
        "cuda_library": bool(type(lib).compiled_with_cuda) and not failed,
        "library": str(getattr(loaded, "_name", type(lib).__name__)),
        "load": str(lib.__dict__.get("error_msg", "")).strip().splitlines()[:1] if failed else [],
    }


def deepspeed_facts(torch_cuda: str | None) -> dict[str, Any]:
    try:
        import deepspeed
        from deepspeed.ops.op_builder import builder
        from torch.utils import cpp_extension
    except Exception as exc:
        return {"error": one_line(exc)}
    facts: dict[str, Any] = {
        "version": deepspeed.__version__,
        "ninja": cpp_extension.is_ninja_available(),
    }
    try:
        facts["nvcc"] = "{}.{}".format(*builder.installed_cuda_version())
    except Exception as exc:  # MissingCUDAException, or nvcc failing to run
        facts["nvcc_error"] = one_line(exc)
        return facts
    if torch_cuda:
        try:
            builder.assert_no_cuda_mismatch()
        except builder.CUDAMismatchException as exc:
            facts["mismatch"] = one_line(exc).lstrip(">- ")
    else:
        facts["mismatch"] = "torch is a CPU build"
    return facts


def one_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]
