"""Topology detection on hand-written NVML answers and on this machine; the `topology` command."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.catalog import topology
from bloomperf.catalog.fingerprint import environment_fingerprint, torch_cuda_version
from bloomperf.catalog.topology import (
    detect_topology,
    gpu_id_name,
    planned_topology,
    short_gpu_name,
    topology_from_dict,
    topology_to_dict,
)
from bloomperf.core.errors import BloomperfError
from tests.nvml_replay import NvmlReplay, nvml_error_here

A100_80GB = 85899345920
MiB = 1024**2
GiB = 1024**3


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


# ---- recorded machines -------------------------------------------------------------------------


@pytest.mark.parametrize("count", [8, 4])
def test_recorded_a100_machines(count: int) -> None:
    nvml = NvmlReplay.load(f"{count}xA100-SXM4-80GB")
    t = detect_topology(nvml)
    assert t.id == f"{count}xA100-SXM4-80GB"
    assert t.aliases == (f"{count}xA100-80GB",)
    assert t.device == "cuda"
    assert t.nodes == 1
    assert [g.index for g in t.gpus] == list(range(count))
    assert {g.name for g in t.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert {g.memory_bytes for g in t.gpus} == {A100_80GB}
    assert {g.nvlinks_up for g in t.gpus} == {12}
    assert t.gpus[0].uuid == nvml.devices[0]["uuid"]
    assert (t.driver, t.cuda, t.nvml_reason) == ("535.104.05", "12.2", "")
    assert t.matches(f"{count}xa100-80gb") and t.matches(f"{count}xA100-SXM4-80GB")
    assert not t.matches("8xA100-SXM4-40GB" if count == 8 else "8xA100-80GB")
    assert nvml.init_calls == nvml.shutdown_calls == 1


def test_the_recorded_h100_gives_what_that_machine_detected_itself() -> None:
    """Recorded by benchmarks/record_nvml.py on the device machine (gpu_check, 2026-12-05),
    where ``bloomperf topology`` and the results files said 1xH100-80GB-HBM3, driver 580.159.04,
    CUDA 13.0, and the fingerprint's limits below."""
    nvml = NvmlReplay.load("1xH100-80GB-HBM3")
    t = detect_topology(nvml)
    assert t.id == "1xH100-80GB-HBM3"
    assert (t.device, t.nodes, len(t.gpus)) == ("cuda", 1, 1)
    assert t.gpus[0].memory_bytes == 85520809984
    assert t.gpus[0].nvlinks_up == 0  # NVML answered NotSupported: one GPU, no NVLink
    assert (t.driver, t.cuda, t.nvml_reason) == ("580.159.04", "13.0", "")
    fingerprint = environment_fingerprint(t, nvml)
    assert fingerprint["gpu_limits"] == [
        {"index": 0, "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 2619, "power_limit_w": 700.0}
    ]


def test_cuda_visible_devices_restricts_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert detect_topology(nvml).id == "2xA100-SXM4-80GB"

    uuid = nvml.devices[6]["uuid"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid[:12]},3")  # a UUID prefix, like CUDA
    assert [g.index for g in detect_topology(nvml).gpus] == [6, 3]

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,-1,2")  # CUDA stops at the first bad entry
    assert [g.index for g in detect_topology(nvml).gpus] == [5]

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hidden = detect_topology(nvml)
    assert (hidden.id, hidden.device) == ("cpu", "cpu")
    assert hidden.nvml_reason == "no visible GPU (CUDA_VISIBLE_DEVICES='')"


def test_nodes_from_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    t = detect_topology(nvml)
    assert (t.id, t.aliases, t.nodes) == ("2x8xA100-SXM4-80GB", ("2x8xA100-80GB",), 2)
    assert detect_topology(nvml, nodes=3).id == "3x8xA100-SXM4-80GB"

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "6")
    with pytest.raises(BloomperfError) as refused:
        detect_topology(nvml)
    assert str(refused.value) == (
        "WORLD_SIZE=16 is not a multiple of LOCAL_WORLD_SIZE=6: pass the node count explicitly"
    )
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(BloomperfError, match="WORLD_SIZE='two': must be a positive integer"):
        detect_topology(nvml)
    with pytest.raises(BloomperfError, match="--nodes: must be at least 1"):
        detect_topology(nvml, nodes=0)


def test_mixed_gpus_and_missing_nvlinks() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    pcie = nvml.devices[3]
    pcie.update(name="NVIDIA A100-PCIE-40GB", memory_total=40960 * MiB, nvlink_state=[])
    nvml.devices[2]["nvlink_state"] = [1] * 10 + [0, 0]  # two links down
    t = detect_topology(nvml)
    assert t.id == "3xA100-SXM4-80GB+1xA100-PCIE-40GB"
    assert t.aliases == ("3xA100-80GB+1xA100-40GB",)
    assert [g.nvlinks_up for g in t.gpus] == [12, 12, 10, 0]


@pytest.mark.parametrize(
    ("nvml_name", "memory_mib", "name", "short"),
    [
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40960, "A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA H200", 143771, "H200-141GB", "H200-141GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100-PCIe-80GB", "H100-80GB"),
        ("Tesla V100-SXM2-32GB", 32510, "V100-SXM2-32GB", "V100-32GB"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX-4090-24GB", "RTX-4090-24GB"),
    ],
)
def test_gpu_names(nvml_name: str, memory_mib: int, name: str, short: str) -> None:
    assert gpu_id_name(nvml_name, memory_mib * MiB) == name
    assert short_gpu_name(name) == short


# ---- this machine --------------------------------------------------------------------------------


def test_no_gpu_here_gives_a_cpu_topology_with_nvml_reason() -> None:
    why = nvml_error_here()
    if why is None:
        pytest.skip("NVML works on this machine: the CPU topology cannot be observed")
    t = detect_topology()
    assert (t.id, t.device, t.gpus, t.aliases) == ("cpu", "cpu", (), ())
    assert t.nvml_reason == str(why)
    assert t.cpu_cores == os.cpu_count()
    assert t.ram_bytes > 1024**3
    assert t.cpu_model
    assert t.matches("CPU") and not t.matches("8xA100-80GB")


def test_fingerprint_has_the_versions_installed_here() -> None:
    fingerprint = environment_fingerprint(detect_topology())
    packages = fingerprint["packages"]
    for name in ("torch", "transformers", "deepspeed", "accelerate", "bitsandbytes"):
        assert packages[name] == importlib.metadata.version(name)
    assert packages["torch"].startswith("2.")
    assert fingerprint["python"] == ".".join(str(v) for v in sys.version_info[:3])
    assert fingerprint["hostname"]
    json.dumps(fingerprint)  # stored in results as it is


def test_fingerprint_of_a_recorded_machine_has_clocks_and_power() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    fingerprint = environment_fingerprint(detect_topology(nvml), nvml)
    assert fingerprint["gpus"] == ["NVIDIA A100-SXM4-80GB"] * 4
    assert (fingerprint["driver"], fingerprint["cuda_driver"]) == ("535.104.05", "12.2")
    assert fingerprint["gpu_limits"][3] == {
        "index": 3,
        "sm_clock_max_mhz": 1410,
        "mem_clock_max_mhz": 1593,
        "power_limit_w": 400.0,
    }


def test_torch_cuda_version_is_read_without_importing_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (package / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.4.0+cu121'\ncuda: Optional[str] = '12.1'\n"
    )
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert torch_cuda_version() == "12.1"


# ---- JSON and the command ---------------------------------------------------------------------


def test_topology_round_trips_through_json() -> None:
    for t in (detect_topology(NvmlReplay.load("8xA100-SXM4-80GB")), detect_topology()):
        data = json.loads(json.dumps(topology_to_dict(t)))
        assert topology_from_dict(data) == t


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"device": "tpu"}, "field 'device' must be cuda or cpu"),
        ({"gpus": "eight"}, "field 'gpus' must be a list"),
        ({"gpus": [{"index": 0}]}, "gpu 0: field 'name' must be a string"),
        ({"nodes": 0}, "field 'nodes' is out of range"),
        ({"aliases": [1]}, "field 'aliases' must be a list of strings"),
    ],
)
def test_bad_topology_json_is_one_line_error(change: dict[str, object], message: str) -> None:
    data = topology_to_dict(detect_topology(NvmlReplay.load("4xA100-SXM4-80GB"))) | change
    with pytest.raises(BloomperfError, match=message):
        topology_from_dict(data, "results.json topology")


@pytest.mark.parametrize("flags", [["--json"], ["--format", "json"]])
def test_topology_command_prints_json(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topology", *flags]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out)
    assert out == json.dumps(printed, indent=2) + "\n"  # indented as every document is
    assert (printed["kind"], printed["schema_version"]) == ("bloomperf-topology", 1)
    assert topology_from_dict(printed["topology"]) == detect_topology()
    assert printed["environment"]["packages"]["torch"] == importlib.metadata.version("torch")


def test_topology_command_prints_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topology", "--nodes", "1"]) == 0
    text = capsys.readouterr().out
    t = detect_topology()
    assert text.startswith(f"topology  {t.id}\n")
    assert f"torch {importlib.metadata.version('torch')}" in text
    if t.device == "cpu":
        assert f"nvml      {t.nvml_reason}\n" in text


def test_bad_nodes_option_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["topology", "--nodes", "0"]) == 2
    assert capsys.readouterr().err == "bloomperf: error: --nodes: must be at least 1, not 0\n"


def test_describe_a_recorded_machine() -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    t = detect_topology(nvml)
    text = topology.describe(t, environment_fingerprint(t, nvml))
    assert "topology  8xA100-SXM4-80GB (also 8xA100-80GB)\n" in text
    assert (
        "gpu 7     NVIDIA A100-SXM4-80GB, 80.0 GiB, 12 NVLinks up, SM 1410 MHz, memory 1593 MHz, "
        "400 W" in text
    )
    assert "driver    535.104.05 (CUDA 12.2)" in text


# ---- CUDA_DEVICE_ORDER and MIG -------------------------------------------------------------------


def mixed_machine() -> NvmlReplay:
    """Hand-written: an 8×A100 whose GPU 0 is replaced by a slower A10 (a mixed machine)."""
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    nvml.devices[0]["name"] = "NVIDIA A10"
    return nvml


def test_integer_ids_under_fastest_first_are_refused_on_mixed_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    with pytest.raises(BloomperfError, match="FASTEST_FIRST order, which is not NVML's PCI bus"):
        detect_topology(mixed_machine())
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # then the ids are NVML's indices
    assert [g.index for g in detect_topology(mixed_machine()).gpus] == [1, 2]
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    nvml = mixed_machine()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", nvml.devices[2]["uuid"])  # UUIDs need no order
    assert [g.index for g in detect_topology(nvml).gpus] == [2]
    # Identical GPUs: FASTEST_FIRST ranks them equal and keeps PCI bus order.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,1")
    assert [g.index for g in detect_topology(NvmlReplay.load("8xA100-SXM4-80GB")).gpus] == [6, 1]


def test_a_mig_uuid_maps_to_its_parent_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    wanted = "MIG-2d5c8e1a-7f3b-5a9e-b4c2-0e1f2a3b4c5d"
    nvml.devices[5]["mig"] = [
        {
            "uuid": "MIG-0a0a0a0a-0000-4000-8000-000000000000",
            "memory_total": 10 * GiB,
            "memory_used": 0,
        },
        {"uuid": wanted, "memory_total": 20 * GiB, "memory_used": 0},
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", wanted[:16])  # a prefix, as CUDA accepts
    (gpu,) = detect_topology(nvml).gpus
    assert (gpu.index, gpu.uuid, gpu.mig_uuid) == (5, nvml.devices[5]["uuid"], wanted)
    assert gpu.memory_bytes == 20 * GiB  # the instance's share, not the whole GPU's
    assert topology_from_dict(topology_to_dict(detect_topology(nvml))).gpus == (gpu,)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-ffff")  # names no instance: nothing visible
    assert detect_topology(nvml).device == "cpu"


def test_planned_topology_applies_cuda_visible_devices() -> None:
    plan = planned_topology("8xA100-80GB", "4,5,6,7")
    assert (plan.id, [g.index for g in plan.gpus]) == ("4xA100-80GB", [4, 5, 6, 7])
    assert planned_topology("8xA100-80GB", "3,9,1").id == "1xA100-80GB"  # stops at 9, as CUDA
    assert planned_topology("8xA100-80GB", "").device == "cpu"
    with pytest.raises(BloomperfError, match="cannot resolve the UUID 'GPU-1234'"):
        planned_topology("8xA100-80GB", "GPU-1234")
