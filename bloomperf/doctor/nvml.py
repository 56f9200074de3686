"""The doctor's NVML checks: driver and GPUs, persistence mode, application clocks, ECC, idle.

NVML answers in the doctor's own process: it creates no CUDA context.
"""

from __future__ import annotations

from typing import Any

from bloomperf.catalog.devices import cuda_visible_devices, resolve_visible
from bloomperf.catalog.topology import cuda_version_text, load_nvml
from bloomperf.doctor.check import Check, gpu_or_warn


def check_nvml(nvml: Any, device: str) -> tuple[list[Check], dict[str, Any]]:
    """The NVML check, the per-GPU settings checks, and what they learnt (driver CUDA, GPUs)."""
    found: dict[str, Any] = {"cuda_driver": None, "gpus": 0}
    try:
        nvml = nvml if nvml is not None else load_nvml()
    except ImportError:
        return [Check("nvml", gpu_or_warn(device), "nvidia-ml-py is not installed")], found
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        why = f"NVML unavailable: {type(exc).__name__}: {exc}; no GPU can be used or measured"
        return [Check("nvml", gpu_or_warn(device), why)], found
    try:
        driver = text(nvml.nvmlSystemGetDriverVersion())
        cuda = cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
        devices = resolve_visible(nvml, cuda_visible_devices())
        handles = [nvml.nvmlDeviceGetHandleByIndex(d.index) for d in devices]
        names = sorted({text(nvml.nvmlDeviceGetName(h)) for h in handles})
        found = {"cuda_driver": cuda, "gpus": len(handles)}
        if not handles:
            return [Check("nvml", gpu_or_warn(device), f"driver {driver}: no visible GPU")], found
        checks = [
            Check(
                "nvml",
                "ok",
                f"driver {driver} (CUDA {cuda}), {len(handles)} × "
                f"{' + '.join(names)}, GPUs {ids(devices)}",
            )
        ]
        pairs = list(zip([d.index for d in devices], handles, strict=True))
        checks += [
            check_persistence(nvml, pairs),
            check_clocks(nvml, pairs),
            check_ecc(nvml, pairs),
            check_idle(nvml, pairs),
        ]
        return checks, found
    except nvml.NVMLError as exc:
        return [Check("nvml", "fail", f"NVML failed: {type(exc).__name__}: {exc}")], found
    finally:
        nvml.nvmlShutdown()


def check_persistence(nvml: Any, gpus: list[tuple[int, Any]]) -> Check:
    off = [i for i, h in gpus if not query(nvml, nvml.nvmlDeviceGetPersistenceMode, h)]
    if not off:
        return Check("persistence", "ok", "persistence mode on for every GPU")
    return Check(
        "persistence",
        "warn",
        f"persistence mode off (or unreadable) on GPUs {ids(off)}: the driver re-initialises an "
        "idle GPU for each new worker, adding to its load time (nvidia-smi -pm 1)",
    )


def check_clocks(nvml: Any, gpus: list[tuple[int, Any]]) -> Check:
    """Application clocks left at their default let GPU Boost move with power and heat."""
    sm = nvml.NVML_CLOCK_SM
    unset, unknown, set_to = [], [], set()
    for i, h in gpus:
        current = query(nvml, nvml.nvmlDeviceGetApplicationsClock, h, sm)
        default = query(nvml, nvml.nvmlDeviceGetDefaultApplicationsClock, h, sm)
        if current is None or default is None:
            unknown.append(i)
        elif current == default:
            unset.append(i)
        else:
            set_to.add(f"SM {current} MHz (default {default})")
    if unknown:
        return Check("clocks", "warn", f"application clocks not readable on GPUs {ids(unknown)}")
    if unset:
        return Check(
            "clocks",
            "warn",
            f"application clocks at their default on GPUs {ids(unset)}: clocks follow power and "
            "temperature, so timings drift; lock them (nvidia-smi -ac MEM,SM) for stable numbers",
        )
    return Check("clocks", "ok", f"application clocks locked: {', '.join(sorted(set_to))}")


def check_ecc(nvml: Any, gpus: list[tuple[int, Any]]) -> Check:
    pending, errors, modes = [], [], set()
    for i, h in gpus:
        mode = query(nvml, nvml.nvmlDeviceGetEccMode, h)
        if mode is None:
            continue  # a GPU without ECC (GDDR boards)
        current, next_boot = int(mode[0]), int(mode[1])
        modes.add("on" if current else "off")
        if current != next_boot:
            pending.append(i)
        count = query(
            nvml,
            nvml.nvmlDeviceGetTotalEccErrors,
            h,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        if count:
            errors.append(f"{i} ({count})")
    if errors:
        return Check(
            "ecc",
            "fail",
            f"uncorrected ECC errors since the driver loaded on GPUs "
            f"{', '.join(errors)}: reset or replace them",
        )
    if pending:
        return Check(
            "ecc",
            "warn",
            f"ECC mode changes at the next reboot on GPUs {ids(pending)}: "
            "memory capacity changes with it",
        )
    if not modes:
        return Check("ecc", "ok", "no GPU reports ECC")
    return Check("ecc", "ok", f"ECC {'/'.join(sorted(modes))}, no uncorrected errors")


def check_idle(nvml: Any, gpus: list[tuple[int, Any]]) -> Check:
    busy = [i for i, h in gpus if query(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h)]
    if busy:
        return Check(
            "idle",
            "warn",
            f"other processes hold GPUs {ids(busy)}: they would share "
            "the measurements (bloomperf's lock only sees bloomperf)",
        )
    return Check("idle", "ok", "no compute process on any visible GPU")


def query(nvml: Any, function: Any, *args: Any) -> Any:
    """One NVML answer, None where this GPU or driver does not give it."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def ids(items: Any) -> str:
    return ",".join(str(getattr(i, "index", i)) for i in items)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
