"""The contention probe's readings in process, on a /proc of the test's own: each thread's
run-queue wait, the machine's busy ticks, our processes' CPU ticks, the trees listed again only
now and then, and a cycle's load from two snapshots, each field by its definition."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core import progress
from bloomperf.measure import contention
from bloomperf.measure.contention import (
    TREE_REFRESH_S,
    LoadProbe,
    Snapshot,
    busy_ticks,
    cpu_ticks,
    ticks_per_second,
    wait_ns,
)
from bloomperf.store.contention import CycleLoad


class FakeProc:
    """A /proc folder: the machine's stat line, each process's stat and its threads' schedstat."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(exist_ok=True)

    def machine(self, *counters: int) -> None:
        (self.root / "stat").write_text("cpu  " + " ".join(map(str, counters)) + "\ncpu0 1 1\n")

    def process(self, pid: int, utime: int, stime: int, waits: dict[int, int]) -> None:
        folder = self.root / str(pid)
        (folder / "task").mkdir(parents=True, exist_ok=True)
        # A command name with spaces and parentheses: the fields start after the last ')'.
        fields = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 5
        (folder / "stat").write_text(f"{pid} (a (b) c) " + " ".join(fields) + "\n")
        for tid, wait in waits.items():
            (folder / "task" / str(tid)).mkdir(exist_ok=True)
            (folder / "task" / str(tid) / "schedstat").write_text(f"999 {wait} 3\n")


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProc:
    monkeypatch.setattr(contention, "PROC", str(tmp_path / "proc"))
    return FakeProc(tmp_path / "proc")


def test_the_wait_is_every_readable_threads_second_schedstat_field(proc: FakeProc) -> None:
    proc.process(10, 0, 0, {10: 5, 11: 7})
    proc.process(20, 0, 0, {20: 100})
    (proc.root / "20" / "task" / "21").mkdir()  # a thread that ended: no schedstat
    proc.process(30, 0, 0, {30: 1})
    (proc.root / "30" / "task" / "30" / "schedstat").write_text("999\n")  # malformed
    assert wait_ns([10, 20]) == 112
    assert wait_ns([10, 99]) == 12  # a process gone counts nothing
    assert wait_ns([30]) is None and wait_ns([99]) is None and wait_ns([]) is None
    proc.process(40, 0, 0, {40: 0})
    assert wait_ns([40]) == 0  # read, and none waited


@given(st.lists(st.integers(0, 10**9), min_size=5, max_size=10))
def test_busy_ticks_are_all_but_idle_and_iowait_of_the_first_eight(counters: list[int]) -> None:
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        patch.setattr(contention, "PROC", folder)
        FakeProc(Path(folder)).machine(*counters)
        first = counters[:8]
        expected = None if len(counters) < 5 else sum(first) - first[3] - first[4]
        assert busy_ticks() == expected


def test_busy_ticks_are_none_without_a_cpu_line(proc: FakeProc) -> None:
    assert busy_ticks() is None  # no stat at all
    (proc.root / "stat").write_text("intr 1 2 3 4 5 6\n")
    assert busy_ticks() is None
    (proc.root / "stat").write_text("cpu  1 2 3 4\n")  # no iowait: not a kernel we run on
    assert busy_ticks() is None
    (proc.root / "stat").write_text("")
    assert busy_ticks() is None


def test_cpu_ticks_are_utime_and_stime_of_the_processes_still_there(proc: FakeProc) -> None:
    proc.process(10, 30, 12, {})
    proc.process(11, 5, 0, {})
    (proc.root / "12").mkdir()
    (proc.root / "12" / "stat").write_text("12 (x) S 1 2\n")  # too short
    assert cpu_ticks([10, 11]) == 47
    assert cpu_ticks([10, 99, 12]) == 42
    assert cpu_ticks([99]) is None and cpu_ticks([12]) is None
    proc.process(13, 0, 0, {})
    assert cpu_ticks([13]) == 0


def test_ticks_per_second_is_the_systems_else_100(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ticks_per_second() == os.sysconf("SC_CLK_TCK")

    def broken(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(contention.os, "sysconf", broken)
    assert ticks_per_second() == 100


SNAPSHOTS = st.builds(
    Snapshot,
    at=st.floats(0, 1000),
    wait_ns=st.none() | st.integers(0, 10**12),
    busy_ticks=st.none() | st.integers(0, 10**6),
    own_ticks=st.none() | st.integers(0, 10**6),
    gpu_others=st.none() | st.integers(0, 4),
)


@given(SNAPSHOTS, SNAPSHOTS, st.integers(-1, 8), st.none() | st.integers(1, 16))
def test_a_cycles_load_is_each_reading_between_its_snapshots(
    before: Snapshot, after: Snapshot, width: int, cpus: int | None
) -> None:
    probe = LoadProbe(tuple, width=width, cpus=cpus)
    wait = None
    if before.wait_ns is not None and after.wait_ns is not None:
        wait = max(after.wait_ns - before.wait_ns, 0) / 1e9
    other = None
    if None not in (before.busy_ticks, after.busy_ticks, before.own_ticks, after.own_ticks):
        busy = after.busy_ticks - before.busy_ticks  # type: ignore[operator]
        own = after.own_ticks - before.own_ticks  # type: ignore[operator]
        other = max(busy - own, 0) / ticks_per_second()
    seen = [n for n in (before.gpu_others, after.gpu_others) if n is not None]
    expected = CycleLoad(
        wall_s=max(after.at - before.at, 0.0),
        wait_s=wait,
        other_cpu_s=other,
        width=max(width, 1),
        gpu_others=max(seen) if seen else None,
        cpus=cpus,
    )
    assert probe.between(before, after) == expected


class Trees:
    """``process_tree_pids`` of the test: each root's tree, and how often one was listed."""

    def __init__(self, trees: dict[int, list[int]]) -> None:
        self.trees = trees
        self.listed = 0

    def __call__(self, root: int) -> list[int]:
        self.listed += 1
        return self.trees.get(root, [])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_snapshot_reads_the_measured_tree_and_every_process_of_ours(
    proc: FakeProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured: the measured roots' trees and ``extra``; ours besides: the other trees and
    this controller. The wait is the measured threads' only; the own ticks cover all of ours."""
    me = os.getpid()
    proc.machine(50, 0, 50, 900, 0, 0, 0, 0)
    proc.process(10, 100, 0, {10: 1000, 15: 24})
    proc.process(11, 10, 0, {11: 2000})
    proc.process(20, 7, 0, {20: 400_000})  # the other arm: ours, not measured
    proc.process(30, 3, 0, {30: 50})  # started by the caller, measured as extra
    proc.process(me, 1, 1, {me: 8})
    trees = Trees({1: [10, 11], 2: [20]})
    monkeypatch.setattr(contention, "process_tree_pids", trees)
    clock = Clock()
    monkeypatch.setattr(contention.time, "monotonic", clock)
    probe = LoadProbe(lambda: [1], also_ours=lambda: [2], width=2)
    shot = probe.snapshot(extra=[30])
    assert shot == Snapshot(100.0, 3074, 100, 122, None)
    assert trees.listed == 2
    clock.now += TREE_REFRESH_S - 0.01
    probe.snapshot()
    assert trees.listed == 2  # listed within the last TREE_REFRESH_S: not again
    clock.now += 0.01
    probe.snapshot()
    assert trees.listed == 4
    trees.trees[3] = [11]
    probe.measured = lambda: [1, 3]  # another root: listed at once
    assert probe.snapshot().wait_ns == 3024 and trees.listed == 7


class FakeNvml:
    def __init__(self, pids: dict[int, list[int]], fail: str = "") -> None:
        self.pids, self.fail, self.asked = pids, fail, 0

    def nvmlInit(self) -> None:
        if self.fail == "init":
            raise RuntimeError("Driver Not Loaded")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        self.asked += 1
        if self.fail == "list":
            raise RuntimeError("GPU is lost")
        return [type("Process", (), {"pid": pid})() for pid in self.pids[handle]]


def test_gpu_neighbours_are_counted_and_an_nvml_that_fails_is_asked_no_more(
    proc: FakeProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contention, "process_tree_pids", lambda root: [root])
    me = os.getpid()
    nvml = FakeNvml({0: [10, 77], 1: [me, 78, 79]})
    probe = LoadProbe(lambda: [10], gpus=[0, 1], nvml=nvml)
    assert probe.snapshot().gpu_others == 3 and probe.gpu_note == ""
    assert LoadProbe(lambda: [10]).snapshot().gpu_others is None  # on CPU
    assert LoadProbe(lambda: [10]).gpu_note == "cpu: no GPU to share"
    lines: list[str] = []
    progress.set_sink(lines.append)
    try:
        LoadProbe(lambda: [10]).snapshot()
        assert probe.snapshot().gpu_others == 3 and not lines  # nothing to say
        lost = FakeNvml({0: [10]}, fail="list")
        probe = LoadProbe(lambda: [10], gpus=[0], nvml=lost)
        assert probe.snapshot().gpu_others is None and probe.gpu_note == "nvml: GPU is lost"
        probe.snapshot()
        assert lost.asked == 1  # not asked again
        dead = LoadProbe(lambda: [10], gpus=[0, 3], nvml=FakeNvml({}, fail="init"))
        assert dead.snapshot().gpu_others is None and dead.gpu_note == "nvml: Driver Not Loaded"
        dead.snapshot()
    finally:
        progress.set_sink(None)
    # Said once per probe, naming its GPUs and why.
    assert [line.split("bloomperf: ", 1)[1] for line in lines] == [
        "GPU 0: other processes on it are not counted as contention (nvml: GPU is lost)",
        "GPU 0, 3: other processes on it are not counted as contention (nvml: Driver Not Loaded)",
    ]


def test_without_nvidia_ml_py_the_note_says_so(
    proc: FakeProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bloomperf.catalog import topology

    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(topology, "load_nvml", missing)
    monkeypatch.setattr(contention, "process_tree_pids", lambda root: [root])
    probe = LoadProbe(lambda: [10], gpus=[0])
    assert probe.snapshot().gpu_others is None
    assert probe.gpu_note == "nvml: nvidia-ml-py is not installed"


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_a_gone_or_unreadable_process_anywhere_in_the_list_is_skipped_not_the_end(
    proc: FakeProc, order: tuple[int, ...]
) -> None:
    """Both sums are over every readable process, whatever comes before it: a process gone
    (99) or with a short stat line (12) first must not end the sum."""
    proc.process(10, 30, 12, {10: 5, 11: 7})
    proc.process(11, 5, 0, {})
    (proc.root / "12").mkdir()
    (proc.root / "12" / "stat").write_text("12 (x) S 1 2\n")  # too short
    proc.process(20, 0, 0, {20: 100})
    pids = [[10, 11, 12, 99][i] for i in order]
    assert cpu_ticks(pids) == 47
    waits = [[10, 20, 99, 12][i] for i in order]
    assert wait_ns(waits) == 112


def test_a_probe_is_one_cpu_wide_unless_told_otherwise() -> None:
    assert LoadProbe(lambda: [10]).width == 1
    assert LoadProbe(lambda: [10], width=0).width == 1
    assert LoadProbe(lambda: [10], width=8).width == 8
