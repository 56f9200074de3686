"""Memory samplers (RSS on real processes, NVML on hand-written answers and here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pynvml
import pytest

from bloomperf.catalog.devices import VisibleDevice
from bloomperf.core.errors import BloomperfError
from bloomperf.measure.memory import create_sampler
from bloomperf.measure.nvml_sampler import NvmlSampler
from bloomperf.measure.rss_sampler import RssSampler, read_peak_rss
from bloomperf.measure.sampler import process_tree_pids
from tests.nvml_replay import NvmlReplay, nvml_error_here

MB = 1_000_000
GB = 1_000_000_000

# A process that allocates on command. "spawn N" starts a grandchild that allocates N MB, frees
# them and stays alive, so its peak is only in the kernel's high-water mark; "spawn N D" puts
# that allocating process D generations below this one (each generation an allocator too).
ALLOCATOR = r"""
import subprocess, sys, time
held, grandchild = [], None
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "alloc":
        held.append(b"x" * (int(arg) * 1_000_000))  # written, so resident
    elif cmd == "free":
        held.clear()
    elif cmd == "hold":
        time.sleep(float(arg))
    elif cmd == "spawn":
        size, _, depth = arg.partition(" ")
        grandchild = subprocess.Popen(
            [sys.executable, "-c", sys.argv[1], sys.argv[1]], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        deeper = int(depth or 1) - 1
        commands = [f"spawn {size} {deeper}"] if deeper else [f"alloc {size}", "free"]
        for c in commands:
            grandchild.stdin.write(c + "\n"); grandchild.stdin.flush()
            answer = grandchild.stdout.readline().strip()
        print(answer if deeper else grandchild.pid, flush=True)
        continue
    print("ok", flush=True)
"""


class Allocator:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ALLOCATOR, ALLOCATOR],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def do(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture
def allocator() -> Iterator[Allocator]:
    child = Allocator()
    child.do("free")  # wait until it runs
    yield child
    child.close()


# ---- RSS --------------------------------------------------------------------------------------


def test_rss_peak_is_seen_after_free_and_reset_at_each_mark(allocator: Allocator) -> None:
    sampler = RssSampler(allocator.pid)
    sampler.start()
    assert sampler.method == "hwm"  # root on Linux: no polling thread
    allocator.do("alloc 200")
    allocator.do("free")
    assert allocator.rss() < 100 * MB
    load = sampler.mark()
    assert load.source == "rss"
    assert load.reason == ""
    assert load.peak_bytes is not None and load.peak_bytes >= 200 * MB

    before = allocator.rss()
    allocator.do("alloc 20")
    after = allocator.rss()
    cell = sampler.mark()
    # The previous phase's 200 MB must not leak into this one.
    assert cell.peak_bytes is not None and cell.peak_bytes < 100 * MB
    # This phase's 20 MB is in its peak, and nothing else is: judged against the resident sets
    # read around the allocation, with half of it as slack (the kernel's counters lag by pages,
    # and a loaded machine's reclaim moves the resident set by a few MB).
    assert cell.peak_bytes >= before + 10 * MB, (before, after, cell.peak_bytes)
    assert cell.peak_bytes <= after + 10 * MB, (before, after, cell.peak_bytes)
    sampler.stop()
    sampler.stop()


def test_rss_includes_descendants(allocator: Allocator) -> None:
    sampler = RssSampler(allocator.pid)
    sampler.start()
    grandchild = int(allocator.do("spawn 150"))
    assert grandchild in process_tree_pids(allocator.pid)
    reading = sampler.mark()
    # The child alone never held more than ~15 MB; the grandchild's freed 150 MB count.
    assert reading.peak_bytes is not None and reading.peak_bytes >= 150 * MB
    after = sampler.mark()
    assert after.peak_bytes is not None and after.peak_bytes < 100 * MB
    sampler.stop()


def test_rss_includes_descendants_of_every_generation(allocator: Allocator) -> None:
    """A rank's own children (DeepSpeed's compilers, a launcher's ranks) count: the process
    that allocates is three generations below the root here."""
    sampler = RssSampler(allocator.pid)
    sampler.start()
    deepest = int(allocator.do("spawn 150 3"))
    assert psutil.Process(deepest).parent().parent().parent().pid == allocator.pid
    assert deepest in process_tree_pids(allocator.pid)
    reading = sampler.mark()
    assert reading.peak_bytes is not None and reading.peak_bytes >= 150 * MB
    sampler.stop()


def test_rss_peak_is_the_kernels_in_bytes() -> None:
    """VmHWM's kB are KiB: a process that holds its peak has a peak equal to its resident set
    as psutil counts it (pages times the page size), to a few pages. (Not ``ru_maxrss``: it
    keeps the pre-exec high-water mark of the forked parent, the whole test process.)"""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "held = b'x' * 300_000_000\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        resident = psutil.Process(child.pid).memory_info().rss
        peak = read_peak_rss(child.pid)
        assert resident - 1 * MB <= peak <= resident + 4 * MB  # kB for KiB: 7 MB short
    finally:
        child.kill()
        child.wait()


def test_rss_polling_fallback_sees_a_held_peak(allocator: Allocator) -> None:
    sampler = RssSampler(allocator.pid, method="poll")
    sampler.start()
    allocator.do("alloc 200")
    allocator.do("hold 0.1")
    allocator.do("free")
    reading = sampler.mark()
    assert reading.peak_bytes is not None and reading.peak_bytes >= 200 * MB
    assert reading.reason == "RSS polled every 10 ms"
    after = sampler.mark().peak_bytes
    # The previous phase's 200 MB must not leak into this one, polled or not.
    assert after is not None and after < 100 * MB
    sampler.stop()


def test_rss_of_a_process_that_is_gone_is_unavailable() -> None:
    child = Allocator()
    sampler = RssSampler(child.pid)
    sampler.start()
    child.close()
    reading = sampler.mark()
    assert reading.source == "unavailable"
    assert reading.peak_bytes is None
    assert str(child.pid) in reading.reason


def test_mark_before_start_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError):
        RssSampler(os.getpid()).mark()


# ---- NVML on hand-written answers ---------------------------------------------------------------


def test_nvml_peaks_over_time_per_device_and_per_process() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    me = os.getpid()
    nvml.set_processes(0, [(me, 3 * GB), (2**22 + 12345, 7 * GB)])  # the second is not ours
    nvml.set_processes(1, [(me, 1 * GB)])
    # The devices peak at different times: the sum's peak is 6 GB, each device's 5 GB.
    nvml.script_used({0: [1 * GB, 5 * GB, 1 * GB], 1: [5 * GB, 1 * GB, 1 * GB]})
    sampler = NvmlSampler(me, nvml=nvml, visible="0,1", interval_s=0.001)
    sampler.start()
    assert nvml.drained.wait(5)
    load = sampler.mark()
    assert load.source == "nvml"
    assert load.peak_bytes == 6 * GB
    assert load.per_device_bytes == (5 * GB, 5 * GB)
    assert load.process_bytes == 4 * GB
    assert load.reason == ""

    nvml.script_used({0: [2 * GB], 1: [2 * GB]})
    assert nvml.drained.wait(5)
    cell = sampler.mark()
    assert cell.peak_bytes == 4 * GB  # not polluted by the load phase's 6 GB
    assert cell.per_device_bytes == (2 * GB, 2 * GB)
    sampler.stop()
    sampler.stop()
    assert nvml.shutdown_calls == 1
    after_stop = sampler.mark()  # NVML is shut down: no new sample, no error
    # Only the sample taken at the last boundary (the phase's start level) is in it.
    assert after_stop.peak_bytes == after_stop.start_bytes == 4 * GB
    assert sampler.mark().source == "unavailable"  # and then nothing at all


def test_each_nvml_phase_records_the_level_it_started_from() -> None:
    # Finding 7: a cell's reading says what was in use when it began (after the cleanup), taken
    # at the phase boundary, so the cell's own share is peak - start even when the load's
    # memory stays resident.
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_used({0: [1 * GB, 30 * GB, 20 * GB], 1: [1 * GB, 30 * GB, 20 * GB]})
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible="0,1", interval_s=0.001)
    sampler.start()
    assert nvml.drained.wait(5)
    load = sampler.mark()
    assert (load.start_bytes, load.peak_bytes) == (2 * GB, 60 * GB)
    nvml.script_used({0: [25 * GB], 1: [25 * GB]})
    assert nvml.drained.wait(5)
    cell = sampler.mark()
    sampler.stop()
    assert cell.start_bytes == 40 * GB  # the load left 20 GB per GPU behind
    assert cell.peak_bytes == 50 * GB


def test_nvml_respects_cuda_visible_devices() -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    nvml.script_used({3: [9 * GB]})
    uuid = nvml.devices[3]["uuid"]
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible=f"{uuid},5")
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    assert reading.per_device_bytes == (9 * GB, 4194304)
    assert reading.process_bytes is None  # NVML lists none of our processes


def test_nvml_error_mid_run_keeps_the_peaks_taken_before() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    nvml.script_used({0: [1 * GB, 3 * GB, lost], 1: [1 * GB, 1 * GB]})
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible="0,1", interval_s=0.001)
    sampler.start()
    assert nvml.drained.wait(5)
    reading = sampler.mark()
    assert reading.source == "nvml"
    assert reading.peak_bytes == 4 * GB
    assert reading.per_device_bytes == (3 * GB, 1 * GB)
    assert reading.reason == "NVML failed mid-run: GPU is lost"
    later = sampler.mark()
    assert later.source == "unavailable"
    assert later.peak_bytes is None
    assert later.reason == "NVML failed mid-run: GPU is lost"
    sampler.stop()


def test_nvml_without_visible_gpu_is_unavailable() -> None:
    sampler = NvmlSampler(os.getpid(), nvml=NvmlReplay.load("4xA100-SXM4-80GB"), visible="")
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    assert reading.source == "unavailable"
    assert reading.reason == "NVML: no visible GPU (CUDA_VISIBLE_DEVICES='')"


# ---- this machine's NVML ------------------------------------------------------------------------


def test_cuda_sampler_without_nvml_reports_why() -> None:
    why = nvml_error_here()
    if why is None:
        pytest.skip("NVML works on this machine: the absent-NVML path cannot be observed")
    sampler = create_sampler("cuda", os.getpid())
    assert isinstance(sampler, NvmlSampler)
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    sampler.stop()
    assert reading.source == "unavailable"
    assert reading.peak_bytes is None
    assert reading.reason == f"NVML: {why}"


def test_create_sampler_picks_by_device() -> None:
    rss = create_sampler("cpu", 4242)
    assert isinstance(rss, RssSampler) and rss.root_pid == 4242
    devices = [VisibleDevice(1), VisibleDevice(0, "MIG-1")]
    for device in ("cuda", "cuda:0"):
        nvml = create_sampler(device, 4343, devices)
        assert isinstance(nvml, NvmlSampler) and nvml.root_pid == 4343
        assert nvml._devices == devices  # exactly the group's GPUs, not every visible one
    with pytest.raises(BloomperfError, match="unknown device 'tpu'"):
        create_sampler("tpu", os.getpid())


def test_controller_modules_do_not_import_torch() -> None:
    code = (
        "import sys, bloomperf.measure.memory\n"
        "import bloomperf.catalog.topology, bloomperf.catalog.fingerprint\n"
        "t = bloomperf.catalog.topology.detect_topology()\n"
        "bloomperf.catalog.fingerprint.environment_fingerprint(t)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_nvml_samples_exactly_the_groups_gpus() -> None:
    """--tp 4 on an 8-GPU machine: GPUs 0-3 busy with someone else's job are not our peak."""
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    nvml.script_used({0: [70 * GB], 1: [70 * GB], 4: [9 * GB], 7: [2 * GB]})
    group = [VisibleDevice(i) for i in (4, 5, 6, 7)]
    sampler = NvmlSampler(os.getpid(), nvml=nvml, devices=group, visible="0,1,2,3,4,5,6,7")
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    idle = 4194304
    assert reading.per_device_bytes == (9 * GB, idle, idle, 2 * GB)
    assert reading.peak_bytes == 11 * GB + 2 * idle


def test_nvml_samples_a_mig_instance_not_its_whole_gpu() -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    uuid = "MIG-2d5c8e1a-7f3b-5a9e-b4c2-0e1f2a3b4c5d"
    nvml.devices[3]["mig"] = [{"uuid": uuid, "memory_total": 10 * GB, "memory_used": 3 * GB}]
    nvml.script_used({3: [60 * GB]})  # the whole GPU: every instance's memory
    sampler = NvmlSampler(os.getpid(), nvml=nvml, devices=[VisibleDevice(3, uuid)])
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    assert reading.per_device_bytes == (3 * GB,)


def test_a_group_without_gpus_says_so() -> None:
    sampler = NvmlSampler(os.getpid(), nvml=NvmlReplay.load("4xA100-SXM4-80GB"), devices=[])
    sampler.start()
    reading = sampler.mark()
    sampler.stop()
    assert (reading.source, reading.reason) == ("unavailable", "NVML: the group has no GPU")


# ---- finding 11: NVML's process list inside a PID namespace ----------------------------------


def wait_for_queries(nvml: NvmlReplay, count: int) -> None:
    deadline = time.monotonic() + 10
    while nvml.process_queries < count and time.monotonic() < deadline:
        time.sleep(0.001)


def test_process_query_stops_when_nvml_only_lists_host_pids() -> None:
    """In a container NVML lists the worker under its host PID, never one we can see."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible="0,1", interval_s=0.001)
    sampler.start()
    wait_for_queries(nvml, 4)  # two samples of an idle GPU pair: nothing listed yet
    host_pid = 4_000_000 + os.getpid()  # above any pid_max this namespace can hand out
    nvml.set_processes(1, [(host_pid, 30 * GB)])  # the worker starts, seen under its host PID
    # Counted from here: on a loaded machine this thread may come back from the wait above
    # after more idle samples than two (seen: 20 queries in all, not 14).
    queries_before = nvml.process_queries
    time.sleep(0.3)
    reading = sampler.mark()
    sampler.stop()
    assert reading.process_bytes is None
    assert reading.source == "nvml" and reading.peak_bytes is not None  # device memory still
    assert reading.reason == (
        f"NVML per-process memory off: 5 samples listed new processes (PIDs {host_pid}) but "
        "none of the worker tree's; NVML reports host PIDs inside a PID namespace (container)"
    )
    queries = nvml.process_queries
    time.sleep(0.05)
    assert nvml.process_queries == queries  # never again
    assert queries - queries_before <= 2 * 5 + 2  # stopped after about five samples, not 300


def test_process_query_goes_on_past_someone_elses_process() -> None:
    """A process already on the GPU before our workers started is not a missed match, and a
    rank that starts after the sampler listed the tree is found by looking again."""
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.set_processes(0, [(4_000_001, 5 * GB)])  # someone else's, there from the start
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible="0,1", interval_s=0.001)
    sampler.start()
    wait_for_queries(nvml, 20)  # our tree is listed; the next listing is 0.5 s away
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        nvml.set_processes(1, [(child.pid, 2 * GB)])  # our new rank
        time.sleep(0.2)
        reading = sampler.mark()
        queries = nvml.process_queries
        time.sleep(0.05)
        still = nvml.process_queries > queries
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert reading.reason == ""
    assert reading.process_bytes == 2 * GB
    assert still


def test_a_controller_holding_a_cuda_context_is_refused_before_measuring() -> None:
    """NVML's device figures count every context on the GPU: a CUDA context in the controller
    (or in the pytest process of the GPU matrix) would be in every peak there."""
    from nvml_replay import NvmlReplay

    from bloomperf.catalog.topology import detect_topology
    from bloomperf.core.errors import BloomperfError
    from bloomperf.harness.session import refuse_own_cuda_context

    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    topology = detect_topology(nvml=nvml)
    refuse_own_cuda_context(topology, nvml)  # no process listed: fine
    nvml.set_processes(2, [(os.getpid() + 1, 2**30)])  # a worker's context: fine
    refuse_own_cuda_context(topology, nvml)
    nvml.set_processes(3, [(os.getpid(), 500 * 2**20)])
    with pytest.raises(BloomperfError, match=f"PID {os.getpid()}.* context on GPU 3"):
        refuse_own_cuda_context(topology, nvml)


# ---- the RSS sampler's choices, in process ----------------------------------------------------


def test_an_unknown_rss_method_is_refused_and_each_known_one_accepted() -> None:
    with pytest.raises(ValueError) as refused:
        RssSampler(os.getpid(), method="peak")
    assert str(refused.value) == "unknown RSS sampling method 'peak'"
    for method in ("auto", "hwm", "poll"):
        assert RssSampler(os.getpid(), method=method).method == method


def test_a_peak_that_cannot_be_reset_falls_back_to_polling_or_fails_if_hwm_was_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto`` polls from a daemon thread and says why; ``hwm`` refuses with the same why."""
    from bloomperf.measure import rss_sampler

    def denied(pid: int) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(rss_sampler, "reset_peak_rss", denied)
    me = os.getpid()
    why = f"/proc/{me}/clear_refs: Permission denied"
    with pytest.raises(OSError) as refused:
        RssSampler(me, method="hwm").start()
    assert str(refused.value) == f"cannot reset the peak RSS: {why}"
    sampler = RssSampler(me, interval_s=0.02)
    sampler.start()
    try:
        thread = sampler._thread
        assert thread is not None and thread.daemon and thread.name == "rss-sampler"
        assert sampler.method == "poll"
        assert sampler.reason == f"RSS polled every 20 ms (cannot reset the peak RSS: {why})"
        reading = sampler.mark()
        assert reading.source == "rss" and reading.reason == sampler.reason
        assert reading.peak_bytes == pytest.approx(psutil.Process(me).memory_info().rss, rel=0.5)
    finally:
        sampler.stop()
    assert sampler._thread is None and not thread.is_alive()


def test_resetting_skips_a_process_that_exited_and_resets_every_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bloomperf.measure import rss_sampler

    reset: list[int] = []

    def reset_or_gone(pid: int) -> None:
        if pid == 2:
            raise ProcessLookupError(pid)
        reset.append(pid)

    monkeypatch.setattr(rss_sampler, "process_tree_pids", lambda root: [root, 2, 3])
    monkeypatch.setattr(rss_sampler, "reset_peak_rss", reset_or_gone)
    sampler = RssSampler(1)
    sampler.start()
    assert sampler.method == "hwm" and reset == [1, 3] and sampler._thread is None


def test_a_process_without_memory_lines_is_looked_up_as_gone(tmp_path: Path) -> None:
    """A zombie's status has no VmHWM: ProcessLookupError naming the pid; kB are KiB."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(ProcessLookupError) as gone:
        read_peak_rss(zombie.pid)
    assert gone.value.args == (zombie.pid,)
    zombie.wait()
    status = Path(f"/proc/{os.getpid()}/status").read_text()
    kib = int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1])
    assert read_peak_rss(os.getpid()) >= kib * 1024  # the peak only grows in between


def test_the_nvml_sampler_polls_on_a_daemon_thread_and_says_why_it_has_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    sampler = NvmlSampler(os.getpid(), nvml=nvml, visible="0", interval_s=0.001)
    with pytest.raises(RuntimeError) as early:
        sampler.mark()
    assert str(early.value) == "NvmlSampler.mark() called before start()"
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.daemon and thread.name == "nvml-sampler"
    assert sampler.mark().source == "nvml"  # a mark samples, however short the phase
    sampler.stop()
    assert sampler._thread is None and not thread.is_alive()
    assert sampler.mark().source == "nvml"  # the level the last phase started from
    assert sampler.mark().reason == "NVML: no sample taken"  # then none at all
    from bloomperf.measure import nvml_sampler

    def missing() -> None:
        raise ImportError("pynvml")

    monkeypatch.setattr(nvml_sampler, "load_nvml", missing)
    without = NvmlSampler(os.getpid(), visible="0")
    without.start()
    assert without.mark().reason == "NVML: nvidia-ml-py is not installed"
    without.stop()


def kernel_peak_bytes(pid: int) -> int:
    """VmHWM as the kernel writes it (kB, which are KiB), read here without the product."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    """A process holding 50 MB and doing nothing else: its resident set and peak stay put."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nheld = b'x' * 50_000_000\nprint('held', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    yield child
    child.kill()
    child.wait()


def test_a_peak_is_the_kernels_to_the_byte_by_either_method(
    holder: subprocess.Popen[str],
) -> None:
    """Exact, not within MBs: read back against VmHWM (hwm) and against the resident set
    psutil reads (poll) of a process whose memory does not move."""
    assert read_peak_rss(holder.pid) == kernel_peak_bytes(holder.pid)
    sampler = RssSampler(holder.pid, method="hwm")
    sampler.start()
    expected = kernel_peak_bytes(holder.pid)  # reset to its resident set by start()
    assert sampler.mark().peak_bytes == expected
    sampler.stop()
    polled = RssSampler(holder.pid, method="poll", interval_s=3600.0)
    polled.start()
    reading = polled.mark()
    polled.stop()
    assert reading.peak_bytes == psutil.Process(holder.pid).memory_info().rss


@pytest.mark.parametrize("method", ["hwm", "poll"])
def test_a_tree_process_gone_before_a_live_one_is_skipped_and_a_refused_reset_keeps_the_peak(
    method: str, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree listed with a process that exited since (first) before one that lives: the live
    one's peak is still summed. A reset the kernel refuses (another user's process) is no
    failure: the peak read before it stands."""
    from bloomperf.measure import rss_sampler

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setattr(rss_sampler, "process_tree_pids", lambda root: [gone.pid, holder.pid])
    sampler = RssSampler(holder.pid, method=method, interval_s=3600.0)
    sampler.start()
    if method == "hwm":

        def refused(pid: int) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(rss_sampler, "reset_peak_rss", refused)
        expected = kernel_peak_bytes(holder.pid)
    else:
        expected = psutil.Process(holder.pid).memory_info().rss
    reading = sampler.mark()
    sampler.stop()
    assert reading.source == "rss" and reading.peak_bytes == expected
