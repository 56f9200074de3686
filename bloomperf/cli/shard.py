"""`bloomperf shard --tp N`: write a tensor-parallel pre-sharded checkpoint.

What the blog's ``microsoft/bloom-deepspeed-inference-fp16`` is: the model split for TP=N once,
so that each rank later reads only its own files (a 1-minute instead of a 10-minute load for
BLOOM-176B). N ranks run ``deepspeed.init_inference(save_mp_checkpoint_path=OUT)`` through the
DeepSpeed launcher; a ``bloomperf-shard.json`` marker records TP degree, dtype and path
(auto-TP or fused kernels: their files differ), and the ds-* backends load the folder with the
``sharded=OUT`` option.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bloomperf.backends.ds_inference import DeepSpeedAutoTPBackend, DeepSpeedInferenceBackend
from bloomperf.catalog.dtypes import DTYPES
from bloomperf.cli.arguments import add_out_argument, add_run_option
from bloomperf.config.backend import BackendOptions
from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.core.paths import real_path

SPEC_ENV = "BLOOMPERF_SHARD_SPEC"


@dataclass(frozen=True)
class ShardSpec:
    """What every shard rank is told (as JSON, in ``SPEC_ENV``)."""

    backend: str
    dtype: str
    device: str
    checkpoint: str
    out: str  # the folder DeepSpeed saves the shards in

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ShardSpec:
        return cls(**json.loads(text))


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser("shard", help="write a TP pre-sharded DeepSpeed checkpoint")
    add_run_option(parser, "tp", required=True, help="tensor-parallel degree")
    add_run_option(
        parser, "model", default="tiny", help="registry shape or checkpoint folder [tiny]"
    )
    add_out_argument(parser, "folder to write")
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="dtype of the shards [fp16 on cuda, as the blog; bf16 on cpu, which DeepSpeed's "
        "CPU accelerator always accepts]",
    )
    parser.add_argument(
        "--backend",
        default=DeepSpeedAutoTPBackend.name,
        choices=(DeepSpeedAutoTPBackend.name, DeepSpeedInferenceBackend.name),
        help="whose layout: auto-TP, or the fused kernels' (GPU, reference profile) "
        f"[{DeepSpeedAutoTPBackend.name}]",
    )
    parser.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="where the ranks run: GPUs (as the blog; each rank keeps only its share), or CPU "
        "for tests [cuda]",
    )
    parser.set_defaults(func=run_shard)


DEFAULT_DTYPE = {"cuda": "fp16", "cpu": "bf16"}


def refuse_a_dtype_the_device_lacks(dtype: str, device: str) -> None:
    """On CPU, DeepSpeed's own accelerator says which dtypes ``init_inference`` accepts
    (fp16 only where oneDNN has it): asked now, not after minutes of starting ranks."""
    if device != "cpu":
        return
    import torch
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    from bloomperf.catalog.dtypes import load_torch_dtype

    supported = CPU_Accelerator().supported_dtypes()
    if dtype != "int8" and load_torch_dtype(dtype) not in supported:
        names = ", ".join(str(t).removeprefix("torch.") for t in supported if t != torch.float64)
        raise BloomperfError(
            f"--dtype {dtype}: DeepSpeed's CPU accelerator refuses it here (supported: {names})"
        )


def run_shard(args: argparse.Namespace) -> int:
    from bloomperf.backends import backend_class
    from bloomperf.catalog.checkpoints import resolve_model
    from bloomperf.harness.dslaunch import cleanup_shm, shm_segments

    args.dtype = args.dtype or DEFAULT_DTYPE[args.device]
    refuse_a_dtype_the_device_lacks(args.dtype, args.device)
    if args.tp == 1 and args.backend == DeepSpeedAutoTPBackend.name:
        # inference/engine.py applies no auto-TP policy at TP=1, so nothing would be saved.
        raise BloomperfError(
            "--tp 1: DeepSpeed's auto-TP saves no shards at TP=1; load the checkpoint itself"
        )
    reason = backend_class(args.backend).unmet_requirement(
        args.dtype, args.device, BackendOptions()
    )
    if reason:
        raise BloomperfError(f"--backend {args.backend}: {reason}")
    checkpoint = resolve_model(args.model).path
    reason = backend_class(args.backend).host_memory_reason(
        checkpoint, args.tp, args.dtype, BackendOptions()
    )
    if reason:
        raise BloomperfError(f"--tp {args.tp}: {reason}")
    spec = ShardSpec(
        args.backend, args.dtype, args.device, str(checkpoint), str(real_path(args.out))
    )
    gpus = visible_gpus() if args.device == "cuda" else None
    argv, extra_env = shard_command(args.tp, gpus)
    before = shm_segments()
    env = {**os.environ, **extra_env, SPEC_ENV: spec.to_json()}
    if args.device == "cpu":
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    try:
        code = subprocess.run(argv, env=env, check=False).returncode
    finally:
        cleanup_shm(before)
    if code != 0:
        raise BloomperfError(
            f"--out-dir {args.out}: sharding failed (exit {code}, see output above)"
        )
    print(f"wrote TP={args.tp} {args.backend} shards to {args.out}")
    return 0


def visible_gpus() -> tuple[int, ...]:
    """The NVML indices of the GPUs this process may use (CUDA_VISIBLE_DEVICES honoured)."""
    from bloomperf.catalog.topology import detect_topology

    topology = detect_topology()
    if not topology.gpus:
        raise BloomperfError(f"--device cuda: no GPU here ({topology.nvml_reason})")
    return tuple(g.index for g in topology.gpus)


def shard_command(tp: int, gpus: Sequence[int] | None) -> tuple[list[str], dict[str, str]]:
    """The shard ranks' command line: one plain process at TP=1; else DeepSpeed's launcher,
    on GPUs with ``--include localhost:<the first tp visible GPUs>`` (``--num_gpus`` would drop
    CUDA_VISIBLE_DEVICES and take GPUs 0..tp-1, harness/dslaunch.py), on CPU with ``--num_gpus``.
    """
    from bloomperf.catalog.caches import worker_caches
    from bloomperf.catalog.devices import VisibleDevice, worker_environment
    from bloomperf.harness.dslaunch import rank_group_command

    if tp == 1:
        # One plain process: on GPUs it gets the first visible one as a run's worker does, by
        # NVML index in PCI order (CUDA's default order, FASTEST_FIRST, may number it otherwise).
        env = {} if not gpus else worker_environment([VisibleDevice(gpus[0])])
        # The caches every rank group gets (rank_group_command): DeepSpeed builds its op into
        # bloomperf's extensions folder, not into ~/.cache beside it.
        return [sys.executable, "-m", "bloomperf.cli.shard"], {**worker_caches(), **env}
    if gpus is not None and len(gpus) < tp:
        raise BloomperfError(f"--tp {tp}: only {len(gpus)} GPUs are visible here")
    chosen = None if gpus is None else list(gpus)[:tp]
    return rank_group_command(tp, LaunchOptions(), module="bloomperf.cli.shard", gpus=chosen)


def shard_rank(spec: ShardSpec) -> None:
    """One rank: load the model by the backend's own path, the blog's meta-device one (each rank
    reads the files one at a time and keeps its share, never the whole model), and let DeepSpeed
    save this rank's part."""
    import torch.distributed as dist

    from bloomperf.backends import backend_class
    from bloomperf.backends.base import LoadRequest
    from bloomperf.backends.ds_inference import SHARD_MARKER, TensorParallelBackend

    backend = backend_class(spec.backend)()
    assert isinstance(backend, TensorParallelBackend)
    request = LoadRequest(
        checkpoint=Path(spec.checkpoint),
        dtype=spec.dtype,
        device=spec.device,
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )
    backend.prepare(request)
    backend.load_weights(request, save_mp_checkpoint_path=spec.out)
    dist.barrier()
    if dist.get_rank() == 0:
        marker = {
            "tp": dist.get_world_size(),
            "dtype": spec.dtype,
            "kernel_inject": backend.kernel_inject,
            "source": spec.checkpoint,
        }
        (Path(spec.out) / SHARD_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    shard_rank(ShardSpec.from_json(os.environ[SPEC_ENV]))
