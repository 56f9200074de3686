"""`bloomperf topology`: this machine's topology id, GPUs and software, or every node's.

The command line only: detection is ``bloomperf.catalog.topology``'s, the multi-node read
``bloomperf.harness.nodes``'s (which builds on topology, hence this module above both).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bloomperf.catalog.fingerprint import environment_fingerprint
from bloomperf.catalog.topology import (
    describe,
    detect_topology,
    topology_to_dict,
)
from bloomperf.cli.arguments import add_format_argument, add_node_arguments
from bloomperf.harness.nodes import TOPOLOGY_KIND, TOPOLOGY_SCHEMA_VERSION, run_nodes_command


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topology",
        help="show this machine's GPUs, interconnect and software (the topology id baselines use)",
        description="Show the topology id, GPUs, NVLinks, driver and software versions.",
    )
    add_format_argument(parser, "json")
    # --json came first here; every other command spells it --format json.
    parser.add_argument(
        "--json", dest="format", action="store_const", const="json", help="same as --format json"
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="number of nodes [WORLD_SIZE / LOCAL_WORLD_SIZE, else 1]",
    )
    add_node_arguments(parser)
    parser.set_defaults(func=run_topology_command)


def run_topology_command(args: argparse.Namespace) -> int:
    if args.hostfile:
        return run_nodes_command(args)
    topology = detect_topology(nodes=args.nodes)
    environment = environment_fingerprint(topology)
    if args.format == "json":
        document = {
            "kind": TOPOLOGY_KIND,
            "schema_version": TOPOLOGY_SCHEMA_VERSION,
            "topology": topology_to_dict(topology),
            "environment": environment,
        }
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        print(describe(topology, environment))
    return 0
