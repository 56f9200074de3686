"""Rank-side DeepSpeed plumbing shared by the ds-* backends: joining the rank group.

Runs inside worker processes only (imports torch and DeepSpeed lazily). The controller-side
counterpart, which builds the launcher command, is ``bloomperf.harness.dslaunch``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bloomperf.backends.compat import installed_version

# DeepSpeed's name for its CPU all-reduce segments (SHM_BUFFER_NAME in shm.cpp).
SHM_SEGMENT_PREFIX = "deepspeed_allreduce_buffer"


def deepspeed_missing() -> str | None:
    if installed_version("deepspeed") is None:
        return "deepspeed is not installed (pip install 'bloomperf[gpu]')"
    return None


@contextmanager
def timed_step(record: dict[str, float], name: str) -> Iterator[None]:
    """Time one preparation step into ``record[name]`` (seconds): kept apart from load time."""
    started = time.perf_counter()
    yield
    record[name] = time.perf_counter() - started


def join_rank_group(device: str) -> int:
    """Initialise torch.distributed through DeepSpeed; return this rank's local rank.

    Under a launcher the rank variables are set. A single-rank worker is started as a plain
    process: without RANK/MASTER_ADDR DeepSpeed would try mpi4py to discover the world, so we
    declare a world of one on a free localhost port.
    """
    import deepspeed
    import torch

    if "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        os.environ.update(
            {
                "RANK": "0",
                "WORLD_SIZE": "1",
                "LOCAL_RANK": "0",
                "LOCAL_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()),
            }
        )
    # The shared-memory all-reduce on CPU sizes itself from LOCAL_SIZE; torchrun does not set it.
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
        unlink_allreduce_segment()
    if device == "cpu":
        keep_shm_all_reduce_on_one_node()
    return local_rank


def keep_shm_all_reduce_on_one_node() -> None:
    """DeepSpeed 0.19.8's CPU shared-memory all-reduce, with ranks on several nodes: its
    ``initialize`` skips the shm setup (WORLD_SIZE != LOCAL_SIZE) but ``inference_all_reduce_``
    still runs its shm loop, and the rank segfaults (seen here on two nodes over pdsh). Its own
    fallback, the process-group all-reduce, is taken when the kernel level is 0."""
    from deepspeed.comm import comm

    if os.environ.get("WORLD_SIZE", "1") != os.environ.get("LOCAL_SIZE", "1"):
        backend = getattr(comm, "cdb", None)
        if backend is not None and hasattr(backend, "shm_vector_kernel_level"):
            backend.shm_vector_kernel_level = 0


def unlink_allreduce_segment() -> None:
    """Remove the name of this rank's DeepSpeed all-reduce segment, keeping its memory mapped.

    On CPU, ``init_distributed`` creates ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_
    <port>_<rank>`` (66 MiB; ops/csrc/cpu/comm/shm.cpp, ``shm_initialize``) and maps every other
    rank's before it returns, but nothing ever unlinks it: each rank, of any world size, left
    one behind even after a clean exit. Once every rank is past the barrier, all of them have
    mapped all segments and no name is needed any more; unlinking now frees the memory when the
    last rank exits, however it exits (an OOM, a kill).
    """
    import torch

    if torch.distributed.get_world_size() > 1:
        torch.distributed.barrier()
    name = "_".join(
        (
            SHM_SEGMENT_PREFIX,
            str(os.getuid()),
            os.environ.get("MASTER_ADDR", ""),
            os.environ.get("MASTER_PORT", ""),
            str(torch.distributed.get_rank()),
        )
    )
    (Path("/dev/shm") / name).unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
