"""Every node of a multi-node launch, read on the node itself: GPUs, memory, fabric, NCCL settings.

``python -m bloomperf.harness.nodes probe`` prints one JSON line about the machine it runs on (NVML
through ``bloomperf.catalog.topology``, InfiniBand ports from ``/sys/class/infiniband``, ``NCCL_*``
from its environment and ``/etc/nccl.conf``). The controller runs it on every host of the hostfile
through the launcher's own transport (``bloomperf.harness.multinode.on_every_node``: pdsh over ssh,
or srun) and joins the answers into one topology: ``2x8xA100-SXM4-40GB`` when the nodes are alike.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bloomperf.catalog.topology import (
    GiB,
    Topology,
    detect_topology,
    gpu_id_name,
    join_groups,
    short_gpu_name,
    topology_from_dict,
    topology_to_dict,
)
from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import json_fields

IB_ROOT = Path("/sys/class/infiniband")
NCCL_CONF = Path("/etc/nccl.conf")
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NodeFacts:
    host: str  # the hostfile's name for it
    hostname: str  # what the node calls itself
    topology: Topology  # the node on its own
    infiniband: tuple[str, ...]  # "mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)"
    nccl: dict[str, str]  # NCCL_* of the node's environment and /etc/nccl.conf


# ---- on the node ------------------------------------------------------------------------------


def infiniband_ports(root: Path = IB_ROOT) -> list[str]:
    ports = []
    for port in sorted(root.glob("*/ports/*")):
        state = read_text(port / "state").split(":")[-1].strip()
        rate = read_text(port / "rate")
        ports.append(f"{port.parent.parent.name}/{port.name} {state} {rate}".strip())
    return ports


def nccl_settings(environ: Any = None, conf: Path = NCCL_CONF) -> dict[str, str]:
    """``NCCL_*`` as NCCL itself reads them: /etc/nccl.conf, overridden by the environment."""
    settings = {}
    for line in read_text(conf).splitlines():
        key, _, value = line.strip().partition("=")
        if key.startswith("NCCL_"):  # a comment ("#NCCL_X=1") starts otherwise
            settings[key] = value
    environ = os.environ if environ is None else environ
    settings.update({k: v for k, v in environ.items() if k.startswith("NCCL_")})
    return settings


def read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def probe() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "slurm_node": os.environ.get("SLURMD_NODENAME", ""),
        "topology": topology_to_dict(detect_topology(nodes=1)),
        "infiniband": infiniband_ports(),
        "nccl": nccl_settings(),
    }


# ---- on the controller ------------------------------------------------------------------------


def read_nodes(options: LaunchOptions) -> list[NodeFacts]:
    """Probe every active host of ``options.hostfile``; one-line error if one does not answer."""
    from bloomperf.harness.multinode import hostfile_hosts, on_every_node

    hosts = hostfile_hosts(options)
    remote = [sys.executable, "-m", "bloomperf.harness.nodes", "probe"]
    done = on_every_node(options, remote, PROBE_TIMEOUT_S, label=True)
    answers = parse_answers(done.stdout, hosts)
    missing = [host for host in hosts if host not in answers]
    if missing:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise BloomperfError(f"--hostfile: node {missing[0]} did not answer the probe: {why}")
    return [node_facts(host, answers[host]) for host in hosts]


def parse_answers(output: str, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """``LABEL: {json}`` lines → {host: answer}; the label is pdsh's host or srun's task."""
    answers: dict[str, dict[str, Any]] = {}
    for line in output.splitlines():
        label, sep, text = line.partition(": ")
        if not sep or not text.startswith("{"):
            continue
        try:
            answer = json.loads(text)
        except json.JSONDecodeError:
            continue
        host = label.strip() if label.strip() in hosts else answer.get("slurm_node", "")
        if host in hosts:
            answers[host] = answer
    return answers


def node_facts(host: str, answer: dict[str, Any]) -> NodeFacts:
    return NodeFacts(
        host=host,
        hostname=str(answer.get("hostname", "")),
        topology=topology_from_dict(answer.get("topology"), f"node {host}"),
        infiniband=tuple(str(p) for p in answer.get("infiniband", [])),
        nccl={str(k): str(v) for k, v in dict(answer.get("nccl", {})).items()},
    )


def cluster_topology(nodes: list[NodeFacts]) -> Topology:
    """One topology for all nodes: ``2x8xA100-SXM4-40GB``; unlike nodes joined with ``+``."""
    first = nodes[0].topology
    if any(node.topology.id != first.id for node in nodes):
        return replace(
            first, id="+".join(n.topology.id for n in nodes), aliases=(), nodes=len(nodes)
        )
    if first.device == "cpu":
        return replace(first, id=f"{len(nodes)}xcpu", nodes=len(nodes))
    names = [gpu_id_name(g.name, g.memory_bytes) for g in first.gpus]
    return replace(
        first,
        id=join_groups(names, len(nodes)),
        aliases=(join_groups([short_gpu_name(n) for n in names], len(nodes)),),
        nodes=len(nodes),
    )


def describe_nodes(topology: Topology, nodes: list[NodeFacts], sent: dict[str, str]) -> str:
    lines = [
        f"topology  {topology.id}" + (f" (also {topology.aliases[0]})" if topology.aliases else "")
    ]
    for rank, node in enumerate(nodes):
        t = node.topology
        gpus = f"{len(t.gpus)} GPUs ({t.id})" if t.gpus else f"no GPU ({t.nvml_reason})"
        lines.append(
            f"node {rank:<4} {node.host} ({node.hostname}): {gpus}, "
            f"{sum(g.memory_bytes for g in t.gpus) / GiB:.1f} GiB GPU memory, "
            f"{t.cpu_cores} cores, {t.ram_bytes / GiB:.1f} GiB RAM"
        )
        lines.append(f"  fabric  {', '.join(node.infiniband) or 'no InfiniBand device'}")
        nccl = ", ".join(f"{k}={v}" for k, v in sorted(node.nccl.items()))
        lines.append(f"  nccl    {nccl or 'no NCCL_* setting on the node'}")
    passed = ", ".join(f"{k}={v}" for k, v in sorted(sent.items()))
    lines.append(f"ranks get {passed or 'no NCCL_*/GLOO_* setting from here'} (.deepspeed_env)")
    return "\n".join(lines)


# `bloomperf topology --json` (one node or a hostfile's nodes): versioned like every document.
TOPOLOGY_KIND = "bloomperf-topology"
TOPOLOGY_SCHEMA_VERSION = 1


def nodes_to_dict(
    topology: Topology, nodes: list[NodeFacts], sent: dict[str, str]
) -> dict[str, Any]:
    return {
        "kind": TOPOLOGY_KIND,
        "schema_version": TOPOLOGY_SCHEMA_VERSION,
        "topology": topology_to_dict(topology),
        "nodes": [json_fields(n) for n in nodes],
        "ranks_get": sent,
    }


def read_cluster(options: LaunchOptions) -> tuple[Topology, list[NodeFacts]]:
    nodes = read_nodes(options)
    return cluster_topology(nodes), nodes


def run_nodes_command(args: Any) -> int:
    """``bloomperf topology --hostfile H``: every node, and the id a run on them is filed under."""
    from bloomperf.harness.multinode import forwarded_environment

    options = LaunchOptions(
        hostfile=Path(args.hostfile),
        launcher=args.launcher,
        ssh_port=args.ssh_port,
        include=args.include,
        exclude=args.exclude,
    )
    topology, nodes = read_cluster(options)
    sent = {
        k: v
        for k, v in forwarded_environment(os.environ).items()
        if k.startswith(("NCCL_", "GLOO_"))
    }
    if args.format == "json":
        print(json.dumps(nodes_to_dict(topology, nodes, sent), indent=2, allow_nan=False))
    else:
        print(describe_nodes(topology, nodes, sent))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["probe"]:
        sys.exit("usage: python -m bloomperf.harness.nodes probe")
    print(json.dumps(probe()), flush=True)
