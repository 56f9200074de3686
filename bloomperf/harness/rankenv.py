"""Inside a rank: torch's rank variables from whichever launcher started it, and who we are.

DeepSpeed's own launcher (single node, and every node under pdsh) sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``. Its other
multinode runners do not: ``srun`` and ``mpirun`` start the script directly, and
``deepspeed.init_distributed`` then falls back to ``mpi4py`` (``comm.mpi_discovery``). So a
rank started by Slurm, OpenMPI or MVAPICH takes its numbers from that launcher's variables, and
``MASTER_ADDR``/``MASTER_PORT`` from the group's ``.deepspeed_env``
(``bloomperf.harness.multinode``).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping, MutableMapping

# launcher → its (rank, world size, local rank, local size) variables
LAUNCHER_VARIABLES = {
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
    "openmpi": (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    "mvapich": (
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
}
TORCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE")


def adopt_launcher_rank(env: MutableMapping[str, str] | None = None) -> str:
    """Fill torch's rank variables from the launcher's; return the launcher's name ("" if none)."""
    env = os.environ if env is None else env
    if "RANK" in env:
        return "deepspeed" if "CROSS_RANK" in env else ""
    for launcher, names in LAUNCHER_VARIABLES.items():
        if names[0] in env:
            for torch_name, name in zip(TORCH_VARIABLES, names, strict=True):
                if name in env:
                    env[torch_name] = leading_number(env[name])
            env.setdefault("LOCAL_RANK", "0")
            return launcher
    return ""


def leading_number(value: str) -> str:
    """``2(x2)`` (Slurm's per-node task list) → ``2``; a plain number stays as it is."""
    match = re.match(r"\d+", value)
    return match.group(0) if match else value


def ssh_target(env: Mapping[str, str] | None = None) -> str | None:
    """The address the rank's ssh session arrived at (``SSH_CONNECTION``'s third field): the
    hostfile entry pdsh started it for, even where two entries are one machine."""
    ssh = (os.environ if env is None else env).get("SSH_CONNECTION", "").split()
    return ssh[2] if len(ssh) >= 3 else None


def node_name(env: Mapping[str, str] | None = None) -> str:
    """The node a rank runs on as its launcher named it: the ssh target, the Slurm node, or
    the host name."""
    env = os.environ if env is None else env
    return ssh_target(env) or env.get("SLURMD_NODENAME") or socket.gethostname()


def identity_line(launcher: str) -> str:
    """One log line saying which rank runs where, as the rank itself sees it.

    ``ssh_to``: the address the rank's ssh session arrived at (``SSH_CONNECTION``'s third field),
    i.e. the hostfile entry pdsh started it for; ``slurm_node``: the node Slurm placed it on.
    """
    fields = {
        "rank": os.environ.get("RANK", "0"),
        "world": os.environ.get("WORLD_SIZE", "1"),
        "node_rank": os.environ.get("CROSS_RANK") or os.environ.get("SLURM_NODEID") or "0",
        "launcher": launcher or "plain",
        "host": socket.gethostname(),
        "ssh_to": ssh_target() or "-",
        "slurm_node": os.environ.get("SLURMD_NODENAME", "-"),
        "pid": str(os.getpid()),
    }
    return "bloomperf-rank " + " ".join(f"{k}={v}" for k, v in fields.items())


def report_identity(launcher: str) -> None:
    print(identity_line(launcher), file=sys.stderr, flush=True)
