"""Record this machine's NVML answers in the format the CPU suite replays (tests/nvml_replay.py).

    python benchmarks/record_nvml.py --output nvml.json

Asks every GPU what bloomperf asks it (topology, the memory sampler, energy, telemetry, doctor)
through the real pynvml and writes the answers; an optional query that fails is kept as its
error (pynvml's class, NVML's code, the text), and ``recorded`` names the machine (driver, GPU
names, date). Copied to tests/data/nvml/, a recording makes the CPU suite test against a real
driver's answers. The nightly workflow and benchmarks/gpu_check.sh run it.
Exit status: 0 written; 2 no NVML on this machine (one line says why) or bad usage.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

from bloomperf.catalog.topology import load_nvml

RECORDER = "benchmarks/record_nvml.py"


def record(nvml: Any, date: str | None = None) -> dict[str, Any]:
    """Every answer of an initialised NVML, in the replay's format."""
    driver = text(nvml.nvmlSystemGetDriverVersion())
    count = int(nvml.nvmlDeviceGetCount())
    devices = [record_device(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    names = [d["name"] for d in devices]
    models = ", ".join(sorted(set(names)))
    # timezone.utc, not datetime.UTC: that needs Python 3.11, and pyproject admits 3.10.
    date = date or datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "note": (
            f"NVML answers recorded by {RECORDER} on {count} GPU(s) ({models}), driver "
            f"{driver}, {date}; tests/nvml_replay.py serves them under pynvml's names."
        ),
        "recorded": {
            "by": RECORDER,
            "date": date,
            "driver_version": driver,
            "gpus": names,
            "platform": platform.platform(),
            "nvidia_ml_py": nvidia_ml_py_version(),
        },
        "driver_version": driver,
        "cuda_driver_version": int(nvml.nvmlSystemGetCudaDriverVersion()),
        "devices": devices,
    }


def record_device(nvml: Any, handle: Any) -> dict[str, Any]:
    """One GPU's answers; those that raise go to ``errors``, so the replay raises them too."""
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    device: dict[str, Any] = {
        "name": text(nvml.nvmlDeviceGetName(handle)),
        "uuid": text(nvml.nvmlDeviceGetUUID(handle)),
        "memory_total": int(memory.total),
        "memory_used": int(memory.used),
    }
    errors: dict[str, dict[str, Any]] = {}

    def answer(key: str, query: Callable[[], Any]) -> None:
        try:
            device[key] = query()
        except nvml.NVMLError as exc:
            errors[key] = error_of(exc)
        except AttributeError as exc:  # this nvidia-ml-py lacks the call: record, go on
            errors[key] = missing_call(nvml, exc)

    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    device["nvlink_state"] = nvlink_states(nvml, handle, errors)
    answer("max_clock_sm_mhz", lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, sm)))
    answer("max_clock_mem_mhz", lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, mem)))
    answer("power_limit_mw", lambda: int(nvml.nvmlDeviceGetPowerManagementLimit(handle)))
    answer("processes", lambda: processes(nvml, handle))
    answer("persistence_mode", lambda: int(nvml.nvmlDeviceGetPersistenceMode(handle)))
    for name, clock in (("sm", sm), ("mem", mem)):
        answer(
            f"applications_clock_{name}_mhz",
            partial(applications_clock, nvml.nvmlDeviceGetApplicationsClock, handle, clock),
        )
        answer(
            f"default_applications_clock_{name}_mhz",
            partial(applications_clock, nvml.nvmlDeviceGetDefaultApplicationsClock, handle, clock),
        )
    answer("ecc_mode", lambda: [int(v) for v in nvml.nvmlDeviceGetEccMode(handle)])
    answer(
        "ecc_uncorrected_volatile",
        lambda: int(
            nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        ),
    )
    answer("energy_mj", lambda: int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
    answer("telemetry", lambda: telemetry(nvml, handle))
    answer("mig_slots", lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)))
    if "mig_slots" in device:
        device["mig"] = mig_instances(nvml, handle, device["mig_slots"])
    else:
        errors["mig"] = errors.pop("mig_slots")  # the replay answers the count from "mig"
    if errors:
        device["errors"] = errors
    return device


def nvlink_states(nvml: Any, handle: Any, errors: dict[str, dict[str, Any]]) -> list[int]:
    """Link states up to the first link NVML refuses (the replay refuses every later one)."""
    states = []
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            states.append(int(nvml.nvmlDeviceGetNvLinkState(handle, link)))
        except nvml.NVMLError as exc:
            errors["nvlink_state"] = error_of(exc)
            break
    return states


def error_of(exc: Any) -> dict[str, Any]:
    """An NVMLError as the replay raises it again: NVML's code picks pynvml's class."""
    return {"error": type(exc).__name__, "value": int(exc.value), "text": str(exc)}


def missing_call(nvml: Any, exc: AttributeError) -> dict[str, Any]:
    """A call (or constant) the installed nvidia-ml-py lacks, as NVML's own answer for a
    function the library does not have, so that the replay raises NVMLError_FunctionNotFound
    there (bloomperf's telemetry treats both alike)."""
    code = int(getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
    return {
        "error": "NVMLError_FunctionNotFound",
        "value": code,
        "text": f"nvidia-ml-py {nvidia_ml_py_version()} lacks it ({exc})",
    }


def applications_clock(query: Callable[[Any, Any], Any], handle: Any, clock: Any) -> int:
    """One application clock (current or default), in MHz."""
    return int(query(handle, clock))


def processes(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    return [
        {
            "pid": int(p.pid),
            "usedGpuMemory": None if p.usedGpuMemory is None else int(p.usedGpuMemory),
        }
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    ]


def telemetry(nvml: Any, handle: Any) -> dict[str, int]:
    """One reading of what measure/telemetry.py polls, in the replay's keys."""
    return {
        "sm_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "mem_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        "power_mw": int(nvml.nvmlDeviceGetPowerUsage(handle)),
        "temp_c": int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        "reasons": int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
    }


def mig_instances(nvml: Any, handle: Any, slots: int) -> list[dict[str, Any]]:
    """The MIG instances present (empty slots, or MIG mode off, give none)."""
    found = []
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:
            continue
        memory = nvml.nvmlDeviceGetMemoryInfo(mig)
        found.append(
            {
                "uuid": text(nvml.nvmlDeviceGetUUID(mig)),
                "memory_total": int(memory.total),
                "memory_used": int(memory.used),
            }
        )
    return found


def text(value: Any) -> str:
    """Old nvidia-ml-py releases return bytes where newer ones return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def nvidia_ml_py_version() -> str:
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, type=Path, help="the JSON file to write")
    args = parser.parse_args(argv)
    try:
        nvml = load_nvml()
        nvml.nvmlInit()
    except ImportError:
        print("record_nvml: no NVML on this machine: nvidia-ml-py is not installed")
        return 2
    except Exception as exc:  # pynvml.NVMLError: no driver, no GPU
        print(f"record_nvml: no NVML on this machine: {exc}")
        return 2
    try:
        recording = record(nvml)
    finally:
        nvml.nvmlShutdown()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(recording, indent=2) + "\n")
    gpus = ", ".join(recording["recorded"]["gpus"])
    print(f"record_nvml: {len(recording['devices'])} GPU(s) ({gpus}) -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
