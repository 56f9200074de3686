"""Command lines for rank groups, started through DeepSpeed's own launcher.

Controller side: no torch, no DeepSpeed import. ``rank_group_command`` returns an argv (never a
shell string) and the extra environment; ``bloomperf.launch`` starts it in its own process group.

How a group is started:

- one node: ``python -m deepspeed.launcher.runner --include localhost:<ids> --module
  bloomperf.worker``, the ``deepspeed`` command itself; it runs ``deepspeed.launcher.launch``,
  which spawns the ranks with ``CUDA_VISIBLE_DEVICES=<ids>``. Never ``--num_gpus N`` on a GPU:
  DeepSpeed 0.19.8's runner then deletes ``CUDA_VISIBLE_DEVICES`` and uses GPUs 0..N-1, not the
  ones bloomperf samples and locks. The runner itself starts without ``CUDA_VISIBLE_DEVICES``
  (``env -u``), so that it counts every GPU and accepts any id in ``--include`` (it rejects an id
  at or above the count it sees), and with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that the ids are
  NVML's indices (see ``bloomperf.devices``).
- several nodes (``hostfile``): DeepSpeed's runner reaches the other nodes with pdsh/ssh (or the
  ``launcher`` option: openmpi, slurm...). When every host in the hostfile is this machine
  (``localhost``, ``127.x.x.x``, its hostname), ssh is neither available nor needed: we start one
  ``deepspeed --no_ssh --node_rank K`` per node ourselves, which is exactly the command pdsh runs
  on each node, so the ranks of all "nodes" form one world through the same rendezvous
  (``--master_addr``/``--master_port``). ``python -m bloomperf.dslaunch`` is that small local
  fan-out: it waits for every node's launcher and, if one fails, stops the others.

On CPU: ``LOCAL_SIZE`` tells DeepSpeed's runner how many CPU "devices" to count (it reads it
instead of a GPU count) and ``TORCH_EXTENSIONS_DIR`` is a stable cache so that the shared-memory
all-reduce op JIT-builds once (about 35 s), not in every group. Every rank leaves a
``/dev/shm/deepspeed_allreduce_buffer_*`` segment behind, even after a clean exit;
``cleanup_shm`` removes those no live process maps.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloomperf.devices import ORDER_ENV, PCI_ORDER, VISIBLE_ENV
from bloomperf.errors import BloomperfError
from bloomperf.jsonfile import read_text_bounded

WORKER_MODULE = "bloomperf.worker"
SHM_DIR = Path("/dev/shm")
SHM_PATTERN = "deepspeed_allreduce_buffer_*"
HOST_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s+slots=([1-9][0-9]*)$")
LOCAL_HOSTS = ("localhost", "ip6-localhost")
PASSED_OPTIONS = ("launcher", "launcher_args", "include", "exclude", "ssh_port")


def extensions_dir() -> Path:
    """Where DeepSpeed JIT-builds its ops: kept between runs (XDG cache, like torch's default).

    One folder per Python environment: the current and reference profiles' torch builds would
    otherwise keep invalidating each other's build of the same op (a rebuild each switch).
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    environment = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return base / "bloomperf" / "torch_extensions" / environment


def rank_group_command(
    world_size: int,
    options: dict[str, Any],
    python: str = sys.executable,
    module: str = WORKER_MODULE,
    gpus: Sequence[int] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that start ``python -m module`` on ``world_size`` ranks.

    ``gpus``: the NVML indices of the group's GPUs on this node (one rank each); None on CPU.
    """
    port = int(options.get("master_port") or free_port())
    env = {
        "LOCAL_SIZE": str(world_size),
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR") or str(extensions_dir()),
        # Rank output goes to the group's log; unbuffered, so it is complete when a rank dies.
        "PYTHONUNBUFFERED": "1",
    }
    runner = [python, "-u", "-m", "deepspeed.launcher.runner"]
    tail = ["--no_local_rank", "--module", module]
    hostfile = options.get("hostfile")
    if not hostfile and gpus is not None:
        check_world(world_size, len(gpus), "the group's GPUs")
        env.pop("LOCAL_SIZE")  # read by DeepSpeed's CPU accelerator only
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
    if not hostfile:
        slots = int(options.get("num_gpus") or options.get("num_procs") or world_size)
        check_world(world_size, slots, "--num_gpus")
        return [*runner, "--num_gpus", str(slots), "--master_port", str(port), *tail], env
    hosts = select_hosts(read_hostfile(Path(str(hostfile))), options)
    check_world(world_size, sum(hosts.values()), str(hostfile))
    env.pop("LOCAL_SIZE")  # the launcher sets it per node, from the hostfile's slots
    common = ["--hostfile", str(hostfile), "--master_port", str(port), *node_options(options)]
    if all(is_local_host(host) for host in hosts):
        nodes = [
            [
                *runner,
                *common,
                "--no_ssh",
                "--node_rank",
                str(rank),
                "--master_addr",
                "127.0.0.1",
                *tail,
            ]
            for rank in range(len(hosts))
        ]
        return [python, "-m", "bloomperf.dslaunch", *encode_nodes(nodes)], env
    master = str(options.get("master_addr") or next(iter(hosts)))
    return [*runner, *common, "--master_addr", master, *tail], env


def include_argument(gpus: Sequence[int]) -> str:
    """DeepSpeed's resource filter for GPUs of this node: ``localhost:4,5,6,7``."""
    if not gpus:
        raise BloomperfError("DeepSpeed launch: the group has no GPU")
    return "localhost:" + ",".join(str(int(g)) for g in gpus)


def without_visible_devices() -> list[str]:
    """An argv prefix that starts the runner with CUDA_VISIBLE_DEVICES unset (see above)."""
    return ["env", "-u", VISIBLE_ENV]


def node_options(options: dict[str, Any]) -> list[str]:
    """The launcher's node options passed through: --num_nodes/--num_gpus and the rest."""
    argv: list[str] = []
    if options.get("num_nodes"):
        argv += ["--num_nodes", str(int(options["num_nodes"]))]
    if options.get("num_gpus"):
        argv += ["--num_gpus", str(int(options["num_gpus"]))]
    for key in PASSED_OPTIONS:
        if options.get(key):
            argv += [f"--{key}", str(options[key])]
    return argv


def check_world(world_size: int, slots: int, where: str) -> None:
    if slots != world_size:
        raise BloomperfError(f"{where}: gives {slots} ranks, but the group needs {world_size}")


def read_hostfile(path: Path) -> dict[str, int]:
    """``host slots=N`` lines (comments and blank lines allowed) → {host: slots}, in order."""
    if not path.exists():
        raise BloomperfError(f"{path}: hostfile not found")
    hosts: dict[str, int] = {}
    text = read_text_bounded(path, "a hostfile")  # no FIFO, no device, bounded, UTF-8
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = HOST_LINE.match(line)
        if not match:
            raise BloomperfError(f"{path}:{number}: expected 'HOST slots=N', got {line[:60]!r}")
        host, slots = match.group(1), int(match.group(2))
        if host in hosts:
            raise BloomperfError(f"{path}:{number}: host {host} listed twice")
        hosts[host] = slots
    if not hosts:
        raise BloomperfError(f"{path}: no 'HOST slots=N' lines")
    return hosts


def select_hosts(hosts: dict[str, int], options: dict[str, Any]) -> dict[str, int]:
    """What --num_nodes/--num_gpus leave of the hostfile (DeepSpeed's rule, for the rank count)."""
    if options.get("include") or options.get("exclude"):
        return hosts  # DeepSpeed applies them; the world check then uses the whole file
    chosen = dict(list(hosts.items())[: int(options.get("num_nodes") or len(hosts))])
    if options.get("num_gpus"):
        chosen = {host: int(options["num_gpus"]) for host in chosen}
    return chosen


def is_local_host(host: str) -> bool:
    return host in LOCAL_HOSTS or host.startswith("127.") or host == socket.gethostname()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- cleanup -----------------------------------------------------------------------------------


def shm_segments() -> set[str]:
    return {str(path) for path in SHM_DIR.glob(SHM_PATTERN)}


def cleanup_shm(before: set[str] | None = None) -> list[str]:
    """Remove the all-reduce segments our ranks left; return what was removed.

    ``before``: segments that existed before the group started, kept. Segments a live process
    still maps belong to a running group (another test, another user's job) and are kept too.
    """
    in_use = mapped_paths()
    removed = []
    for path in sorted(shm_segments() - (before or set())):
        if path in in_use:
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


def mapped_paths() -> set[str]:
    """Files under /dev/shm that any process we can see has mapped or open."""
    paths: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    paths.add(line[line.index("/dev/shm/") :].removesuffix(" (deleted)"))
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    paths.add(target)
        except OSError:  # the process exited meanwhile, or is not ours to read
            continue
    return paths


# -- local fan-out: one launcher per "node" on this machine ------------------------------------

NODE_SEPARATOR = "--node--"


def encode_nodes(nodes: list[list[str]]) -> list[str]:
    argv: list[str] = []
    for node in nodes:
        argv += [NODE_SEPARATOR, *node]
    return argv


def decode_nodes(argv: list[str]) -> list[list[str]]:
    nodes: list[list[str]] = []
    for arg in argv:
        if arg == NODE_SEPARATOR:
            nodes.append([])
        elif nodes:
            nodes[-1].append(arg)
        else:
            raise BloomperfError(f"bloomperf.dslaunch: expected {NODE_SEPARATOR} first")
    return nodes


def run_nodes(nodes: list[list[str]]) -> int:
    """Start every node's launcher, wait for all; the first failure stops the rest."""
    processes = [subprocess.Popen(node) for node in nodes]

    def stop(signum: int, frame: Any) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        codes = [process.poll() for process in processes]
        failed = [code for code in codes if code]
        if failed:
            stop(signal.SIGTERM, None)
            for process in processes:
                process.wait()
            return failed[0]
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(run_nodes(decode_nodes(sys.argv[1:])))
