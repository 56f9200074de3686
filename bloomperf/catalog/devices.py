"""Which GPUs a run and each of its worker groups use, named so that NVML, CUDA and DeepSpeed agree.

Three numberings meet here:

- NVML's index, which ignores ``CUDA_VISIBLE_DEVICES`` and enumerates GPUs in PCI bus order (the
  order ``nvidia-smi`` shows). The sampler and the device lock work with it.
- CUDA's ordinal, which ``CUDA_VISIBLE_DEVICES`` filters and which follows ``CUDA_DEVICE_ORDER``:
  ``PCI_BUS_ID`` is NVML's order; the default, ``FASTEST_FIRST``, puts faster GPUs first and only
  equals PCI bus order when all GPUs are the same model.
- DeepSpeed's launcher slots: ``--include localhost:4,5`` makes its ``launch.py`` set
  ``CUDA_VISIBLE_DEVICES=4,5`` for the ranks. Given ``--num_gpus N`` instead, its runner deletes
  ``CUDA_VISIBLE_DEVICES`` and uses GPUs 0..N-1 whatever the user chose (runner.py, ``main``).

What bloomperf does: it reads the user's ``CUDA_VISIBLE_DEVICES`` once, under the user's
``CUDA_DEVICE_ORDER``, into NVML indices (refusing integer ids on a machine of mixed GPUs under
``FASTEST_FIRST``, where they cannot be mapped), and from then on names every GPU by its NVML
index with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` set for its workers, so the index it samples and locks
is the ordinal the workers' CUDA uses. A MIG instance (``MIG-<uuid>``) is mapped to its parent
GPU, which is what the lock holds; the sampler reads the instance itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.core.errors import BloomperfError

ORDER_ENV = "CUDA_DEVICE_ORDER"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
PCI_ORDER = "PCI_BUS_ID"


@dataclass(frozen=True)
class VisibleDevice:
    index: int  # NVML index of the whole GPU (for a MIG instance: of its parent)
    mig_uuid: str = ""  # the MIG instance CUDA_VISIBLE_DEVICES named; "" for a whole GPU


def cuda_visible_devices() -> str | None:
    return os.environ.get(VISIBLE_ENV)


def cuda_device_order() -> str:
    """CUDA's enumeration order as CUDA reads it: anything but PCI_BUS_ID means FASTEST_FIRST."""
    return PCI_ORDER if os.environ.get(ORDER_ENV, "").strip() == PCI_ORDER else "FASTEST_FIRST"


def resolve_visible(
    nvml: Any, visible: str | None, order: str | None = None
) -> list[VisibleDevice]:
    """The GPUs a CUDA process would see, in CUDA's order, as NVML indices.

    ``visible`` holds ordinals, (prefixes of) ``GPU-`` UUIDs or ``MIG-`` UUIDs. Like CUDA, parsing
    stops at the first entry that names no device (``-1`` hides everything) or repeats one. The
    legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` form of CUDA 11.0 is not recognised (it names no device).
    """
    count = int(nvml.nvmlDeviceGetCount())
    if visible is None:
        return [VisibleDevice(i) for i in range(count)]
    order = order or cuda_device_order()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [nvml_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    entries = [e.strip() for e in visible.split(",")]
    if order != PCI_ORDER and any(e.isdigit() for e in entries):
        check_same_models(nvml, handles, visible)
    chosen: list[VisibleDevice] = []
    for entry in entries:
        device = _find(nvml, entry, handles, uuids)
        if device is None or device in chosen:
            break
        chosen.append(device)
    return chosen


def check_same_models(nvml: Any, handles: list[Any], visible: str) -> None:
    """Integer ids under FASTEST_FIRST are NVML indices only when every GPU is the same model."""
    names = sorted({nvml_text(nvml.nvmlDeviceGetName(h)) for h in handles})
    if len(names) > 1:
        raise BloomperfError(
            f"{VISIBLE_ENV}={visible}: integer ids follow CUDA's default FASTEST_FIRST order, "
            f"which is not NVML's PCI bus order on mixed GPUs ({', '.join(names)}); "
            f"set {ORDER_ENV}={PCI_ORDER} or name the GPUs by UUID"
        )


def _find(nvml: Any, entry: str, handles: list[Any], uuids: list[str]) -> VisibleDevice | None:
    if entry.isdigit():
        index = int(entry)
        return VisibleDevice(index) if index < len(uuids) else None
    if not entry:
        return None
    if entry.upper().startswith("MIG-"):
        return _find_mig(nvml, entry, handles)
    wanted = (entry if entry.upper().startswith("GPU-") else f"GPU-{entry}").lower()
    matches = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(wanted)]
    # An ambiguous UUID prefix names no device, as in CUDA.
    return VisibleDevice(matches[0]) if len(matches) == 1 else None


def _find_mig(nvml: Any, entry: str, handles: list[Any]) -> VisibleDevice | None:
    """The parent GPU of the MIG instance whose UUID starts with ``entry``."""
    found = [
        VisibleDevice(index, uuid)
        for index, handle in enumerate(handles)
        for uuid in mig_uuids(nvml, handle)
        if uuid.lower().startswith(entry.lower())
    ]
    return found[0] if len(found) == 1 else None


def mig_uuids(nvml: Any, handle: Any) -> list[str]:
    """UUIDs of the MIG instances on a GPU; [] where MIG is off or unsupported."""
    return [nvml_text(nvml.nvmlDeviceGetUUID(h)) for h in mig_handles(nvml, handle)]


def mig_handles(nvml: Any, handle: Any) -> list[Any]:
    try:
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except nvml.NVMLError:  # no MIG on this GPU
        return []
    found = []
    for slot in range(slots):
        try:
            found.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError:  # an empty slot, or MIG mode off
            continue
    return found


def measured_handle(nvml: Any, index: int, mig_uuid: str = "") -> Any:
    """The NVML handle whose memory a group fills: the MIG instance's, else the whole GPU's.

    In MIG mode the parent's memory figures need privileges and cover every instance.
    """
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    if not mig_uuid:
        return handle
    for mig in mig_handles(nvml, handle):
        if nvml_text(nvml.nvmlDeviceGetUUID(mig)) == mig_uuid:
            return mig
    raise nvml.NVMLError(nvml.NVML_ERROR_NOT_FOUND)


def plan_visible(gpu_count: int, visible: str | None) -> list[int]:
    """CUDA's rule for ``visible`` on a machine of ``gpu_count`` identical GPUs, without NVML.

    For plans made away from the machine (``--topology``): ordinals only, since a UUID cannot be
    resolved without the machine's NVML.
    """
    if visible is None:
        return list(range(gpu_count))
    chosen: list[int] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry and not entry.isdigit() and not entry.startswith("-"):
            raise BloomperfError(
                f"{VISIBLE_ENV}={visible}: a plan for another machine cannot resolve the UUID "
                f"{entry!r}; name its GPUs by index"
            )
        if not entry.isdigit() or int(entry) >= gpu_count or int(entry) in chosen:
            break
        chosen.append(int(entry))
    return chosen


def group_indices(visible: Sequence[int], world_size: int, spans_visible: bool) -> list[int]:
    """The GPUs one worker group uses: all visible ones for a backend that spreads one process
    over them (accelerate's device map), else the first ``world_size`` (one rank per GPU)."""
    if spans_visible:
        return list(visible)
    if world_size > len(visible):
        raise BloomperfError(
            f"--tp {world_size}: the group needs {world_size} GPUs, but only {len(visible)} "
            f"are visible ({VISIBLE_ENV}={cuda_visible_devices()!r})"
        )
    return list(visible[:world_size])


def worker_environment(devices: Sequence[VisibleDevice]) -> dict[str, str]:
    """CUDA's variables for a plain (one-process) worker on exactly ``devices``."""
    ids = [d.mig_uuid or str(d.index) for d in devices]
    return {ORDER_ENV: PCI_ORDER, VISIBLE_ENV: ",".join(ids)}


def nvml_text(value: Any) -> str:
    """Old nvidia-ml-py releases return bytes where newer ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)
