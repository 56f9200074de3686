"""The NVML sampler's rules, sample by sample: when it stops asking NVML for processes and what
it then says, what a process NVML lists without memory counts for, how its notes read, a GPU
or a process at zero, a rank that starts between two listings of the tree, and where its
devices come from. Its thread never samples here (an hour's interval): each ``mark()`` takes
two samples, the phase's last and the next phase's first, so every count below is exact."""

from __future__ import annotations

import os
import subprocess
import sys

import pynvml
import pytest

from bloomperf.measure.nvml_sampler import UNMATCHED_SAMPLES, NvmlSampler
from tests.nvml_replay import NvmlReplay

GB = 1_000_000_000
HOUR_S = 3600.0
# Above any pid_max this namespace hands out: a process NVML lists under its host PID.
HOST_PIDS = [4_000_000 + k for k in range(6)]
NOT_SUPPORTED = str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))


def sampler_on(nvml: NvmlReplay, visible: str | None = "0") -> NvmlSampler:
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible=visible, interval_s=HOUR_S)
    sampler.start()
    return sampler


def test_per_process_queries_stop_at_the_fifth_unmatched_sample_naming_four_pids() -> None:
    """Five samples in a row that list new processes, none of ours, and no more are asked;
    the note names the first four of them, in order."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.set_processes(0, [])
    sampler = sampler_on(nvml)
    sampler.mark()  # two listings of an idle GPU: nothing there is anyone's yet
    assert nvml.process_queries == 2
    nvml.set_processes(0, [(pid, GB) for pid in reversed(HOST_PIDS)])
    readings = [sampler.mark() for _ in range(4)]
    sampler.stop()
    # Samples 1-4 of the new processes in the first two marks, the fifth opens the third.
    assert [r.reason for r in readings[:2]] == ["", ""]
    assert nvml.process_queries == 2 + UNMATCHED_SAMPLES
    shown = ", ".join(str(pid) for pid in HOST_PIDS[:4])
    assert readings[2].reason == (
        f"NVML per-process memory off: {UNMATCHED_SAMPLES} samples listed new processes (PIDs "
        f"{shown}) but none of the worker tree's; NVML reports host PIDs inside a PID "
        "namespace (container)"
    )
    assert all(r.process_bytes is None for r in readings)
    assert readings[3].peak_bytes == nvml.devices[0]["memory_used"]  # the device, still


def test_once_our_tree_was_matched_other_processes_never_turn_the_query_off() -> None:
    """NVML attributed memory to our worker once: PIDs are the host's, and any later process
    none of ours (another user's job, ours gone) is no sign of a PID namespace."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.set_processes(0, [])
    sampler = sampler_on(nvml)
    sampler.mark()
    nvml.set_processes(0, [(os.getpid(), 3 * GB)])
    matched = sampler.mark()
    nvml.set_processes(0, [(pid, GB) for pid in HOST_PIDS])
    later = [sampler.mark() for _ in range(2 * UNMATCHED_SAMPLES)]
    queries = nvml.process_queries
    sampler.stop()
    assert matched.process_bytes == 3 * GB and matched.reason == ""
    assert queries == 2 + 2 + 2 * 2 * UNMATCHED_SAMPLES  # every sample still asked
    assert all(r.reason == "" for r in later)


def test_a_process_listed_without_its_memory_counts_for_nothing() -> None:
    """NVML gives ``usedGpuMemory`` None where it cannot tell (WDDM, some MIG setups)."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.set_processes(0, [(os.getpid(), None)])
    nvml.set_processes(1, [(os.getpid(), 2 * GB)])
    sampler = sampler_on(nvml, "0,1")
    reading = sampler.mark()
    sampler.stop()
    assert reading.process_bytes == 2 * GB and reading.reason == ""


def test_both_notes_are_kept_and_read_together() -> None:
    """A GPU that lists no processes (device memory still measured), then lost mid-run: the
    phase it was lost in keeps its samples and both reasons, and the next phase, which has no
    sample at all, both reasons."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    del nvml.devices[0]["processes"]  # the query answers NOT_SUPPORTED
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    nvml.script_used({0: [5 * GB, 6 * GB, lost]})
    sampler = sampler_on(nvml)
    first, second, third = sampler.mark(), sampler.mark(), sampler.mark()
    sampler.stop()
    unlisted = f"NVML lists no processes: {NOT_SUPPORTED}"
    both = f"NVML failed mid-run: GPU is lost; {unlisted}"
    assert first.source == "nvml" and first.peak_bytes == 5 * GB
    assert first.reason == unlisted and first.process_bytes is None
    # Its one sample is the level it started from, taken before the loss.
    assert (second.source, second.peak_bytes, second.start_bytes) == ("nvml", 6 * GB, 6 * GB)
    assert second.reason == both
    assert third.source == "unavailable" and third.peak_bytes is None
    assert third.reason == both
    assert nvml.process_queries == 1  # asked once, then never again


def test_a_gpu_and_a_process_at_zero_bytes_read_zero() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_used({0: [0], 1: [0]})
    nvml.set_processes(0, [(os.getpid(), 0)])
    nvml.set_processes(1, [])
    sampler = sampler_on(nvml, "0,1")
    readings = [sampler.mark() for _ in range(2)]
    sampler.stop()
    for reading in readings:
        assert reading.peak_bytes == 0 and reading.per_device_bytes == (0, 0)
        assert reading.process_bytes == 0 and reading.start_bytes == 0


def test_a_rank_started_since_the_last_listing_of_the_tree_is_counted_at_once() -> None:
    """The tree is listed again at most every half second; a new process NVML lists that is
    neither someone else's from before nor known is looked for in the tree at once."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.set_processes(0, [])
    sampler = sampler_on(nvml)
    sampler.mark()  # lists the tree: this process only
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nvml.set_processes(0, [(rank.pid, 2 * GB)])
        reading = sampler.mark()
    finally:
        rank.kill()
        rank.wait()
        sampler.stop()
    assert reading.process_bytes == 2 * GB and reading.reason == ""


def test_gpus_whose_integer_ids_cannot_be_mapped_are_the_readings_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mixed GPU models under CUDA's default order: no sample, and the reading says why."""
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.devices[1]["name"] = "NVIDIA H100 80GB HBM3"
    sampler = sampler_on(nvml, "0,1")
    reading = sampler.mark()
    sampler.stop()
    assert reading.source == "unavailable"
    assert reading.reason.startswith("NVML: CUDA_VISIBLE_DEVICES=0,1: integer ids follow")
    assert nvml.process_queries == 0


def test_a_failing_nvml_shutdown_is_not_the_runs_failure() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    calls: list[int] = []

    def shutdown() -> None:
        calls.append(1)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    nvml.nvmlShutdown = shutdown  # type: ignore[method-assign]
    sampler = sampler_on(nvml)
    sampler.mark()
    sampler.stop()
    sampler.stop()
    assert calls == [1]


def test_without_devices_or_visible_it_samples_the_gpus_cuda_visible_devices_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The controller's CUDA_VISIBLE_DEVICES, read when the sampler is made."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_used({2: [7 * GB]})
    sampler = sampler_on(nvml, visible=None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    reading = sampler.mark()
    sampler.stop()
    assert reading.per_device_bytes == (7 * GB,)
