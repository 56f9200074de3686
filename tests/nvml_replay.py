"""NVML answers from a file, served under pynvml's function names.

There is no GPU on the machine that runs the CPU suite; this is the one place where a stand-in is
legitimate: bloomperf's real NVML code (topology detection, the memory sampler, doctor) is driven
with answers in the shape nvidia-ml-py returns them. The A100 files in tests/data/nvml/ were
written down by hand (their ``note`` says which machine each imitates); where the shape or an
error code of a real driver is in doubt, the test says so. ``1xH100-80GB-HBM3.json`` was
recorded on a real H100 (driver 580.159.04, 2026-12-05). ``benchmarks/record_nvml.py`` writes
the same format from a machine's real NVML (the nightly uploads one per runner), with a
``recorded`` entry naming the machine. Errors are pynvml's own exception classes.

A device's optional query that failed is named in ``"errors": {key: {"error": class name,
"value": NVML error code, "text": ...}}`` and raised again; a key absent without an error answers
NOT_SUPPORTED. ``energy_mj`` and ``telemetry`` (``sm_mhz``, ``mem_mhz``, ``power_mw``, ``temp_c``,
``reasons``) are answered until a test scripts other values.

A device may list MIG instances (``"mig": [{"uuid": "MIG-...", "memory_total": ...,
"memory_used": ...}]``); one without that key answers as a GPU without MIG support.
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


def nvml_error_here() -> pynvml.NVMLError | None:
    """What this machine's real NVML raises at init, None where it works: the reason bloomperf
    must report on its paths without NVML (observable only where NVML is absent)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return exc
    pynvml.nvmlShutdown()
    return None


class Handle:
    def __init__(self, index: int, mig: int | None = None) -> None:
        self.index = index
        self.mig = mig  # the MIG instance's slot on GPU ``index``; None for the whole GPU


class NvmlReplay:
    NVMLError = pynvml.NVMLError
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_ERROR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.devices: list[dict[str, Any]] = recording["devices"]
        self.init_calls = 0
        self.shutdown_calls = 0
        self.process_queries = 0
        self._lock = threading.Lock()
        # Scripted device used memory: one queue per device, one entry per query. An entry is
        # bytes or an NVMLError (raised from then on); an empty queue repeats its last value.
        self._used: list[deque[Any]] = [deque() for _ in self.devices]
        self._last_used = [int(d["memory_used"]) for d in self.devices]
        self.drained = threading.Event()
        self.drained.set()
        self._energy: dict[int, deque[Any]] = {}
        self._last_energy: dict[int, int] = {}
        self._telemetry: dict[int, deque[dict[str, int]]] = {}
        self._last_telemetry: dict[int, dict[str, int]] = {}
        for index, device in enumerate(self.devices):
            if "energy_mj" in device:
                self._energy[index] = deque()
                self._last_energy[index] = int(device["energy_mj"])
            if "telemetry" in device:
                self._telemetry[index] = deque()
                self._last_telemetry[index] = dict(device["telemetry"])

    @classmethod
    def load(cls, name: str) -> NvmlReplay:
        return cls(json.loads((RECORDINGS / f"{name}.json").read_text()))

    def script_used(self, per_device: dict[int, list[Any]]) -> None:
        """Queue the next answers of nvmlDeviceGetMemoryInfo(...).used, by device index."""
        with self._lock:
            for index, values in per_device.items():
                self._used[index].extend(values)
            self.drained.clear()

    def script_energy(self, per_device: dict[int, list[Any]]) -> None:
        """Queue the next answers of nvmlDeviceGetTotalEnergyConsumption (mJ), by device index:
        an entry is mJ or an NVMLError; an empty queue repeats its last value."""
        with self._lock:
            for index, values in per_device.items():
                self._energy.setdefault(index, deque()).extend(values)

    def script_telemetry(self, per_device: dict[int, list[dict[str, int]]]) -> None:
        """Queue the next telemetry readings by device index, each a dict of ``sm_mhz``,
        ``mem_mhz``, ``power_mw``, ``temp_c``, ``reasons``; one entry is taken per
        SM-clock query (the first of a sampler's reads); an
        empty queue repeats its last entry; a device never scripted answers NOT_SUPPORTED."""
        with self._lock:
            for index, values in per_device.items():
                self._telemetry.setdefault(index, deque()).extend(values)
                self._last_telemetry.setdefault(index, values[0])

    def _reading(self, handle: Handle, key: str, advance: bool = False) -> int:
        with self._lock:
            queue = self._telemetry.get(handle.index)
            if queue is None:
                raise self._missing(handle, "telemetry")
            if queue and key == "sm_mhz":  # a sampler's reading starts with the SM clock
                self._last_telemetry[handle.index] = queue.popleft()
            return int(self._last_telemetry[handle.index][key])

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock: int) -> int:
        return self._reading(handle, "sm_mhz" if clock == pynvml.NVML_CLOCK_SM else "mem_mhz")

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return self._reading(handle, "power_mw")

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        return self._reading(handle, "temp_c")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        return self._reading(handle, "reasons")

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
        if handle.mig is not None:
            return str(self._mig(handle)["uuid"])
        return str(self._device(handle)["uuid"])

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        if "mig" not in self._device(handle):
            raise self._missing(handle, "mig")
        return int(self._device(handle).get("mig_slots", 7))  # an A100/H100/H200 has seven

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, slot: int) -> Handle:
        instances = self._device(handle).get("mig")
        if instances is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= slot < len(instances):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return Handle(handle.index, slot)

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> SimpleNamespace:
        if handle.mig is not None:
            mig = self._mig(handle)
            total, used = int(mig["memory_total"]), int(mig["memory_used"])
            return SimpleNamespace(total=total, used=used, free=total - used)
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
            # What NVML answers for a link the GPU does not have, unless a recording says.
            raise self._missing(handle, "nvlink_state", pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(states[link])

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, clock: int) -> int:
        key = {pynvml.NVML_CLOCK_SM: "max_clock_sm_mhz", pynvml.NVML_CLOCK_MEM: "max_clock_mem_mhz"}
        if clock not in key:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self._setting(handle, key[clock]))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        with self._lock:
            queue = self._energy.get(handle.index)
            if queue is None:  # nothing scripted: a GPU older than Volta
                raise self._missing(handle, "energy_mj")
            if queue:
                value = queue.popleft()
                if isinstance(value, BaseException):
                    raise value
                self._last_energy[handle.index] = int(value)
            return self._last_energy[handle.index]

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        return int(self._setting(handle, "power_limit_mw"))

    # Settings `bloomperf doctor` reads; a device without the key answers NOT_SUPPORTED, as a
    # GPU without the feature does.

    def nvmlDeviceGetPersistenceMode(self, handle: Handle) -> int:
        return int(self._setting(handle, "persistence_mode"))

    def nvmlDeviceGetApplicationsClock(self, handle: Handle, clock: int) -> int:
        return int(self._setting(handle, f"applications_clock_{self._clock(clock)}_mhz"))

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Handle, clock: int) -> int:
        return int(self._setting(handle, f"default_applications_clock_{self._clock(clock)}_mhz"))

    def nvmlDeviceGetEccMode(self, handle: Handle) -> list[int]:
        return [int(v) for v in self._setting(handle, "ecc_mode")]  # [current, pending]

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, kind: int, counter: int) -> int:
        wanted = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        if (kind, counter) != wanted:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(self._setting(handle, "ecc_uncorrected_volatile"))

    def _setting(self, handle: Handle, key: str) -> Any:
        device = self._device(handle)
        if key not in device:
            raise self._missing(handle, key)
        return device[key]

    def _missing(
        self, handle: Handle, key: str, code: int = pynvml.NVML_ERROR_NOT_SUPPORTED
    ) -> pynvml.NVMLError:
        """The error a recording names for ``key``, else ``code``'s (pynvml picks the class)."""
        recorded = self._device(handle).get("errors", {}).get(key)
        return pynvml.NVMLError(int(recorded["value"]) if recorded else code)

    def _clock(self, clock: int) -> str:
        return {pynvml.NVML_CLOCK_SM: "sm", pynvml.NVML_CLOCK_MEM: "mem"}[clock]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[SimpleNamespace]:
        self.process_queries += 1
        return [SimpleNamespace(**p) for p in self._setting(handle, "processes")]

    def _device(self, handle: Handle) -> dict[str, Any]:
        return self.devices[handle.index]

    def _mig(self, handle: Handle) -> dict[str, Any]:
        instance: dict[str, Any] = self.devices[handle.index]["mig"][handle.mig]
        return instance
