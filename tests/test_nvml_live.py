"""bloomperf's NVML code against the real library on a real GPU (``pytest -m gpu``, the nightly).

The CPU suite drives this code with replayed answers (tests/nvml_replay.py); here the answers are
the driver's: a child process really allocates GPU memory and the sampler must see it, on the
device and under the child's PID; topology detection must name the GPUs torch.cuda sees; and
benchmarks/record_nvml.py's recording of this driver must replay as the driver answers.
Torch touches the GPU only in child processes, so the pytest process holds no CUDA context (the
nightly's matrix runs after these tests and measures memory). Without a GPU every test is skipped
with NVML's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from benchmarks.record_nvml import record
from bloomperf.catalog.devices import measured_handle
from bloomperf.catalog.topology import Gpu, detect_topology, load_nvml
from bloomperf.measure.nvml_sampler import NvmlSampler
from tests.nvml_replay import NvmlReplay, nvml_error_here

pytestmark = pytest.mark.gpu

GIB = 1024**3
ALLOCATED_GIB = 2

# Creates its CUDA context, says so, waits; allocates when told, says so, and holds the block.
ALLOCATE = """
import sys, torch
torch.empty(1, device="cuda:0")
print("context", flush=True)
sys.stdin.readline()
block = torch.empty(int(sys.argv[1]) * 1024**3, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("allocated", flush=True)
sys.stdin.readline()
"""


@pytest.fixture(scope="module")
def gpu() -> Gpu:
    why = nvml_error_here()
    if why is not None:
        pytest.skip(f"no GPU: NVML: {why}")
    topology = detect_topology()
    if topology.device != "cuda":
        pytest.skip(f"no GPU: {topology.nvml_reason}")
    return topology.gpus[0]


@contextmanager
def child_on(gpu: Gpu) -> Iterator[subprocess.Popen[str]]:
    """A child process with a CUDA context on ``gpu`` (and only that GPU), not yet allocating."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu.mig_uuid or gpu.uuid}
    child = subprocess.Popen(
        [sys.executable, "-c", ALLOCATE, str(ALLOCATED_GIB)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "context\n"
        yield child
    finally:
        child.kill()
        child.wait(30)


def tell(child: subprocess.Popen[str], expect: str) -> None:
    """Let the child go on to its next step and wait until it says it took it."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline() == f"{expect}\n"


def allocation_seen(gpu: Gpu) -> tuple[Any, int, dict[int, int | None]]:
    """The sampler's reading of the phase in which a child allocated ALLOCATED_GIB, the child's
    PID, and the processes NVML listed on the GPU (PID: bytes) while the block was held."""
    with child_on(gpu) as child:
        sampler = NvmlSampler(child.pid, devices=[gpu.visible()])
        sampler.start()
        try:
            sampler.mark()  # the phase before: the context, nothing allocated yet
            tell(child, "allocated")
            time.sleep(0.2)  # a score of polls while the block is held
            reading = sampler.mark()
        finally:
            sampler.stop()
        return reading, child.pid, listed_processes(gpu)


def listed_processes(gpu: Gpu) -> dict[int, int | None]:
    nvml = load_nvml()
    nvml.nvmlInit()
    try:
        handle = measured_handle(nvml, gpu.index, gpu.mig_uuid)
        return {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    finally:
        nvml.nvmlShutdown()


def test_the_sampler_sees_a_real_allocation_on_the_device(gpu: Gpu) -> None:
    reading, _, _ = allocation_seen(gpu)
    assert reading.source == "nvml", reading.reason
    assert len(reading.per_device_bytes) == 1 and reading.start_bytes is not None
    rise = reading.per_device_bytes[0] - reading.start_bytes
    # The block itself, plus at most a little the driver maps beside it.
    assert ALLOCATED_GIB * GIB <= rise <= ALLOCATED_GIB * GIB + 256 * 2**20, rise
    assert reading.peak_bytes == reading.per_device_bytes[0]


def test_the_sampler_attributes_the_allocation_to_the_childs_pid(gpu: Gpu) -> None:
    reading, pid, listed = allocation_seen(gpu)
    if pid not in listed:
        # Inside a container NVML lists host PIDs (or none): no PID of ours can match.
        pytest.skip(f"NVML lists PIDs {sorted(listed)}, not the child's {pid}: {reading.reason}")
    # NVML lists the child's PID with its context and the block: the sampler summed exactly it.
    used = listed[pid]
    assert used is not None and used >= ALLOCATED_GIB * GIB, (pid, listed)
    assert reading.process_bytes is not None, reading.reason
    assert used <= reading.process_bytes <= reading.per_device_bytes[0], (used, reading)


def test_a_recording_of_live_nvml_replays_as_live_nvml(gpu: Gpu) -> None:
    """benchmarks/record_nvml.py on the real library: what it writes, replayed, is what bloomperf
    reads from the driver (topology, every answer it recorded)."""
    nvml = load_nvml()
    nvml.nvmlInit()
    try:
        recorded = json.loads(json.dumps(record(nvml)))
    finally:
        nvml.nvmlShutdown()
    assert [d["uuid"] for d in recorded["devices"]][gpu.index] == gpu.uuid
    replay = NvmlReplay(recorded)
    assert record(replay, date=recorded["recorded"]["date"]) == recorded
    assert detect_topology(replay) == detect_topology()


def test_topology_on_live_nvml_names_the_gpus_torch_sees(gpu: Gpu) -> None:
    topology = detect_topology()
    script = (
        "import json, torch\n"
        "print(json.dumps([[torch.cuda.get_device_name(i),"
        " torch.cuda.get_device_properties(i).total_memory]"
        " for i in range(torch.cuda.device_count())]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    seen = json.loads(done.stdout)
    assert len(topology.gpus) == len(seen)
    assert sorted(g.name for g in topology.gpus) == sorted(name for name, _ in seen)
    # CUDA's total leaves out what the driver reserves; NVML's includes it: a few percent apart.
    nvml_totals = sorted(g.memory_bytes for g in topology.gpus)
    cuda_totals = sorted(total for _, total in seen)
    for nvml_total, cuda_total in zip(nvml_totals, cuda_totals, strict=True):
        assert abs(cuda_total - nvml_total) <= 0.05 * nvml_total, (nvml_total, cuda_total)
    assert topology.driver and topology.cuda
