"""What the suite runs on: GPUs, their memory and NVLinks, nodes, and the software around them.

Everything comes from NVML (``nvidia-ml-py``), never from torch, so the controller can describe
the machine without creating a CUDA context. The NVML module is an argument so that tests can
replay answers recorded on real machines.
"""

from __future__ import annotations

import os
from typing import Any


def load_nvml() -> Any:
    """The real ``pynvml`` module; ImportError when nvidia-ml-py is not installed."""
    import pynvml

    return pynvml


def visible_device_indices(nvml: Any, cuda_visible_devices: str | None) -> list[int]:
    """NVML indices of the devices a CUDA process would see, in CUDA's order.

    ``CUDA_VISIBLE_DEVICES`` holds indices or (prefixes of) UUIDs. Like CUDA, parsing stops at
    the first entry that names no device (so ``-1`` hides everything) or repeats one.
    NVML itself ignores the variable: NVML index 3 is physical device 3 whatever it says.
    """
    count = int(nvml.nvmlDeviceGetCount())
    if cuda_visible_devices is None:
        return list(range(count))
    uuids = [device_uuid(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    chosen: list[int] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        index = _find_device(entry, uuids)
        if index is None or index in chosen:
            break
        chosen.append(index)
    return chosen


def _find_device(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    if not entry:
        return None
    wanted = entry if entry.upper().startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
    matches = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(wanted.lower())]
    # An ambiguous UUID prefix names no device, as in CUDA.
    return matches[0] if len(matches) == 1 else None


def device_uuid(nvml: Any, handle: Any) -> str:
    return _text(nvml.nvmlDeviceGetUUID(handle))


def _text(value: Any) -> str:
    """Old nvidia-ml-py releases return bytes where newer ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_visible_devices() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")
