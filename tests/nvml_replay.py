"""NVML answers recorded on GPU machines, served under pynvml's function names.

There is no GPU on the machine that runs the CPU suite; this is the one place where a stand-in is
legitimate: bloomperf's real NVML code (topology detection, the memory sampler) is driven with
the answers a real machine gives. Errors are pynvml's own exception classes.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

RECORDINGS = Path(__file__).parent / "data" / "nvml"


class Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class NvmlReplay:
    NVMLError = pynvml.NVMLError
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.devices: list[dict[str, Any]] = recording["devices"]
        self.init_calls = 0
        self.shutdown_calls = 0
        self._lock = threading.Lock()
        # Scripted device used memory: one queue per device, one entry per query. An entry is
        # bytes or an NVMLError (raised from then on); an empty queue repeats its last value.
        self._used: list[deque[Any]] = [deque() for _ in self.devices]
        self._last_used = [int(d["memory_used"]) for d in self.devices]
        self.drained = threading.Event()
        self.drained.set()

    @classmethod
    def load(cls, name: str) -> NvmlReplay:
        return cls(json.loads((RECORDINGS / f"{name}.json").read_text()))

    def script_used(self, per_device: dict[int, list[Any]]) -> None:
        """Queue the next answers of nvmlDeviceGetMemoryInfo(...).used, by device index."""
        with self._lock:
            for index, values in per_device.items():
                self._used[index].extend(values)
            self.drained.clear()

    def set_processes(self, index: int, processes: list[tuple[int, int | None]]) -> None:
        self.devices[index]["processes"] = [{"pid": p, "usedGpuMemory": m} for p, m in processes]

    # ---- pynvml's functions -----------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.recording["driver_version"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.recording["cuda_driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(index)

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return str(self._device(handle)["name"])

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return str(self._device(handle)["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> SimpleNamespace:
        total = int(self._device(handle)["memory_total"])
        with self._lock:
            queue = self._used[handle.index]
            if queue and not isinstance(queue[0], BaseException):
                self._last_used[handle.index] = int(queue.popleft())
                failing = False
            else:
                # A lost GPU stays lost: the error is answered to every later query.
                failing = bool(queue)
            if not any(q and not isinstance(q[0], BaseException) for q in self._used):
                self.drained.set()
            if failing:
                raise queue[0]
            used = self._last_used[handle.index]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        states = self._device(handle)["nvlink_state"]
        if link >= len(states):
            # What NVML answers for a link the GPU does not have.
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(states[link])

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, clock: int) -> int:
        key = {pynvml.NVML_CLOCK_SM: "max_clock_sm_mhz", pynvml.NVML_CLOCK_MEM: "max_clock_mem_mhz"}
        if clock not in key:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self._device(handle)[key[clock]])

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        return int(self._device(handle)["power_limit_mw"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self._device(handle)["processes"]]

    def _device(self, handle: Handle) -> dict[str, Any]:
        return self.devices[handle.index]
