"""Command lines for rank groups, started through DeepSpeed's own launcher.

Controller side: no torch, no DeepSpeed import. ``rank_group_command`` returns an argv (never a
shell string) and the extra environment; ``bloomperf.harness.launch`` starts it in its own process
group.

How a group is started:

- one node: ``python -m deepspeed.launcher.runner --include localhost:<ids> --module
  bloomperf.harness.worker``, the ``deepspeed`` command itself; it runs
  ``deepspeed.launcher.launch``, which spawns the ranks with ``CUDA_VISIBLE_DEVICES=<ids>``. Never
  ``--num_gpus N`` on a GPU: DeepSpeed 0.19.8's runner then deletes ``CUDA_VISIBLE_DEVICES`` and
  uses GPUs 0..N-1, not the ones bloomperf samples and locks. The runner itself starts without
  ``CUDA_VISIBLE_DEVICES`` (``env -u``), so that it counts every GPU and accepts any id in
  ``--include`` (it rejects an id at or above the count it sees), and with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that the ids are NVML's indices (see
  ``bloomperf.catalog.devices``).
- several nodes (``hostfile``): DeepSpeed's multinode runners only (pdsh over ssh, OpenMPI,
  MVAPICH, Slurm), with the environment for remote ranks in ``.deepspeed_env``: see
  ``bloomperf.harness.multinode``.

On CPU: ``LOCAL_SIZE`` tells DeepSpeed's runner how many CPU "devices" to count (it reads it
instead of a GPU count) and ``TORCH_EXTENSIONS_DIR`` is a stable cache so that the shared-memory
all-reduce op JIT-builds once (about 35 s), not in every group. Every rank leaves a
``/dev/shm/deepspeed_allreduce_buffer_*`` segment behind, even after a clean exit;
``cleanup_shm`` removes those no live process maps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bloomperf.backends.ds_ranks import free_port
from bloomperf.catalog.caches import worker_caches
from bloomperf.catalog.devices import ORDER_ENV, PCI_ORDER, VISIBLE_ENV
from bloomperf.catalog.leftovers import owned_temp_folder
from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError

# The shared-memory cleanup lives in bloomperf.harness.shm (multinode needs it without this module);
# its names stay importable from here for the callers that have always found them here.
from bloomperf.harness.shm import SHM_DIR, SHM_PATTERN, cleanup_shm, mapped_paths, shm_segments

__all__ = [
    "SHM_DIR",
    "SHM_PATTERN",
    "cleanup_shm",
    "mapped_paths",
    "rank_group_command",
    "shm_segments",
]

WORKER_MODULE = "bloomperf.harness.worker"


def rank_group_command(
    world_size: int,
    options: LaunchOptions,
    python: str = sys.executable,
    module: str = WORKER_MODULE,
    gpus: Sequence[int] | None = None,
    rank_env: dict[str, str] | None = None,
    workdir: Path | None = None,
    port: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that start ``python -m module`` on ``world_size`` ranks.

    ``gpus``: the NVML indices of the group's GPUs on this node (one rank each); None on CPU.
    ``rank_env``: what every rank needs; ``workdir`` holds a multi-node group's .deepspeed_env.
    ``port``: the rendezvous port (None: a free one).
    """
    port = port or free_port()
    env = {
        **worker_caches(),  # bloomperf's extensions folder and library caches
        # Rank output goes to the group's log; unbuffered, so it is complete when a rank dies.
        "PYTHONUNBUFFERED": "1",
        **(rank_env or {}),
    }
    if options.hostfile is not None:
        from bloomperf.harness.multinode import multinode_command

        folder = workdir or owned_temp_folder("group")
        return multinode_command(
            world_size, options, python, module, env, port, folder / ".deepspeed_env"
        )
    runner = [python, "-u", "-m", "deepspeed.launcher.runner"]
    tail = ["--no_local_rank", "--module", module]
    if gpus is not None:
        check_world(world_size, len(gpus), "the group's GPUs")
        env[ORDER_ENV] = PCI_ORDER
        include = ["--include", include_argument(gpus)]
        return [
            *without_visible_devices(),
            *runner,
            *include,
            "--master_port",
            str(port),
            *tail,
        ], env
    env["LOCAL_SIZE"] = str(world_size)  # read by DeepSpeed's CPU accelerator only
    return [*runner, "--num_gpus", str(world_size), "--master_port", str(port), *tail], env


def include_argument(gpus: Sequence[int]) -> str:
    """DeepSpeed's resource filter for GPUs of this node: ``localhost:4,5,6,7``."""
    if not gpus:
        raise BloomperfError("DeepSpeed launch: the group has no GPU")
    return "localhost:" + ",".join(str(int(g)) for g in gpus)


def without_visible_devices() -> list[str]:
    """An argv prefix that starts the runner with CUDA_VISIBLE_DEVICES unset (see above)."""
    return ["env", "-u", VISIBLE_ENV]


def check_world(world_size: int, slots: int, where: str) -> None:
    if slots != world_size:
        raise BloomperfError(f"{where}: gives {slots} ranks, but the group needs {world_size}")
