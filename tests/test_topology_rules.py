"""A topology as results and baselines store it, read back field by field, refused with the place
it was read from, and as ``bloomperf topology`` prints it, line by line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.topology import (
    Gpu,
    HostRam,
    Topology,
    describe,
    nodes_from_env,
    planned_topology,
    topology_from_dict,
    topology_to_dict,
)
from bloomperf.core.errors import BloomperfError

GiB = 2**30
WORDS = st.text("abcXYZ019-. ", max_size=12)

GPUS = st.builds(
    Gpu,
    index=st.integers(0, 15),
    name=WORDS,
    memory_bytes=st.integers(0, 200 * GiB),
    nvlinks_up=st.integers(0, 18),
    uuid=WORDS,
    mig_uuid=WORDS,
)
TOPOLOGIES = st.builds(
    Topology,
    id=WORDS,
    aliases=st.lists(WORDS, max_size=3).map(tuple),
    device=st.sampled_from(["cuda", "cpu"]),
    gpus=st.lists(GPUS, max_size=3).map(tuple),
    nodes=st.integers(1, 64),
    driver=WORDS,
    cuda=WORDS,
    cpu_model=WORDS,
    cpu_cores=st.integers(0, 512),
    ram_bytes=st.integers(0, 4096 * GiB),
    nvml_reason=WORDS,
)


@given(TOPOLOGIES)
def test_every_field_comes_back_from_its_dict(topology: Topology) -> None:
    stored = topology_to_dict(topology)
    assert topology_from_dict(stored) == topology
    assert stored["gpus"] == [
        {
            "index": g.index,
            "name": g.name,
            "memory_bytes": g.memory_bytes,
            "nvlinks_up": g.nvlinks_up,
            "uuid": g.uuid,
            "mig_uuid": g.mig_uuid,
        }
        for g in topology.gpus
    ]


SIZES = {"memory_bytes": 80 * GiB, "nvlinks_up": 12}


def minimal() -> dict[str, Any]:
    return {"id": "cpu", "device": "cpu", "nodes": 1}


def test_the_optional_fields_read_as_empty_and_zero() -> None:
    read = topology_from_dict({**minimal(), "gpus": [{"index": 3, "name": "G", **SIZES}]})
    assert read == Topology(
        id="cpu",
        aliases=(),
        device="cpu",
        gpus=(Gpu(3, "G", 80 * GiB, 12, "", ""),),
        nodes=1,
        driver="",
        cuda="",
        cpu_model="",
        cpu_cores=0,
        ram_bytes=0,
        nvml_reason="",
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "here: topology must be an object"),
        ({**minimal(), "device": "tpu"}, "here: field 'device' must be cuda or cpu, not 'tpu'"),
        ({**minimal(), "aliases": ["a", 1]}, "here: field 'aliases' must be a list of strings"),
        ({**minimal(), "gpus": [{"index": 0, "name": "G", **SIZES}, 7]}, "here gpu 1: a GPU must"),
        ({**minimal(), "gpus": [{"name": "G", **SIZES}]}, "here gpu 0"),
        ({**minimal(), "gpus": [{"index": 0, **SIZES}]}, "here gpu 0"),
        ({**minimal(), "gpus": [{"index": 0, "name": "G", "nvlinks_up": 1}]}, "here gpu 0"),
        ({**minimal(), "gpus": [{"index": 0, "name": "G", "memory_bytes": 1}]}, "here gpu 0"),
        ({**minimal(), "nodes": 0}, "here"),
        ({"device": "cpu", "nodes": 1}, "here"),
        ({"id": "x", "nodes": 1}, "here"),
        ({**minimal(), "cpu_cores": "many"}, "here"),
        ({**minimal(), "ram_bytes": "lots"}, "here"),
        ({**minimal(), "driver": 5}, "here"),
        ({**minimal(), "gpus": [{"index": 0, "name": "G", **SIZES, "uuid": 1}]}, "here gpu 0"),
        ({**minimal(), "gpus": [{"index": 0, "name": "G", **SIZES, "mig_uuid": 1}]}, "here gpu 0"),
    ],
)
def test_a_bad_field_is_refused_naming_where_it_was_read(data: Any, said: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        topology_from_dict(data, "here")
    assert str(refused.value).startswith(said), str(refused.value)


def test_the_place_read_from_is_topology_unless_told() -> None:
    with pytest.raises(BloomperfError, match=r"^topology: topology must be an object$"):
        topology_from_dict(None)
    with pytest.raises(BloomperfError, match=r"^topology gpu 0: a GPU must be an object$"):
        topology_from_dict({**minimal(), "gpus": [None]})


TWO_GPUS = Topology(
    id="2xA100-80GB",
    aliases=("2xA100-SXM4-80GB", "a100"),
    device="cuda",
    gpus=(
        Gpu(0, "NVIDIA A100-SXM4-80GB", 80 * GiB, 12, "GPU-0"),
        Gpu(1, "NVIDIA A100-SXM4-80GB", 80 * GiB + GiB // 2, 0, "GPU-1"),
    ),
    nodes=2,
    driver="550.54",
    cuda="12.4",
    cpu_model="AMD EPYC",
    cpu_cores=64,
    ram_bytes=1024 * GiB,
    nvml_reason="",
)
ENVIRONMENT = {
    "gpu_limits": [
        {"index": 0, "sm_clock_max_mhz": 1410, "mem_clock_max_mhz": 1593, "power_limit_w": 400.0},
        {"index": 1, "power_limit_w": 250.5},
    ],
    "packages": {"torch": "2.4.0", "deepspeed": "", "transformers": "4.43.4"},
    "python": "3.11.7",
    "cuda_torch": "12.1",
    "nccl": "2.20.5",
    "hostname": "node-a",
}


def test_a_gpu_topology_is_printed_line_by_line() -> None:
    assert describe(TWO_GPUS, ENVIRONMENT).splitlines() == [
        "topology  2xA100-80GB (also 2xA100-SXM4-80GB, a100)",
        "device    cuda, 2 nodes",
        "gpu 0     NVIDIA A100-SXM4-80GB, 80.0 GiB, 12 NVLinks up, SM 1410 MHz, memory 1593 MHz, "
        "400 W, GPU-0",
        "gpu 1     NVIDIA A100-SXM4-80GB, 80.5 GiB, 0 NVLinks up, 250.5 W, GPU-1",
        "driver    550.54 (CUDA 12.4)",
        "cpu       AMD EPYC, 64 cores, 1024.0 GiB RAM",
        "software  python 3.11.7, torch 2.4.0, transformers 4.43.4",
        "cuda      torch built with 12.1, NCCL 2.20.5",
        "host      node-a",
    ]


def test_a_cpu_topology_says_why_nvml_gave_no_gpu_and_what_is_missing() -> None:
    cpu = Topology("cpu", (), "cpu", (), 1, "", "", "Xeon", 2, 24 * GiB, "NVML: no driver")
    assert describe(cpu, {"python": "3.11.7", "hostname": "ci"}).splitlines() == [
        "topology  cpu",
        "device    cpu, 1 node",
        "nvml      NVML: no driver",
        "cpu       Xeon, 2 cores, 24.0 GiB RAM",
        "software  python 3.11.7",
        "cuda      torch built with no CUDA, NCCL none",
        "host      ci",
    ]


@pytest.mark.parametrize("environment", [{}, {"python": None, "hostname": ""}])
def test_a_field_the_environment_lacks_is_said_as_not_recorded(environment: dict) -> None:
    cpu = Topology("cpu", (), "cpu", (), 1, "", "", "Xeon", 2, 24 * GiB, "NVML: no driver")
    lines = describe(cpu, environment).splitlines()
    assert "software  python not recorded" in lines and lines[-1] == "host      not recorded"
    assert not any("None" in line for line in lines)


@given(st.sampled_from(["2xA100-80GB", "2XA100-80gb", " a100 ", "A100", "2xA100-SXM4-80GB"]))
def test_a_topology_matches_its_id_and_aliases_in_any_case_and_padding(name: str) -> None:
    assert TWO_GPUS.matches(name)


@given(st.sampled_from(["2xA100", "a10", "2xA100-80GB-x", ""]))
def test_a_topology_matches_no_other_name(name: str) -> None:
    assert not TWO_GPUS.matches(name)


@pytest.mark.parametrize("field", ["cuda", "cpu_model", "nvml_reason", "aliases", "gpus"])
def test_each_optional_field_of_a_wrong_type_is_refused_naming_where(field: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        topology_from_dict({**minimal(), field: 5}, "here")
    assert str(refused.value).startswith("here"), str(refused.value)
    assert field in str(refused.value)


def test_a_topology_without_gpus_reads_as_none() -> None:
    assert topology_from_dict(minimal()).gpus == ()


@given(st.integers(1, 9))
def test_a_planned_machine_has_its_gpus_by_index_without_ids_or_versions(nodes: int) -> None:
    text = f"{nodes}x4xA100-80GB" if nodes > 1 else "4xA100-80GB"
    planned = planned_topology(text, "0,1,2,3")
    assert planned.nodes == nodes and planned.device == "cuda"
    assert [g.index for g in planned.gpus] == [0, 1, 2, 3]
    for gpu in planned.gpus:
        assert (gpu.memory_bytes, gpu.nvlinks_up, gpu.uuid, gpu.mig_uuid) == (80 * GiB, 0, "", "")
    assert (planned.driver, planned.cuda) == ("", "")


@given(st.integers(1, 9))
def test_a_planned_machine_with_no_gpu_visible_is_a_cpu_of_its_nodes(nodes: int) -> None:
    text = f"{nodes}x4xA100-80GB" if nodes > 1 else "4xA100-80GB"
    planned = planned_topology(text, "-1")
    assert planned.nodes == nodes
    assert planned.id == ("cpu" if nodes == 1 else f"{nodes}xcpu")
    assert planned.nvml_reason == "no visible GPU (CUDA_VISIBLE_DEVICES='-1')"
    assert (planned.driver, planned.cuda, planned.gpus) == ("", "", ())


def test_a_gpu_is_visible_by_its_index_and_mig_instance() -> None:
    gpu = Gpu(3, "G", 1, 0, "GPU-x", "MIG-y")
    assert (gpu.visible().index, gpu.visible().mig_uuid) == (3, "MIG-y")


def test_host_ram_in_doubt_says_why() -> None:
    said = HostRam(64 * GiB, "MemTotal", "a balloon").describe()
    assert said == "host RAM 64.0 GiB from MemTotal (may read low: a balloon)"
    assert HostRam(64 * GiB, "MemTotal").describe() == "host RAM 64.0 GiB from MemTotal"


@pytest.mark.parametrize(
    ("world", "local", "nodes"), [("1", "1", 1), ("4", "2", 2), ("8", "", 1), ("", "2", 1)]
)
def test_nodes_come_from_world_and_local_sizes_when_both_are_set(
    monkeypatch: pytest.MonkeyPatch, world: str, local: str, nodes: int
) -> None:
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert nodes_from_env() == nodes


# ---- where NVML gives no GPU: the reason a CPU topology keeps, and its node count ------------


def nvml_failing(where: str) -> Any:
    """The recorded 4 x A100, failing at ``where``: init (no driver) or the first GPU read."""
    from tests.nvml_replay import NvmlReplay

    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    error = nvml.NVMLError
    if where == "init":

        def init() -> None:
            raise error(9)  # NVML_ERROR_DRIVER_NOT_LOADED

        nvml.nvmlInit = init  # type: ignore[method-assign]
    else:

        def lost(handle: Any) -> Any:
            raise error(15)  # NVML_ERROR_GPU_IS_LOST

        nvml.nvmlDeviceGetName = lost  # type: ignore[method-assign]
    return nvml


@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize("where", ["missing", "init", "hidden", "read"])
def test_a_machine_whose_nvml_gives_no_gpu_is_a_cpu_topology_that_says_why(
    where: str, nodes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user reads in 'no GPU: …': nvidia-ml-py missing, a driver not loaded, no GPU
    visible, a GPU lost while read; each with the node count it was given, and NVML shut
    down whenever it was started."""
    from bloomperf.catalog import topology as topology_module

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "" if where == "hidden" else "0,1")
    nvml = None if where == "missing" else nvml_failing(where)
    if nvml is None:

        def missing() -> Any:
            raise ImportError("No module named 'pynvml'")

        monkeypatch.setattr(topology_module, "load_nvml", missing)
    found = topology_module.detect_topology(nvml, nodes=nodes)
    reasons = {
        "missing": "nvidia-ml-py is not installed",
        "init": "Driver Not Loaded",
        "hidden": "no visible GPU (CUDA_VISIBLE_DEVICES='')",
        "read": "NVML failed: GPU is lost",
    }
    assert found.nvml_reason == reasons[where]
    assert (found.device, found.gpus, found.nodes) == ("cpu", (), nodes)
    assert found.id == ("cpu" if nodes == 1 else f"{nodes}xcpu")
    if nvml is not None:
        assert nvml.shutdown_calls == (0 if where == "init" else 1)


# ---- the CPU's model name, from a cpuinfo of the test's own ---------------------------------


@given(
    name=st.text(
        st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"]), min_size=1, max_size=40
    ).filter(lambda s: s.strip()),
    pad=st.sampled_from(["", " ", "\t", "  "]),
    cpus=st.integers(1, 3),
)
def test_the_cpu_model_is_the_first_processors_model_name_stripped(
    name: str, pad: str, cpus: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from bloomperf.catalog.topology import cpu_model

    blocks = [
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"
        f"model name\t:{pad}{name if i == 0 else 'other ' + str(i)}{pad}\nflags\t\t: fpu\n"
        for i in range(cpus)
    ]
    cpuinfo = tmp_path_factory.mktemp("cpu") / "cpuinfo"
    cpuinfo.write_bytes("\n".join(blocks).encode())
    assert cpu_model(cpuinfo) == name.strip()


def test_without_a_model_name_or_a_cpuinfo_the_cpu_is_what_platform_says(tmp_path: Path) -> None:
    """An ARM kernel's cpuinfo has no "model name" line; a sandbox may have no cpuinfo."""
    import platform

    from bloomperf.catalog.topology import cpu_model

    fallback = platform.processor() or platform.machine()
    arm = tmp_path / "cpuinfo"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n")
    assert cpu_model(arm) == fallback
    assert cpu_model(tmp_path / "missing") == fallback
    # Bytes that are no UTF-8 are replaced, not a crash.
    odd = tmp_path / "odd"
    odd.write_bytes(b"model name\t: Xeon \xff Gold\n")
    assert cpu_model(odd) == "Xeon \ufffd Gold"


@pytest.mark.parametrize(
    ("name", "gib", "expected_id", "aliases"),
    [
        ("NVIDIA A100-SXM4-80GB", 80, "2xA100-SXM4-80GB", ("2xA100-80GB",)),
        ("NVIDIA H100 80GB HBM3", 80, "2xH100-80GB-HBM3", ("2xH100-80GB",)),
        # A name without its memory size gets it from NVML's total; its short name is itself.
        ("Tesla T4", 16, "2xT4-16GB", ()),
        ("NVIDIA L4", 24, "2xL4-24GB", ()),
    ],
)
def test_a_gpu_topology_has_an_alias_only_where_the_short_name_differs(
    name: str, gib: int, expected_id: str, aliases: tuple[str, ...]
) -> None:
    from bloomperf.catalog.topology import gpu_topology

    gpus = tuple(Gpu(i, name, gib * 1024**3, 0, f"GPU-{i}") for i in range(2))
    found = gpu_topology(gpus, 1, "550.54", "12.4")
    assert (found.id, found.aliases, found.device, found.nodes) == (
        expected_id,
        aliases,
        "cuda",
        1,
    )
    assert (found.driver, found.cuda, found.nvml_reason) == ("550.54", "12.4", "")
