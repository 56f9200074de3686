"""benchmarks/record_nvml.py, which records a machine's real NVML answers for the replay: run here
against the replay itself (what it records must replay to the same answers), and on this
machine's real, absent NVML. Its run on a GPU is the nightly's and benchmarks/gpu_check.sh's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from benchmarks.record_nvml import record
from bloomperf.catalog.devices import resolve_visible
from bloomperf.catalog.topology import detect_topology
from bloomperf.doctor.nvml import check_nvml
from tests.nvml_replay import NvmlReplay, nvml_error_here

ROOT = Path(__file__).resolve().parents[1]
DATE = "2026-12-01T00:00:00+00:00"


def test_a_recording_of_the_replay_replays_the_same_answers() -> None:
    original = json.loads((ROOT / "tests/data/nvml/8xA100-SXM4-80GB.json").read_text())
    recorded = record(NvmlReplay(original), date=DATE)
    # Every answer the hand-written file gives is recorded as given ...
    for theirs, ours in zip(original["devices"], recorded["devices"], strict=True):
        assert {k: v for k, v in ours.items() if k != "errors"} == theirs
        # ... and what it does not answer is recorded as the error NVML raises for it.
        assert ours["errors"]["persistence_mode"] == {
            "error": "NVMLError_NotSupported",
            "value": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "text": "Not Supported",
        }
        assert ours["errors"]["nvlink_state"]["error"] == "NVMLError_InvalidArgument"
    assert recorded["recorded"]["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 8
    assert recorded["recorded"]["driver_version"] == original["driver_version"] == "535.104.05"
    # Written to JSON and replayed, the recording answers exactly what it recorded.
    written = json.loads(json.dumps(recorded))
    assert record(NvmlReplay(written), date=DATE) == recorded


def test_recorded_answers_and_errors_reach_bloomperf_as_recorded() -> None:
    original = json.loads((ROOT / "tests/data/nvml/4xA100-SXM4-80GB.json").read_text())
    gpu = original["devices"][1]
    gpu["mig"] = [{"uuid": "MIG-5e0c", "memory_total": 10 * 2**30, "memory_used": 2**20}]
    gpu["persistence_mode"] = 1
    gpu["energy_mj"] = 123456
    gpu["telemetry"] = {
        "sm_mhz": 1410,
        "mem_mhz": 1593,
        "power_mw": 61000,
        "temp_c": 33,
        "reasons": 1,
    }
    replay = NvmlReplay(original)
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    del replay.devices[2]["processes"]  # as a recording keeps a query that raised
    replay.devices[2]["errors"] = {"processes": {"value": pynvml.NVML_ERROR_GPU_IS_LOST}}
    recorded = json.loads(json.dumps(record(replay, date=DATE)))
    ours = recorded["devices"]
    assert ours[1]["mig"] == gpu["mig"] and ours[1]["mig_slots"] == 7
    assert (ours[1]["persistence_mode"], ours[1]["energy_mj"]) == (1, 123456)
    assert ours[1]["telemetry"] == gpu["telemetry"]
    assert "processes" not in ours[2]
    assert ours[2]["errors"]["processes"] == {
        "error": type(lost).__name__,
        "value": pynvml.NVML_ERROR_GPU_IS_LOST,
        "text": str(lost),
    }
    # bloomperf's own NVML code reads the recording as it read the original.
    again = NvmlReplay(recorded)
    assert detect_topology(again) == detect_topology(NvmlReplay(original))
    assert resolve_visible(again, "MIG-5e0c")[0].mig_uuid == "MIG-5e0c"
    assert check_nvml(again, "cuda") == check_nvml(NvmlReplay(original), "cuda")


def test_without_nvml_it_exits_2_with_one_line(tmp_path: Path) -> None:
    why = nvml_error_here()
    if why is None:
        pytest.skip("NVML works on this machine: the missing-NVML path cannot be observed")
    out = tmp_path / "nvml.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/record_nvml.py"), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == f"record_nvml: no NVML on this machine: {why}\n"
    assert not out.exists()


class WithoutCall:
    """An NVML module whose nvidia-ml-py lacks one call (an older or newer release): every other
    answer is the replay's."""

    def __init__(self, replay: NvmlReplay, missing: str) -> None:
        self._replay = replay
        self._missing = missing

    def __getattr__(self, name: str) -> object:
        if name == self._missing:
            raise AttributeError(f"module 'pynvml' has no attribute '{name}'")
        return getattr(self._replay, name)


@pytest.mark.parametrize(
    ("call", "key"),
    [
        ("nvmlDeviceGetTotalEnergyConsumption", "energy_mj"),
        ("nvmlDeviceGetMaxClockInfo", "max_clock_sm_mhz"),
        ("nvmlDeviceGetPersistenceMode", "persistence_mode"),
    ],
)
def test_a_call_the_library_lacks_is_recorded_not_fatal(call: str, key: str) -> None:
    original = json.loads((ROOT / "tests/data/nvml/8xA100-SXM4-80GB.json").read_text())
    recorded = record(WithoutCall(NvmlReplay(original), call), date=DATE)
    error = recorded["devices"][0]["errors"][key]
    assert error["error"] == "NVMLError_FunctionNotFound" and call in error["text"]
    assert error["value"] == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    # Replayed, the call raises NVML's own error for a missing function.
    replay = NvmlReplay(json.loads(json.dumps(recorded)))
    replay.nvmlInit()
    assert recorded["devices"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    if key == "energy_mj":
        handle = replay.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            replay.nvmlDeviceGetTotalEnergyConsumption(handle)
