"""Every node's probe answer, read on the controller: which answer is whose (pdsh's host labels or
srun's task labels), the facts of each node, one topology for all of them, the lines
`bloomperf topology --hostfile` prints, and NCCL's settings as NCCL reads them."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.topology import cpu_topology, detect_topology, topology_to_dict
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.nodes import (
    NodeFacts,
    cluster_topology,
    describe_nodes,
    infiniband_ports,
    nccl_settings,
    node_facts,
    parse_answers,
    probe,
)
from tests.nvml_replay import NvmlReplay

GiB = 1024**3
HOSTS = ["node-a", "node-b", "node-c"]


def answer(recording: str | None, hostname: str, slurm_node: str = "") -> dict[str, Any]:
    """What ``python -m bloomperf.harness.nodes probe`` prints on a node (a recorded GPU
    machine's NVML, or a node without a GPU: this machine's CPU, whatever GPUs it has)."""
    if recording:
        topology = detect_topology(NvmlReplay.load(recording), nodes=1)
    else:
        topology = cpu_topology(1, "NVML Shared Library Not Found")
    return {
        "hostname": hostname,
        "slurm_node": slurm_node,
        "topology": topology_to_dict(topology),
        "infiniband": ["mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)", "mlx5_1/1 DOWN"],
        "nccl": {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "WARN"},
    }


@pytest.fixture(autouse=True)
def every_gpu_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# ---- whose answer is which ---------------------------------------------------------------------

NOISE = [
    "pdsh@ctl: node-x: ssh exited with exit code 255",
    "node-a: not json at all",
    "node-b: {broken json",
    "no label here {}",
    "",
]


@given(
    answering=st.lists(st.sampled_from(HOSTS), unique=True),
    srun=st.booleans(),
    noise=st.lists(st.sampled_from(NOISE), max_size=4),
    order=st.randoms(use_true_random=False),
)
def test_each_answer_is_its_hosts_whatever_the_labels_order_and_noise(
    answering: list[str], srun: bool, noise: list[str], order: Any
) -> None:
    """pdsh labels a line with the host; srun with the task number, and the answer carries the
    Slurm node's name. Lines that are no answer (pdsh's own, broken JSON) are passed over, and
    an answer after them is still read."""
    lines = [
        f"{i if srun else host}: "
        + json.dumps({"hostname": host.upper(), "slurm_node": host if srun else ""})
        for i, host in enumerate(answering)
    ]
    lines += noise
    order.shuffle(lines)
    answers = parse_answers("\n".join(lines), HOSTS)
    assert {host: a["hostname"] for host, a in answers.items()} == {
        host: host.upper() for host in answering
    }


def test_an_answer_from_a_host_not_asked_is_left_out() -> None:
    output = 'node-z: {"hostname": "z"}\n0: {"hostname": "y", "slurm_node": "node-y"}\n'
    assert parse_answers(output, HOSTS) == {}


# ---- one node's facts ---------------------------------------------------------------------------


def test_a_node_that_says_little_has_empty_facts_not_invented_ones() -> None:
    bare = {"topology": answer(None, "x")["topology"]}
    facts = node_facts("node-a", bare)
    assert (facts.host, facts.hostname, facts.infiniband, facts.nccl) == ("node-a", "", (), {})


def test_a_node_whose_topology_is_unreadable_is_named() -> None:
    with pytest.raises(BloomperfError, match=r"^node node-b: topology must be an object"):
        node_facts("node-b", {"hostname": "b", "topology": "8 GPUs"})


# ---- one topology for all nodes -----------------------------------------------------------------


def nodes_of(*recordings: str | None) -> list[NodeFacts]:
    return [
        node_facts(host, answer(recording, host.upper()))
        for host, recording in zip(HOSTS, recordings, strict=False)
    ]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_alike_cpu_nodes_are_counted_in_the_id(count: int) -> None:
    nodes = nodes_of(*[None] * count)
    topology = cluster_topology(nodes)
    assert (topology.id, topology.nodes, topology.device) == (f"{count}xcpu", count, "cpu")
    assert topology.cpu_cores == nodes[0].topology.cpu_cores  # per node, as the first says


def test_unlike_nodes_join_their_ids_keep_the_firsts_gpus_and_lose_the_aliases() -> None:
    nodes = nodes_of("8xA100-SXM4-80GB", "8xA100-SXM4-80GB", "4xA100-SXM4-80GB")
    topology = cluster_topology(nodes)
    assert topology.id == "8xA100-SXM4-80GB+8xA100-SXM4-80GB+4xA100-SXM4-80GB"
    assert (topology.aliases, topology.nodes, len(topology.gpus)) == ((), 3, 8)


def test_alike_gpu_nodes_name_each_gpu_with_its_memory_where_its_name_has_none() -> None:
    """An H200 says "NVIDIA H200" and 140.4 GiB: the id carries the marketed 141GB."""
    raw = answer("1xH100-80GB-HBM3", "a")
    for gpu in raw["topology"]["gpus"]:
        gpu["name"], gpu["memory_bytes"] = "NVIDIA H200", int(140.4 * GiB)
    nodes = [node_facts(host, raw) for host in HOSTS[:2]]
    topology = cluster_topology(nodes)
    assert (topology.id, topology.aliases, topology.nodes) == (
        "2x1xH200-141GB",
        ("2x1xH200-141GB",),
        2,
    )


# ---- what `bloomperf topology --hostfile` prints ---------------------------------------------


def test_the_printed_lines_say_each_nodes_gpus_memory_fabric_and_settings() -> None:
    gpu_node = node_facts("node-a", answer("4xA100-SXM4-80GB", "gpu-a"))
    cpu_node = node_facts(
        "node-b", {"hostname": "cpu-b", "topology": answer(None, "b")["topology"]}
    )
    nodes = [gpu_node, cpu_node]
    topology = cluster_topology(nodes)
    text = describe_nodes(topology, nodes, {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth0"})
    g, c = gpu_node.topology, cpu_node.topology
    gpu_memory = sum(x.memory_bytes for x in g.gpus) / GiB
    assert text.split("\n") == [
        f"topology  {topology.id}",  # unlike nodes: no alias
        f"node 0    node-a (gpu-a): 4 GPUs (4xA100-SXM4-80GB), {gpu_memory:.1f} GiB GPU memory, "
        f"{g.cpu_cores} cores, {g.ram_bytes / GiB:.1f} GiB RAM",
        "  fabric  mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR), mlx5_1/1 DOWN",
        "  nccl    NCCL_DEBUG=WARN, NCCL_IB_HCA=mlx5_0",
        f"node 1    node-b (cpu-b): no GPU ({c.nvml_reason}), 0.0 GiB GPU memory, "
        f"{c.cpu_cores} cores, {c.ram_bytes / GiB:.1f} GiB RAM",
        "  fabric  no InfiniBand device",
        "  nccl    no NCCL_* setting on the node",
        "ranks get GLOO_SOCKET_IFNAME=eth0, NCCL_DEBUG=INFO (.deepspeed_env)",
    ]
    alike = [node_facts(h, answer("8xA100-SXM4-80GB", h)) for h in HOSTS[:2]]
    first = describe_nodes(cluster_topology(alike), alike, {}).split("\n")
    assert first[0] == "topology  2x8xA100-SXM4-80GB (also 2x8xA100-80GB)"
    assert first[-1] == "ranks get no NCCL_*/GLOO_* setting from here (.deepspeed_env)"


# ---- NCCL's settings -------------------------------------------------------------------------


def test_nccl_settings_are_the_conf_files_then_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text(
        "# site settings\n#NCCL_P2P_DISABLE=1\nHOME=/x\nNCCL_SOCKET_IFNAME=ib0\n"
        "NCCL_TOPO_FILE=/etc/topo.xml?a=b\nNCCL_DEBUG=WARN\n"
    )
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    expected = {
        "NCCL_SOCKET_IFNAME": "ib0",
        "NCCL_TOPO_FILE": "/etc/topo.xml?a=b",  # the first "=" splits
        "NCCL_DEBUG": "INFO",  # the environment wins
    }
    assert nccl_settings(conf=conf) == expected  # this process's environment
    assert nccl_settings({"NCCL_DEBUG": "TRACE"}, conf)["NCCL_DEBUG"] == "TRACE"
    assert nccl_settings({}, tmp_path / "none") == {}


def test_a_probe_says_this_machines_facts_as_the_controller_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-7")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    # A rank's launcher variables say the group's nodes; the probe speaks for its node alone.
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    said = probe()
    assert said["topology"]["nodes"] == 1
    assert said["hostname"] == socket.gethostname() and said["slurm_node"] == "gpu-node-7"
    assert said["nccl"]["NCCL_DEBUG"] == "INFO"
    assert said["infiniband"] == infiniband_ports()
    answers = parse_answers("0: " + json.dumps(said), ["gpu-node-7"])  # srun's task label
    facts = node_facts("gpu-node-7", answers["gpu-node-7"])
    assert facts.topology == detect_topology(nodes=1) and facts.hostname == socket.gethostname()
    monkeypatch.delenv("SLURMD_NODENAME")
    assert probe()["slurm_node"] == ""


def test_a_port_without_a_rate_is_listed_with_its_state_alone(tmp_path: Path) -> None:
    for device, state, rate in (
        ("mlx5_0", "4: ACTIVE", "200 Gb/sec (4X HDR)"),
        ("mlx5_1", "1: DOWN", None),
    ):
        port = tmp_path / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        if rate:
            (port / "rate").write_text(rate + "\n")
    assert infiniband_ports(tmp_path) == ["mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)", "mlx5_1/1 DOWN"]
