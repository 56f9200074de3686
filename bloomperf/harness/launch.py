"""Worker process groups, seen from the controller: start, talk, time out, kill.

One group serves one (backend, dtype): a plain ``python -m bloomperf.harness.worker`` for one rank,
or DeepSpeed's launcher starting one worker per rank. The group runs in its own session so that a
timeout kills every process of it (launcher, ranks, their children) and nothing outlives the run.
The controller never imports torch for this and never holds a CUDA context.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from bloomperf.backends import backend_class
from bloomperf.catalog.caches import build_lock, extensions_dir, worker_caches
from bloomperf.catalog.devices import VisibleDevice, worker_environment
from bloomperf.catalog.failures import read_rank_reports, root_cause
from bloomperf.catalog.leftovers import owned_temp_folder
from bloomperf.config.backend import BackendOptions
from bloomperf.config.run import LaunchOptions, RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.progress import emit
from bloomperf.harness.dslaunch import cleanup_shm, shm_segments
from bloomperf.harness.orphans import CONTROLLER_ENV, controller_stamp, die_with_parent
from bloomperf.harness.protocol import (
    TOKEN_ENV,
    ConnectionClosed,
    MalformedMessage,
    MessageStream,
    WorkerSpec,
    new_token,
)
from bloomperf.harness.teardown import kill_tree, remove_folder, terminate_group
from bloomperf.harness.worker import SPEC_DATA_ENV, SPEC_ENV
from bloomperf.measure.memory import create_sampler
from bloomperf.measure.rank_peaks import ranks_reading
from bloomperf.measure.sampler import MemorySampler
from bloomperf.store.results import MemoryReading

LOG_TAIL_CHARS = 4000
# After a signal, the group's SIGTERM-to-SIGKILL grace: `timeout -k 10` SIGKILLs us soon after.
ABORT_GRACE_S = 2.0


@dataclass(frozen=True)
class GroupSpec:
    backend: str
    dtype: str
    checkpoint: Path
    device: str
    new_tokens: int
    world_size: int = 1
    options: BackendOptions = field(default_factory=BackendOptions)  # for the backend
    launch: LaunchOptions = field(default_factory=LaunchOptions)  # for starting the group
    memory_limit_bytes: int | None = None
    slowdown_percent: float | None = None
    load_timeout_s: float = RunConfig.load_timeout
    cell_timeout_s: float = RunConfig.cell_timeout
    log_dir: Path | None = None
    # Another interpreter and extra environment settings (``bloomperf ab``'s arms); None and
    # empty mean this controller's own interpreter and environment.
    python: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The GPUs the group runs on, by NVML index (bloomperf.catalog.devices); () on CPU.
    devices: tuple[VisibleDevice, ...] = ()

    @property
    def group(self) -> tuple[str, str]:
        return (self.backend, self.dtype)


class WorkerFailure(Exception):
    """A cell or load could not complete: ``outcome`` is oom, error or timeout."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@dataclass(frozen=True)
class LoadReport:
    load_time_s: float
    memory: MemoryReading | None
    details: dict[str, Any]


class WorkerGroup:
    """A started worker group with its memory sampler and control connection."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self.stream: MessageStream | None = None
        self.sampler: MemorySampler | None = None
        self.multinode = spec.launch.hostfile is not None and spec.world_size > 1
        self.token = ""
        self.lost: str | None = None  # why a multi-node group lost a node (NodeWatch)
        self.watch: Any = None
        self.group_id = ""  # a multi-node group's id, in every rank's environment
        self._workdir = owned_temp_folder("worker")
        self.failed = False
        self.awaiting = ""  # the event the controller waits for from the worker ("" idle)
        self._shm_before: set[str] = set()
        self.log_path = (spec.log_dir or self._workdir) / (
            f"worker-{spec.backend}-{spec.dtype}-{os.getpid()}-{time.monotonic_ns()}.log"
        )

    # -- start -----------------------------------------------------------------------------

    def start(self) -> LoadReport:
        """Launch the group and wait until rank 0 reports the model loaded; a group whose load
        may JIT-build DeepSpeed ops loads under the build lock (``bloomperf.catalog.caches``)."""
        if not backend_class(self.spec.backend).builds_ops:
            return self._start()
        folder = extensions_dir()
        try:
            with build_lock(folder, self.spec.load_timeout_s) as removed:
                for baton in removed:
                    emit(f"removed a stale build lock left by a killed build: {baton}")
                return self._start()
        except BloomperfError as exc:
            raise WorkerFailure("timeout", f"{exc}; the group was not started") from None

    def _start(self) -> LoadReport:
        host = "127.0.0.1"
        # Every group, local too: any local process can connect to the listener, and only the
        # group's rank 0 knows the token (from its environment) to send in its hello.
        self.token = new_token()
        if self.multinode:
            from bloomperf.harness.multinode import control_address

            host = control_address(self.spec.launch)
        listener = socket.create_server((host, 0))
        self._shm_before = shm_segments()
        try:
            control = f"{host}:{listener.getsockname()[1]}"
            self.process = self._launch(control)
            self.sampler = create_sampler(self.spec.device, self.process.pid, self.devices())
            self.sampler.start()
            if self.multinode:
                self._watch_nodes()
            self.stream = self._accept(listener, self.spec.load_timeout_s)
        finally:
            listener.close()
        hello = self._expect("hello", self.spec.load_timeout_s)
        if self.token and hello.get("token") != self.token:
            self.kill()
            raise WorkerFailure("error", "the control connection did not carry the group's token")
        loaded = self._expect("loaded", self.spec.load_timeout_s)
        return LoadReport(
            load_time_s=float(loaded["load_time_s"]),
            memory=self.phase_memory(loaded.get("ranks")),
            details=dict(loaded.get("details") or {}),
        )

    def _launch(self, control: str) -> subprocess.Popen[bytes]:
        spec = WorkerSpec(
            backend=self.spec.backend,
            dtype=self.spec.dtype,
            checkpoint=str(self.spec.checkpoint),
            device=self.spec.device,
            new_tokens=self.spec.new_tokens,
            control=control,
            options=self.spec.options,
            memory_limit_bytes=self.spec.memory_limit_bytes,
            slowdown_percent=self.spec.slowdown_percent,
        ).to_json()
        rank_env = {TOKEN_ENV: self.token} if self.token else {}
        if self.multinode:  # ranks on other nodes cannot read our temporary folder
            from bloomperf.harness.multinode import encode_spec

            rank_env[SPEC_DATA_ENV] = encode_spec(spec.encode())
        else:
            spec_file = self._workdir / "spec.json"
            spec_file.write_text(spec)
            rank_env[SPEC_ENV] = str(spec_file)
        if self.spec.device == "cpu":
            # One thread per rank by default: on a small shared CPU, spinning OpenMP pools turn
            # any other load into a many-fold slowdown (seen here: 17 vs 130 ms/token).
            threads = str(self.spec.launch.threads)
            rank_env["OMP_NUM_THREADS"] = rank_env["MKL_NUM_THREADS"] = threads
        rank_env.update(self.spec.env)  # an arm's own settings win: they are what is being compared
        argv, extra_env = self._command(rank_env)
        env = {**os.environ, **worker_caches(), **rank_env, **extra_env}
        if not self.multinode:  # a rank on another node cannot see this controller
            env[CONTROLLER_ENV] = controller_stamp()
        if self.multinode:
            from bloomperf.harness.multinode import GROUP_ENV

            self.group_id = extra_env[GROUP_ENV]
        if self.spec.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(self.spec.env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as a whole
                preexec_fn=die_with_parent,  # and SIGKILLed by the kernel if we are
            )

    def _command(self, rank_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return group_command(self.spec, rank_env, self._workdir)

    def _watch_nodes(self) -> None:
        from bloomperf.harness.multinode import NodeWatch, hostfile_hosts

        assert self.process is not None
        self.watch = NodeWatch(self.process, hostfile_hosts(self.spec.launch), self._node_lost)

    def _node_lost(self, reason: str) -> None:
        """From the watch thread: wake the controller, which is waiting on rank 0's socket."""
        self.lost = reason
        stream = self.stream
        if stream is not None:
            try:
                stream.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def devices(self) -> tuple[VisibleDevice, ...] | None:
        """The GPUs to sample: the group's own (None: those visible to the controller)."""
        return self.spec.devices if self.spec.device == "cuda" and self.spec.devices else None

    def _accept(self, listener: socket.socket, timeout: float) -> MessageStream:
        deadline = time.monotonic() + timeout
        listener.settimeout(0.2)
        while True:
            try:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return MessageStream(conn)
            except TimeoutError:
                pass
            self._raise_if_exited()
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerFailure("timeout", f"worker did not start within {timeout:g} s")

    # -- talk ------------------------------------------------------------------------------

    def request(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        assert self.stream is not None
        try:
            self.stream.send(message)
        except ConnectionClosed:
            self._raise_died()
        return self._expect(expect, self.spec.cell_timeout_s)

    def _expect(self, event: str, timeout: float) -> dict[str, Any]:
        assert self.stream is not None
        self.awaiting = event
        try:
            reply = self.stream.receive(timeout)
        except TimeoutError:
            self.kill()
            raise self._failure(
                "timeout", f"no answer from the worker within {timeout:g} s; its group was killed"
            ) from None
        except ConnectionClosed:
            self._raise_died()
        except MalformedMessage as exc:
            # Nothing after a broken line can be trusted to belong to this cell: end the group.
            self.kill()
            raise self._failure(
                "error", f"protocol: malformed message from the worker: {exc}"
            ) from None
        self.awaiting = ""
        if reply.get("event") == "failed":
            raise self._failure("error", "", reply)
        if reply.get("event") != event:
            raise WorkerFailure("error", f"protocol: expected {event!r}, got {reply!r:.200}")
        return reply

    def _raise_if_exited(self) -> None:
        if self.lost or (self.process is not None and self.process.poll() is not None):
            self._raise_died()

    def _raise_died(self) -> NoReturn:
        if self.lost:
            self.failed = True
            self.kill()
            raise WorkerFailure("error", f"{self.lost}; log tail:\n{self.log_tail()}")
        code = self.process.wait(timeout=30) if self.process is not None else None
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        raise self._failure("error", f"worker died ({how}); log tail:\n{self.log_tail()}")

    def _failure(
        self, outcome: str, message: str, rank0: dict[str, Any] | None = None
    ) -> WorkerFailure:
        """The group's failure, told by the rank that caused it: rank 0's report, or a report
        another rank left in the group's folder before it exited (an OOM on rank 1 ends with
        rank 0 killed or failing in a collective: the cause is rank 1's)."""
        self.failed = True  # keep its folder: the cell's message names the log in it
        report = root_cause([*([rank0] if rank0 else []), *read_rank_reports(self._workdir)])
        if report is None:
            return WorkerFailure(outcome, message)
        detail = str(report.get("message", ""))
        if report.get("outcome") == "error":
            detail = f"{detail}\n{report.get('traceback', '')}".strip()
        return WorkerFailure(str(report.get("outcome", "error")), detail)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def mark_memory(self) -> MemoryReading | None:
        return self.sampler.mark() if self.sampler is not None else None

    def phase_memory(self, ranks: list[dict[str, Any]] | None) -> MemoryReading | None:
        """A phase's memory: this node's sampler, or, for a multi-node group, what each rank
        reported of itself (no sampler here sees ranks that ssh, mpirun or srun started)."""
        local = self.mark_memory()
        if self.multinode and ranks:
            return ranks_reading(ranks)
        return local

    # -- stop ------------------------------------------------------------------------------

    def close(self) -> None:
        """Ask the group to exit, then make sure it did."""
        if self.watch is not None:
            self.watch.stop()  # the launcher exits now: no lost node
        if self.awaiting:  # an exception (a signal) left a request unanswered: the worker is
            self.abort()  # busy and would read "close" only once done; stop it now instead
            return
        if self.stream is not None and self.process is not None and self.process.poll() is None:
            try:
                self.stream.send({"op": "close"})
                self.process.wait(timeout=30)
            except (ConnectionClosed, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.remove_workdir()

    def abort(self) -> None:
        """Stop now (a signal, an unanswered request): never wait for a busy worker."""
        self.kill(grace_s=ABORT_GRACE_S)
        self.remove_workdir()

    def remove_workdir(self) -> None:
        """The group's temporary folder goes; a failed group's log stays where its cell's
        message names it (beside the results, or in this folder when the run has none)."""
        remove_folder(self._workdir, keep=self.log_path if self.failed else None)

    def kill(self, grace_s: float = 0.0) -> None:
        """Kill every process of the group (idempotent) and release what it held; with
        ``grace_s``, SIGTERM it first and SIGKILL what is left after that long."""
        if self.watch is not None:
            self.watch.stop()
        if self.multinode and self.process is not None:
            from bloomperf.harness.multinode import stop_runner

            stop_runner(self.process, self.spec.launch.launcher)
        if self.process is not None:
            if grace_s:
                terminate_group(self.process, grace_s)
            kill_tree(self.process)
        if self.multinode and self.group_id:
            from bloomperf.harness.multinode import cleanup_nodes

            cleanup_nodes(self.spec.launch, self.group_id)
            self.group_id = ""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.sampler is not None:
            self.sampler.stop()
        # Ranks unlink their DeepSpeed all-reduce segments once every peer mapped them; a rank
        # killed before that leaves one: remove what appeared since the start and nobody maps.
        if shm_segments() - self._shm_before:
            cleanup_shm(self._shm_before)


def group_command(
    spec: GroupSpec, rank_env: dict[str, str] | None = None, workdir: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that start ``spec``'s group on exactly its GPUs (also
    shown by ``run --dry-run``).

    A plain worker gets CUDA_VISIBLE_DEVICES naming its GPUs; a rank group goes through
    DeepSpeed's launcher with ``--include localhost:<ids>`` (``bloomperf.harness.dslaunch``), or
    through its multinode runner under a hostfile. ``rank_env``: what every rank needs; ``workdir``
    holds a multi-node group's .deepspeed_env.
    """
    python = spec.python or sys.executable
    on_gpus = spec.device == "cuda" and bool(spec.devices)
    if spec.world_size == 1:
        return [python, "-m", "bloomperf.harness.worker"], (
            worker_environment(spec.devices) if on_gpus else {}
        )
    from bloomperf.harness.dslaunch import rank_group_command

    if not on_gpus or spec.launch.hostfile is not None:
        return rank_group_command(
            spec.world_size, spec.launch, python=python, rank_env=rank_env, workdir=workdir
        )
    mig = [d.mig_uuid for d in spec.devices if d.mig_uuid]
    if mig:
        raise BloomperfError(
            f"CUDA_VISIBLE_DEVICES: DeepSpeed's launcher selects GPUs by index and cannot "
            f"start ranks on the MIG instance {mig[0]}; run {spec.backend} on whole GPUs"
        )
    gpus = [d.index for d in spec.devices]
    return rank_group_command(
        spec.world_size, spec.launch, python, gpus=gpus, rank_env=rank_env, workdir=workdir
    )
