"""The worker process: loads one (backend, dtype) once, then serves cells on command.

Started as ``python -m bloomperf.harness.worker`` (once per rank; by DeepSpeed's launcher for rank
groups). Every rank loads and generates; rank 0 talks to the controller and relays each command
to the other ranks, so all ranks call ``generate`` in lock-step as tensor/ZeRO parallelism needs.
Timing happens here, next to the device, between two synchronisations; nothing else runs inside
the timed region.
"""

from __future__ import annotations

import base64
import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from bloomperf.catalog.failures import failure_report, write_rank_report
from bloomperf.catalog.workload import generate_kwargs
from bloomperf.core.metrics import Cycle, Meter, metrics
from bloomperf.harness.orphans import watch_controller
from bloomperf.harness.protocol import (
    OP_BEGIN,
    OP_CLOSE,
    OP_CODES,
    OP_CYCLE,
    OP_END,
    TOKEN_ENV,
    ConnectionClosed,
    MessageStream,
    WorkerSpec,
)
from bloomperf.harness.rankenv import adopt_launcher_rank, node_name, report_identity
from bloomperf.measure.rank_peaks import gather_peaks, own_peak, reset_own_peak

SPEC_ENV = "BLOOMPERF_WORKER_SPEC"
LIMITED_RANK_ENV = "BLOOMPERF_TEST_LIMITED_RANK"
# The spec itself (base64url JSON) instead of a file: ranks on other nodes cannot read the
# controller's temporary folder.
SPEC_DATA_ENV = "BLOOMPERF_WORKER_SPEC_DATA"


def limit_memory(limit_bytes: int | None, rank: int) -> None:
    """Cap the address space, so that running out of memory is an allocator failure we can catch
    (used on CPU, where the kernel's OOM killer would otherwise kill the whole worker).

    ``LIMITED_RANK_ENV`` (a test hook) caps only that rank, so a test can make one rank of a
    group run out of memory for real while the others do not.
    """
    only = os.environ.get(LIMITED_RANK_ENV)
    if limit_bytes and (only is None or int(only) == rank):
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


class Worker:
    def __init__(self, spec: WorkerSpec) -> None:
        from bloomperf.backends import backend_class
        from bloomperf.backends.base import LoadRequest

        self.spec = spec
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.backend = backend_class(spec.backend)()
        self.request = LoadRequest(
            checkpoint=Path(spec.checkpoint),
            dtype=spec.dtype,
            device=spec.device,
            rank=self.rank,
            world_size=self.world_size,
            options=spec.options,
        )
        self.generate_kwargs = generate_kwargs(spec.new_tokens)
        self.new_tokens = spec.new_tokens
        self.inputs: dict[str, Any] = {}
        self.tokenizer: Any = None
        self.loads = 0
        self.load_ranks: list[dict[str, Any]] = []
        self.tokens_checked = False
        self.batch_size = 0
        self.meters: list[tuple[str, Meter]] = []

    # -- load ------------------------------------------------------------------------------

    def load(self) -> float:
        """Load the model; the returned seconds cover only the backend's load, not imports."""
        from transformers import AutoTokenizer

        self.loads += (
            1  # reported with each cell: "loaded once" is counted here, not by group starts
        )
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.request.checkpoint))
        self.backend.prepare(self.request)
        self.backend.synchronize()
        start = time.perf_counter()
        self.backend.load(self.request)
        self.backend.synchronize()
        seconds = time.perf_counter() - start
        self.load_ranks = self.rank_peaks()
        slowdown = self.spec.slowdown_percent
        if slowdown:
            from bloomperf.measure.slowdown import install_slowdown

            install_slowdown(self.backend.model, slowdown)
        return seconds

    # -- cells -----------------------------------------------------------------------------

    def begin(self, batch_size: int) -> None:
        """Prepare a cell: free what the last one left, check the output, then reset the peaks."""
        import gc

        import torch

        from bloomperf.catalog.workload import build_inputs
        from bloomperf.harness.output_check import check_logits

        self.inputs = {}
        gc.collect()  # the previous cell's tensors, before the allocator gives their memory back
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.empty_cache()
        self.inputs = build_inputs(self.tokenizer, batch_size, self.backend.input_device)
        rows = int(self.inputs["input_ids"].shape[0])
        if rows != batch_size:  # ms/token divides by the batch: it must really be in the inputs
            raise RuntimeError(f"the inputs have {rows} rows instead of batch size {batch_size}")
        # One forward pass, outside any timed cycle (every rank takes part, as in generate).
        mask = self.inputs["attention_mask"]
        check_logits(self.backend.next_token_logits(self.inputs["input_ids"], mask), mask)
        self.tokens_checked = False
        self.batch_size = batch_size
        # One meter per metric that measures something of its own (core.metrics), per cell.
        self.meters = [(m.name, m.measure()) for m in metrics() if m.measure is not None]
        # The cell's phase starts here, as the controller's sampler marks it once begin returns:
        # neither the previous cell nor the check above counts in the peaks ranks report.
        reset_own_peak()
        if cuda:
            for index in self.backend.cuda_devices():
                torch.cuda.reset_peak_memory_stats(index)

    def cycle(self) -> dict[str, Any]:
        """One synchronised ``generate`` with a mark at every step boundary (the step timer
        takes the cycle's start mark too, so the steps add up to the cycle); checks that
        exactly N tokens were produced, and on the cell's first cycle (its warm-up) that they are
        not all one id, after the clock stopped."""
        from bloomperf.measure.steptimer import StepTimer

        timer = StepTimer(self.backend.synchronize)
        for _, meter in self.meters:  # before the timer starts: its cost is not timed
            meter.start()
        start = timer.start()
        output = self.backend.generate(
            self.inputs["input_ids"],
            self.inputs["attention_mask"],
            {**self.generate_kwargs, "stopping_criteria": timer.criteria()},
        )
        self.backend.synchronize()
        seconds = time.perf_counter() - start
        produced = output.shape[-1] - self.inputs["input_ids"].shape[-1]
        if produced != self.new_tokens:
            raise RuntimeError(f"generate produced {produced} tokens instead of {self.new_tokens}")
        if not self.tokens_checked:
            from bloomperf.harness.output_check import check_new_tokens

            check_new_tokens(output[:, -self.new_tokens :])
            self.tokens_checked = True
        step_ms = timer.step_ms()
        cycle = Cycle(self.batch_size, self.new_tokens, seconds, tuple(step_ms))
        figures = {name: meter.stop(cycle) for name, meter in self.meters}
        return {"seconds": seconds, "step_ms": step_ms, "figures": figures}

    def torch_peaks(self) -> dict[str, int | None]:
        """torch's peaks since ``begin``, summed over the rank's devices (each device's own
        peak: an upper bound of what they held at once, as NVML's per-device sum is)."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            devices = self.backend.cuda_devices()
            return {
                "torch_allocated_bytes": sum(
                    int(torch.cuda.max_memory_allocated(i)) for i in devices
                ),
                "torch_reserved_bytes": sum(
                    int(torch.cuda.max_memory_reserved(i)) for i in devices
                ),
            }
        return {"torch_allocated_bytes": None, "torch_reserved_bytes": None}

    def rank_peaks(self) -> list[dict[str, Any]]:
        """Every rank's own peak of the phase that just ended (a collective: every rank calls
        it at the same point). The controller reads them for ranks its sampler cannot see."""
        own = own_peak(self.rank, node_name(), self.backend.cuda_devices())
        return gather_peaks(own, self.world_size)

    def act(self, op: int, batch_size: int) -> dict[str, Any]:
        if op == OP_BEGIN:
            self.begin(batch_size)
            return {"event": "ready", "backend_loads": self.loads}
        if op == OP_CYCLE:
            return {"event": "sample", **self.cycle()}
        if op == OP_END:
            return {"event": "ended", **self.torch_peaks(), "ranks": self.rank_peaks()}
        raise ValueError(f"unknown op {op}")


def relay(worker: Worker, op: int, batch_size: int) -> tuple[int, int]:
    """Rank 0 sends (op, batch) to the other ranks; they receive it. Returns what to do."""
    if worker.world_size == 1:
        return op, batch_size
    import torch
    import torch.distributed as dist

    device = worker.backend.input_device if dist.get_backend() == "nccl" else "cpu"
    message = torch.tensor([op, batch_size], dtype=torch.int64, device=device)
    dist.broadcast(message, src=0)
    return int(message[0].item()), int(message[1].item())


def serve_rank0(worker: Worker, stream: MessageStream) -> bool:
    """Answer the controller until it closes the group; False once a command failed."""
    while True:
        try:
            message = stream.receive(timeout=None)
        except ConnectionClosed:
            message = {"op": "close"}  # the controller is gone: end the group as it would
        op = OP_CODES[message["op"]]
        batch_size = int(message.get("batch_size", 0))
        relay(worker, op, batch_size)
        if op == OP_CLOSE:
            return True
        try:
            reply = worker.act(op, batch_size)
        except Exception as exc:
            stream.send(failure_report(exc, worker.rank, worker.world_size))
            return False  # a failed worker is not trusted again: the controller starts a new one
        stream.send(reply)


def serve_other_rank(worker: Worker) -> None:
    while True:
        op, batch_size = relay(worker, OP_CLOSE, 0)
        if op == OP_CLOSE:
            return
        worker.act(op, batch_size)


def report_and_exit(exc: BaseException, rank: int, world_size: int) -> NoReturn:
    """A rank other than 0: leave the report for the controller, then exit at once.

    The report is written before the exit, so it exists before the launcher (which reacts to the
    exit) kills the group. ``os._exit``: a normal exit could hang in a communicator's
    destructor while the other ranks wait in a collective.
    """
    report = failure_report(exc, rank, world_size)
    if os.environ.get(SPEC_ENV):  # a rank on another node has only the log (its spec is inline)
        write_rank_report(Path(os.environ[SPEC_ENV]).parent, report)
    print(report["traceback"], file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def connect(address: str) -> MessageStream:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return MessageStream(sock)


def read_spec() -> WorkerSpec:
    if os.environ.get(SPEC_DATA_ENV):
        return WorkerSpec.from_json(base64.urlsafe_b64decode(os.environ[SPEC_DATA_ENV]))
    return WorkerSpec.from_json(Path(os.environ[SPEC_ENV]).read_text())


def main() -> int:
    watch_controller()  # die with the controller, even a SIGKILLed one (harness/orphans)
    launcher = adopt_launcher_rank()
    spec = read_spec()
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    limit_memory(spec.memory_limit_bytes, rank)
    if world_size > 1:
        report_identity(launcher)
    if rank != 0:
        try:
            worker = Worker(spec)
            worker.load()
            serve_other_rank(worker)
        except Exception as exc:
            report_and_exit(exc, rank, world_size)
        worker.backend.close()
        return 0
    stream = connect(spec.control)
    stream.send(
        {
            "event": "hello",
            "pid": os.getpid(),
            "world_size": str(world_size),
            "token": os.environ.get(TOKEN_ENV, ""),
        }
    )
    try:
        worker = Worker(spec)
        load_time = worker.load()
    except Exception as exc:
        stream.send(failure_report(exc, rank, world_size))
        return 1
    stream.send(
        {
            "event": "loaded",
            "load_time_s": load_time,
            "details": worker.backend.details(),
            "ranks": worker.load_ranks,
        }
    )
    served = serve_rank0(worker, stream)
    stream.close()
    if not served:
        return 1  # the controller kills the group; other ranks may be waiting in a collective
    worker.backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
