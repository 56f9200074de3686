"""DeepSpeed hostfiles, read by DeepSpeed's own rules, and the hosts a launch will use.

Controller side: DeepSpeed's parser (``deepspeed.launcher.runner._parse_hostfile``) imports torch,
so its rules are mirrored here and ``tests/test_multinode_launch.py`` checks them against it:

- a line is ``HOST slots=N`` (``re.search(r'^(\\S+)\\s+slots=(\\d+)')`` on the stripped line);
  text after ``slots=N`` is ignored (MPI hostfiles carry ``max_slots=...`` there);
- blank lines and lines starting with ``#`` are skipped; a host listed twice, any other line or
  no host at all is an error.

bloomperf adds two rules of its own: a host name is a plain name or address (DeepSpeed hands it
to ssh, pdsh and srun, where ``-oProxyCommand=...`` or ``$(...)`` would be more than a name), and
``slots=0`` is refused (DeepSpeed would start a launcher with no rank on that node).

``--include``/``--exclude`` (``NAME[:SLOT[,SLOT...]][@...]``) and ``--num_nodes``/``--num_gpus``
are resolved as DeepSpeed's runner resolves them (``parse_resource_filter``,
``apply_num_nodes_and_gpus``), so that the rank count is known before anything starts.
"""

from __future__ import annotations

import re
from pathlib import Path

from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import read_text_bounded

SLOTS_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")  # DeepSpeed's pattern, used with re.search
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def read_hostfile(path: Path) -> dict[str, int]:
    """``{host: slots}`` in file order; one-line BloomperfError naming the line otherwise."""
    if not path.exists():
        raise BloomperfError(f"{path}: hostfile not found")
    text = read_text_bounded(path, "a hostfile")  # no FIFO, no device, bounded, UTF-8
    return parse_hostfile(text.splitlines(), str(path))


def parse_hostfile(lines: list[str], where: str = "hostfile") -> dict[str, int]:
    hosts: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = SLOTS_LINE.search(line)
        if not match:
            raise BloomperfError(f"{where}:{number}: expected 'HOST slots=N', got {line[:60]!r}")
        host = match.group(1)
        if not HOST_NAME.match(host):
            raise BloomperfError(f"{where}:{number}: {host[:60]!r} is not a host name or address")
        if host in hosts:
            raise BloomperfError(f"{where}:{number}: host {host} listed twice")
        hosts[host] = int(match.group(2))
        if not hosts[host]:
            raise BloomperfError(f"{where}:{number}: host {host} has slots=0")
    if not hosts:
        raise BloomperfError(f"{where}: no 'HOST slots=N' lines")
    return hosts


def active_hosts(hosts: dict[str, int], options: LaunchOptions) -> dict[str, list[int]]:
    """``{host: slot ids}`` that DeepSpeed's runner will launch on, in hostfile order."""
    include, exclude = options.include or "", options.exclude or ""
    if include and exclude:
        raise BloomperfError("--include and --exclude: use one or the other, not both")
    if (include or exclude) and options.num_nodes:
        raise BloomperfError("--include/--exclude cannot be combined with --num-nodes")
    pool = {host: list(range(slots)) for host, slots in hosts.items()}
    if include:
        wanted = parse_node_spec(include, pool, "--include")
        pool = {h: (wanted[h] or pool[h]) for h in pool if h in wanted}
    elif exclude:
        unwanted = parse_node_spec(exclude, pool, "--exclude")
        pool = {
            h: ([s for s in slots if s not in unwanted[h]] if unwanted.get(h) else [])
            if h in unwanted
            else slots
            for h, slots in pool.items()
        }
    pool = {h: slots for h, slots in pool.items() if slots}
    if not pool:
        # DeepSpeed's runner would go on with no rank at all; nothing downstream has a node.
        raise BloomperfError(f"--exclude: {exclude!r} leaves no slot of the hostfile to run on")
    if options.num_nodes:
        pool = dict(list(pool.items())[: options.num_nodes])
    return pool


def parse_node_spec(text: str, pool: dict[str, list[int]], where: str) -> dict[str, list[int]]:
    """``NAME[:SLOT[,SLOT...]]`` joined by ``@`` → {host: slots}; [] means the whole host."""
    nodes: dict[str, list[int]] = {}
    for spec in text.split("@"):
        host, _, slot_text = spec.partition(":")
        if host not in pool:
            raise BloomperfError(f"{where}: host {host!r} is not in the hostfile")
        try:
            slots = [int(s) for s in slot_text.split(",")] if slot_text else []
        except ValueError:
            raise BloomperfError(f"{where}: {spec!r} is not NAME[:SLOT[,SLOT...]]") from None
        for slot in slots:
            if slot not in pool[host]:
                raise BloomperfError(f"{where}: host {host} has no slot {slot}")
        nodes[host] = sorted(set(nodes.get(host, []) + slots))
    return nodes


def rank_count(active: dict[str, list[int]]) -> int:
    return sum(len(slots) for slots in active.values())
