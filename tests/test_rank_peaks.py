"""Ranks' own memory peaks: measured in the rank, gathered by rank 0, summed per node."""

from __future__ import annotations

import json
import os

import pytest

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import json_fields
from bloomperf.harness.rankenv import node_name
from bloomperf.measure.rank_peaks import (
    RANK_SOURCE,
    RankPeak,
    gather_peaks,
    own_peak,
    ranks_reading,
    reset_own_peak,
)
from bloomperf.measure.rss_sampler import read_peak_rss
from bloomperf.store.results.codec import memory_from_dict

MiB = 1024**2


def test_node_is_where_the_launcher_sent_the_rank() -> None:
    # pdsh's ssh session names the hostfile entry, even where two entries are one machine.
    assert node_name({"SSH_CONNECTION": "127.0.0.1 50000 127.0.0.2 22"}) == "127.0.0.2"
    assert node_name({"SLURMD_NODENAME": "gpu-17"}) == "gpu-17"
    assert node_name({}) == os.uname().nodename


def test_own_peak_on_cpu_is_this_process_vmhwm_and_reset_starts_a_phase() -> None:
    ballast = bytearray(64 * MiB)  # touched: it counts in RSS
    ballast[::4096] = b"x" * len(ballast[::4096])
    with_ballast = own_peak(3, "n", ()).peak_bytes
    assert with_ballast is not None and with_ballast >= 64 * MiB
    del ballast
    reset_own_peak()
    after_reset = own_peak(3, "n", ())
    assert after_reset.measure == "vmhwm" and after_reset.rank == 3
    assert after_reset.node == "n"
    assert after_reset.peak_bytes is not None and after_reset.peak_bytes < with_ballast - 32 * MiB
    assert after_reset.peak_bytes <= read_peak_rss(os.getpid())


def test_one_rank_gathers_itself() -> None:
    own = own_peak(0, "n", ())
    assert gather_peaks(own, 1) == [vars(own)]


def test_reading_sums_ranks_per_node_in_rank_order() -> None:
    reported = [
        {"rank": 1, "node": "b", "peak_bytes": 300, "measure": "vmhwm"},
        {"rank": 0, "node": "a", "peak_bytes": 100, "measure": "vmhwm"},
        {"rank": 2, "node": "b", "peak_bytes": 50, "measure": "vmhwm"},
    ]
    reading = ranks_reading(reported)
    assert (reading.source, reading.peak_bytes) == (RANK_SOURCE, 450)
    assert reading.per_device_bytes == (100, 300, 50)
    assert reading.per_node_bytes == (("a", 100), ("b", 350))


def test_a_rank_that_could_not_read_makes_the_phase_unavailable() -> None:
    reported = [
        {"rank": 0, "node": "a", "peak_bytes": 100, "measure": "vmhwm"},
        {"rank": 1, "node": "b", "peak_bytes": None, "measure": "vmhwm"},
    ]
    reading = ranks_reading(reported)
    assert reading.source == "unavailable" and reading.peak_bytes is None
    assert "1" in reading.reason


def test_per_node_figures_survive_the_results_file() -> None:
    reading = ranks_reading(
        [
            {"rank": 0, "node": "a", "peak_bytes": 100, "measure": "vmhwm"},
            {"rank": 1, "node": "b", "peak_bytes": 200, "measure": "vmhwm"},
        ]
    )
    stored = json.loads(json.dumps(json_fields(reading)))
    assert memory_from_dict({"generate_memory": stored}, "generate_memory", "r.json") == reading
    stored["per_node_bytes"] = [["a"]]
    with pytest.raises(BloomperfError, match="per_node_bytes"):
        memory_from_dict({"generate_memory": stored}, "generate_memory", "r.json")


# ---- a GPU rank's figure: NVML's per-process count where the rank can read it ----------------


def test_nvml_counts_a_ranks_own_memory_where_it_lists_the_rank() -> None:
    from nvml_replay import NvmlReplay

    from bloomperf.measure.rank_peaks import nvml_process_bytes

    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    uuids = [d["uuid"] for d in nvml.devices]
    nvml.set_processes(2, [(4242, 30 * 2**30), (777, 5 * 2**30)])
    nvml.set_processes(3, [(4242, 2 * 2**30)])
    assert nvml_process_bytes(nvml, 4242, [uuids[2], uuids[3]]) == 32 * 2**30
    assert nvml_process_bytes(nvml, 4242, [uuids[2]]) == 30 * 2**30
    # Not listed (another PID namespace), a count NVML withholds, a GPU it does not know: None.
    assert nvml_process_bytes(nvml, 999, [uuids[2]]) is None
    nvml.set_processes(4, [(4242, None)])
    assert nvml_process_bytes(nvml, 4242, [uuids[4]]) is None
    assert nvml_process_bytes(nvml, 4242, ["GPU-not-here"]) is None
    assert nvml.init_calls == nvml.shutdown_calls


@pytest.mark.parametrize(
    ("peak", "now", "nvml_now", "expected"),
    [
        (40, 30, 38, 48),  # 8 outside torch (context, NCCL, DeepSpeed): added to the peak
        (40, 30, 30, 40),  # nothing outside torch
        (40, 30, 20, 40),  # NVML below torch's reserved: never subtracted
    ],
)
def test_outside_torch_is_added_to_torchs_peak(
    peak: int, now: int, nvml_now: int, expected: int
) -> None:
    from bloomperf.measure.rank_peaks import with_outside_torch

    assert with_outside_torch(peak, now, nvml_now) == expected


def test_a_readings_reason_names_every_rank_missing_or_every_measure_used() -> None:
    def rank(number: int, peak: int | None, measure: str = "vmhwm") -> dict[str, object]:
        return {"rank": number, "node": "a", "peak_bytes": peak, "measure": measure}

    missing = ranks_reading([rank(3, None), rank(0, 5), rank(1, None)])
    assert missing.reason == "ranks 1, 3 could not read their peak"
    assert ranks_reading([]).reason == "no ranks" and ranks_reading([]).peak_bytes is None
    mixed = ranks_reading([rank(1, 0, "nvml-process"), rank(0, 7), rank(2, 0, "vmhwm")])
    assert (mixed.peak_bytes, mixed.per_device_bytes, mixed.per_node_bytes) == (
        7,
        (7, 0, 0),
        (("a", 7),),
    )
    assert mixed.reason == (
        "each rank's own peak (nvml-process, vmhwm): no sampler on this node sees ranks that a"
        " multinode runner started"
    )


def test_ranks_gather_one_figure_each_in_rank_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collective's glue: a list of world-size slots, each rank's record as a plain dict."""
    import torch.distributed as dist

    def all_gather_object(slots: list[object], own: dict[str, object]) -> None:
        for index in range(len(slots)):
            slots[index] = {**own, "rank": index}

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    own = own_peak(1, "n", ())
    gathered = gather_peaks(own, 3)
    assert [g["rank"] for g in gathered] == [0, 1, 2]
    assert gathered[1] == vars(own) and all(type(g) is dict for g in gathered)


class FakeCuda:
    """torch.cuda's answers for two GPUs of this rank: peaks, reserved now, UUIDs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, nvml: object) -> None:
        import torch

        from bloomperf.catalog import topology

        peaks, now = {0: 40 * MiB, 1: 10 * MiB}, {0: 30 * MiB, 1: 10 * MiB}
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i: peaks[i])
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: now[i])
        uuids = {i: type("P", (), {"uuid": f"u{i}"})() for i in (0, 1)}
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: uuids[i])
        monkeypatch.setattr(topology, "load_nvml", lambda: nvml)


def test_a_gpu_ranks_peak_adds_what_nvml_counts_beyond_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On GPU, each figure composed as the module says, with torch's answers and NVML's
    replayed: 50 MiB of torch peaks plus 8 MiB NVML counts beyond torch's 40 MiB now."""
    from nvml_replay import NvmlReplay

    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    nvml.devices[0]["uuid"], nvml.devices[1]["uuid"] = "GPU-u0", "GPU-u1"
    nvml.set_processes(0, [(os.getpid(), 36 * MiB)])
    nvml.set_processes(1, [(os.getpid(), 12 * MiB)])
    FakeCuda(monkeypatch, nvml)
    assert own_peak(2, "n2", [0, 1]) == RankPeak(2, "n2", 58 * MiB, "nvml-process")
    nvml.set_processes(1, [(4_000_000, 12 * MiB)])  # not listed: another PID namespace
    assert own_peak(2, "n2", [0, 1]) == RankPeak(2, "n2", 50 * MiB, "torch-reserved")


def test_a_gpu_rank_without_nvidia_ml_py_reports_torchs_peak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> object:
        raise ImportError("pynvml")

    FakeCuda(monkeypatch, None)
    from bloomperf.catalog import topology

    monkeypatch.setattr(topology, "load_nvml", missing)
    assert own_peak(0, "n", [0, 1]) == RankPeak(0, "n", 50 * MiB, "torch-reserved")
    assert own_peak(0, "n", []).measure == "vmhwm"  # no GPU of its own: its VmHWM


def test_a_rank_whose_vmhwm_cannot_be_read_has_no_peak_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel without /proc status (or a sandbox hiding it): the rank says it has no peak
    (None), and the reading of the group says so, rather than failing the cell."""
    from bloomperf.measure import rank_peaks

    def unreadable(pid: int) -> int:
        raise FileNotFoundError(2, "No such file or directory", f"/proc/{pid}/status")

    monkeypatch.setattr(rank_peaks, "read_peak_rss", unreadable)
    peak = own_peak(1, "node-b", ())
    assert (peak.rank, peak.node, peak.peak_bytes, peak.measure) == (1, "node-b", None, "vmhwm")
