"""Multi-node groups, started only through DeepSpeed's own multinode runners.

``python -m deepspeed.launcher.runner --hostfile H --launcher pdsh|openmpi|mvapich|slurm ...``: the
runner reaches the nodes (pdsh over ssh, ``mpirun``, ``srun``) and bloomperf adds nothing to how.
What bloomperf does around it:

- **environment.** Remote ranks do not inherit the controller's environment. What they need
  (the worker spec, the control address and token, cache paths, ``NCCL_*``/``GLOO_*`` settings,
  thread counts) goes into a ``.deepspeed_env`` file that DeepSpeed's runner reads and exports
  to every node through the launcher (``export K=V;`` for pdsh, ``-x`` for mpirun, ``--export``
  for srun). The runner looks for ``DS_ENV_FILE`` (default ``.deepspeed_env``) in ``~`` and ``.``;
  an absolute ``DS_ENV_FILE`` names one file, so the group's file starts with the user's own
  ``.deepspeed_env`` lines and adds bloomperf's after them.
- **entry.** ``srun`` and ``mpirun`` run a script path (DeepSpeed's Slurm runner drops
  ``--module``), so every launcher runs ``rankentry/run_module.py MODULE``.
- **faults.** ``NodeWatch`` notices a node lost while the group runs (its pdsh ssh connection
  closed, or the launcher exited) and fails the cell. Teardown stops the runner first (SIGKILL
  under pdsh: its handler's ``pkill`` would hit other jobs), then kills what is left here, then
  runs ``cleanup`` on every node (``on_every_node``: srun under Slurm, pdsh over ssh otherwise):
  it kills whatever still carries the group's id in its environment and removes the
  ``/dev/shm`` segments no live process maps.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import unknown_name
from bloomperf.core.jsonfile import write_text_atomic
from bloomperf.harness.hostfile import active_hosts, rank_count, read_hostfile
from bloomperf.harness.shm import cleanup_shm

LAUNCHERS = ("pdsh", "openmpi", "mvapich", "slurm")
DS_ENV_FILE = "DS_ENV_FILE"  # deepspeed.launcher.runner.DEEPSPEED_ENVIRONMENT_NAME's variable
DS_ENV_DEFAULT_NAME = ".deepspeed_env"
GROUP_ENV = "BLOOMPERF_GROUP_ID"  # marks every process of a group, on every node
# Forwarded to every node when set here: caches, comms settings, threads, bloomperf's own.
FORWARDED_PREFIXES = ("NCCL_", "GLOO_", "HF_", "TRANSFORMERS_", "TORCH_", "OMP_", "MKL_")
# PYTHONPATH is not here: the runner exports every PYTHON* variable itself, with its cwd first.
FORWARDED_NAMES = ("XDG_CACHE_HOME", "CUDA_DEVICE_ORDER", "DS_ACCELERATOR", "BLOOMPERF_CACHE")
# What DeepSpeed's add_export would have to quote, and a remote shell would still expand.
UNSAFE_VALUE_CHARS = set('"`$\\\n')
ENTRY_SCRIPT = Path(__file__).resolve().parent / "rankentry" / "run_module.py"
NODE_LOST_CHECK_S = 0.5
RUNNER_STOP_S = 20.0
CLEANUP_TIMEOUT_S = 60.0


def multinode_command(
    world_size: int,
    options: LaunchOptions,
    python: str,
    module: str,
    env: dict[str, str],
    port: int,
    env_file: Path,
) -> tuple[list[str], dict[str, str]]:
    """DeepSpeed's runner over the hostfile; ``env`` (for every rank) goes to .deepspeed_env."""
    hostfile = hostfile_of(options)
    hosts = active_hosts(read_hostfile(hostfile), options)
    if rank_count(hosts) != world_size:
        raise BloomperfError(
            f"{hostfile}: gives {rank_count(hosts)} ranks, but the group needs {world_size}"
        )
    launcher = options.launcher
    if launcher not in LAUNCHERS:
        raise BloomperfError(f"--launcher: {unknown_name(launcher, LAUNCHERS)}")
    master = options.master_addr or next(iter(hosts))
    group_id = secrets.token_hex(8)
    rank_env = {
        **forwarded_environment(os.environ),
        **env,
        "MASTER_ADDR": master,  # read by Slurm/MPI ranks; DeepSpeed's launch sets the same
        "MASTER_PORT": str(port),
        GROUP_ENV: group_id,
    }
    write_env_file(env_file, rank_env)
    argv = [python, "-u", "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile)]
    argv += ["--launcher", launcher, "--master_addr", master, "--master_port", str(port)]
    for key, value in (
        ("ssh_port", options.ssh_port),
        ("include", options.include),
        ("exclude", options.exclude),
        ("num_nodes", options.num_nodes),
        ("launcher_args", options.launcher_args),
    ):
        if value:
            argv += [f"--{key}", str(value)]
    if launcher == "slurm":
        argv.append("--no_ssh_check")  # srun reaches the nodes; they need no ssh from here
    argv += ["--no_local_rank", str(ENTRY_SCRIPT), module]
    return argv, {DS_ENV_FILE: str(env_file), GROUP_ENV: group_id}


def forwarded_environment(environ: Any) -> dict[str, str]:
    return {
        key: value
        for key, value in environ.items()
        if (key.startswith(FORWARDED_PREFIXES) or key in FORWARDED_NAMES)
        and not UNSAFE_VALUE_CHARS & set(value)
    }


def user_env_lines() -> list[str]:
    """The lines DeepSpeed's runner would read without us: ~/NAME and ./NAME, in that order."""
    name = os.environ.get(DS_ENV_FILE) or DS_ENV_DEFAULT_NAME
    lines: list[str] = []
    for folder in (Path.home(), Path(".")):
        path = folder / name
        if path.is_file():
            lines += [line for line in path.read_text().splitlines() if "=" in line]
    return lines


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """KEY=VALUE lines; no blank line (the runner's ``split('=')`` would fail on one)."""
    for key, value in env.items():
        if UNSAFE_VALUE_CHARS & set(value) or "=" in key:
            raise BloomperfError(f"{key}: value cannot be passed to remote ranks: {value[:60]!r}")
    lines = [*user_env_lines(), *(f"{key}={value}" for key, value in env.items())]
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def encode_spec(data: bytes) -> str:
    """base64url: only characters DeepSpeed's add_export leaves unquoted."""
    return base64.urlsafe_b64encode(data).decode()


def control_address(options: LaunchOptions) -> str:
    """The address the controller listens on, reachable from rank 0's node (the first host).

    ``--control-addr`` if given; else the local address of the route to that host (what the
    kernel would use to reach it), so that nothing listens on every interface.
    """
    if options.control_addr:
        return options.control_addr
    first = hostfile_hosts(options)[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((first, 9))  # UDP connect sends nothing; it only picks the route
            address: str = probe.getsockname()[0]
            return address
    except OSError as exc:
        raise BloomperfError(f"--hostfile: cannot find a route to {first}: {exc}") from None


# -- faults ------------------------------------------------------------------------------------


class NodeWatch:
    """Calls ``on_lost(reason)`` once if the group loses a node while it is running."""

    def __init__(
        self, runner: subprocess.Popen[bytes], hosts: list[str], on_lost: Callable[[str], None]
    ) -> None:
        self.runner = runner
        self.hosts = hosts
        self.on_lost = on_lost
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bloomperf-node-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(NODE_LOST_CHECK_S):
            reason = self.check()
            if reason and not self._stop.is_set():
                self.on_lost(reason)
                return

    def check(self) -> str | None:
        code = self.runner.poll()
        if code is not None:
            return f"the multi-node launcher exited (code {code}) while the group was running"
        connected = self.ssh_hosts()
        if connected is None:
            return None
        self.seen |= connected
        lost = [host for host in self.hosts if host in self.seen and host not in connected]
        if lost:
            return f"lost node {lost[0]}: its ssh connection closed while the group was running"
        return None

    def ssh_hosts(self) -> set[str] | None:
        """Hosts with a live pdsh ssh connection of this group (None when it cannot be read).

        Only pdsh's own ssh children count: DeepSpeed's runner first runs a short ``ssh HOST
        hostname`` check of its own, which ends by design."""
        try:
            children = psutil.Process(self.runner.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        hosts: set[str] = set()
        for child in children:
            try:
                if child.name() != "ssh" or child.status() == psutil.STATUS_ZOMBIE:
                    continue
                parent = child.parent()
                if parent is not None and parent.name().startswith("pdsh"):  # Debian: pdsh.bin
                    hosts |= set(child.cmdline()) & set(self.hosts)
            except psutil.Error:
                continue
        return hosts


def stop_runner(runner: subprocess.Popen[bytes], launcher: str) -> None:
    """Stop DeepSpeed's runner; ``cleanup_nodes`` then kills the group's ranks on every node.

    Under pdsh the runner is SIGKILLed, never SIGTERMed: its SIGTERM handler runs ``pkill -f
    '<python> -u -m deepspeed.launcher.launch'`` on every node, which kills every DeepSpeed
    launcher of that interpreter there, other jobs' included. mpirun and srun pass a SIGTERM
    to their own tasks only."""
    if runner.poll() is None:
        try:
            runner.send_signal(signal.SIGKILL if launcher == "pdsh" else signal.SIGTERM)
            runner.wait(timeout=RUNNER_STOP_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def hostfile_of(options: LaunchOptions) -> Path:
    if options.hostfile is None:
        raise BloomperfError("--hostfile: a multi-node group needs one")
    return options.hostfile


def hostfile_hosts(options: LaunchOptions) -> list[str]:
    return list(active_hosts(read_hostfile(hostfile_of(options)), options))


def on_every_node(
    options: LaunchOptions, remote: list[str], timeout: float, label: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``remote`` once on every active host: srun under Slurm, else pdsh over ssh (as
    DeepSpeed's PDSHRunner: PDSH_RCMD_TYPE=ssh, the port in PDSH_SSH_ARGS_APPEND). pdsh labels
    output lines ``host: ``; ``label`` asks srun for ``task: `` labels too."""
    hosts = hostfile_hosts(options)
    env = dict(os.environ)
    if options.launcher == "slurm":
        argv = ["srun", "--nodes", str(len(hosts)), "--ntasks-per-node", "1"]
        argv += ["--nodelist", ",".join(hosts), *(["--label"] if label else []), *remote]
    else:
        env["PDSH_RCMD_TYPE"] = "ssh"
        if options.ssh_port:
            append = env.get("PDSH_SSH_ARGS_APPEND", "")
            env["PDSH_SSH_ARGS_APPEND"] = f"{append} -p {options.ssh_port}"
        argv = ["pdsh", "-S", "-w", ",".join(hosts), *remote]
    try:
        return subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
    except FileNotFoundError:
        raise BloomperfError(f"--launcher: {argv[0]} is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")


def cleanup_nodes(options: LaunchOptions, group_id: str) -> None:
    """Run ``cleanup`` on every node of the group (best effort: teardown must not raise)."""
    remote = [sys.executable, "-m", "bloomperf.harness.multinode", "cleanup", group_id]
    try:
        on_every_node(options, remote, CLEANUP_TIMEOUT_S)
    except BloomperfError:
        pass


def kill_marked(group_id: str) -> list[int]:
    """SIGKILL every process here whose environment carries ``GROUP_ENV=group_id``."""
    marker = f"{GROUP_ENV}={group_id}".encode()
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except OSError:
            continue
    return killed


def run_cleanup(group_id: str) -> int:
    killed = kill_marked(group_id)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(running(pid) for pid in killed):
        time.sleep(0.1)  # a segment is removable only once its ranks have unmapped it
    removed = cleanup_shm()
    print(f"{socket.gethostname()}: killed {len(killed)}, removed {len(removed)} shm segments")
    return 0


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bloomperf.harness.multinode")
    sub = parser.add_subparsers(dest="command", required=True)
    cleanup = sub.add_parser(
        "cleanup", help="kill a group's leftovers on this node, clean /dev/shm"
    )
    cleanup.add_argument("group_id")
    args = parser.parse_args(argv)
    return run_cleanup(args.group_id)


if __name__ == "__main__":
    sys.exit(main())
