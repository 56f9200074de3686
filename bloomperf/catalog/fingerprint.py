"""What a result was measured with, beyond the topology: host, package versions, the CUDA and
NCCL that torch uses, GPU clock and power limits, and the code's provenance.

For telling apart runs that differ for outside reasons. Package versions come from their
metadata, not from importing them: cheap, and no CUDA context in the controller.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from bloomperf.catalog.provenance import provenance
from bloomperf.catalog.topology import Gpu, Topology, load_nvml

FINGERPRINT_PACKAGES = (
    "torch",
    "transformers",
    "deepspeed",
    "accelerate",
    "bitsandbytes",
    "safetensors",
    "nvidia-ml-py",
    "pytest",
    "pytest-benchmark",
)


def environment_fingerprint(topology: Topology, nvml: Any = None) -> dict[str, Any]:
    """What a result was measured with (see the module's docstring)."""
    return {
        "topology": topology.id,
        "hostname": socket.gethostname(),
        "cpu_model": topology.cpu_model,
        "cpu_cores": topology.cpu_cores,
        "ram_bytes": topology.ram_bytes,
        "python": platform.python_version(),
        "packages": package_versions(),
        "gpus": [g.name for g in topology.gpus],
        "driver": topology.driver,
        "cuda_driver": topology.cuda,
        "cuda_torch": torch_cuda_version(),
        "nccl": nccl_version(),
        "gpu_limits": gpu_limits(topology, nvml),
        "nvml_reason": topology.nvml_reason,
        "provenance": provenance(),
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in FINGERPRINT_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def torch_cuda_version() -> str | None:
    """The CUDA torch was built with (``torch.version.cuda``), read without importing torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return getattr(torch.version, "cuda", None)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(version_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "cuda":
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            return None
    return None


def nccl_version() -> str | None:
    """NCCL as torch loaded it if torch is already imported, else the pip NCCL wheel's version."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            version = torch.cuda.nccl.version()
            return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
        except Exception:  # CPU builds have no NCCL; any failure just means "unknown"
            return None
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def gpu_limits(topology: Topology, nvml: Any = None) -> list[dict[str, Any]]:
    """Max SM and memory clocks and the power limit of each GPU, where NVML gives them."""
    if topology.device != "cuda":
        return []
    try:
        nvml = nvml if nvml is not None else load_nvml()
        nvml.nvmlInit()
    except ImportError:
        return []
    except nvml.NVMLError:
        return []
    try:
        return [_limits_of(nvml, gpu) for gpu in topology.gpus]
    finally:
        nvml.nvmlShutdown()


def _limits_of(nvml: Any, gpu: Gpu) -> dict[str, Any]:
    limits: dict[str, Any] = {
        "index": gpu.index,
        "sm_clock_max_mhz": None,
        "mem_clock_max_mhz": None,
        "power_limit_w": None,
    }
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
    except nvml.NVMLError:
        return limits
    # Each query on its own: a GPU that hides its power limit still tells its clocks.
    with contextlib.suppress(nvml.NVMLError):
        limits["sm_clock_max_mhz"] = int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
    with contextlib.suppress(nvml.NVMLError):
        limits["mem_clock_max_mhz"] = int(
            nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
        )
    with contextlib.suppress(nvml.NVMLError):
        limits["power_limit_w"] = int(nvml.nvmlDeviceGetPowerManagementLimit(handle)) / 1000
    return limits
