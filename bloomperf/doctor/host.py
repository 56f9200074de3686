"""The doctor's host checks: free /dev/shm, disk for the model cache, RAM for ranks × weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import psutil

from bloomperf.catalog.caches import build_in_progress, extensions_dir, stale_batons
from bloomperf.catalog.checkpoints import check_free_space, checkpoint_folder_name
from bloomperf.catalog.models import MODEL_SHAPES, check_layers
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB, MIB
from bloomperf.doctor.check import Check

# DeepSpeed's shared-memory all-reduce keeps one 66 MiB /dev/shm segment per rank (seen here);
# NCCL's intra-node transport needs /dev/shm as well: Docker's default 64 MiB is too small.
SHM_PER_RANK = 66 * MIB
SHM_COMFORT = 1 * GIB


def check_shm(ranks: int, shm: Path = Path("/dev/shm")) -> Check:
    if not shm.is_dir():
        return Check("shm", "fail", f"{shm} does not exist: DeepSpeed and NCCL need it")
    free = shutil.disk_usage(shm).free
    stale = list(shm.glob("deepspeed_allreduce_buffer_*"))
    note = f"; {len(stale)} DeepSpeed all-reduce buffers left there" if stale else ""
    needed = ranks * SHM_PER_RANK + 64 * MIB
    if free < needed:
        return Check(
            "shm",
            "fail",
            f"{shm} has {free / MIB:.0f} MiB free, {ranks} ranks need "
            f"about {needed / MIB:.0f} MiB (docker: --shm-size){note}",
        )
    if free < SHM_COMFORT:
        return Check(
            "shm",
            "warn",
            f"{shm} has {free / MIB:.0f} MiB free: NCCL may fail to "
            f"extend its segments (docker: --shm-size=1g){note}",
        )
    return Check("shm", "ok" if not stale else "warn", f"{free / GIB:.1f} GiB free in {shm}{note}")


def check_disk(model: str, layers: int | None, cache_dir: Path) -> Check:
    shape = MODEL_SHAPES.get(model)
    if shape is None:
        return Check("disk", "ok", f"{model}: an existing checkpoint, nothing to build")
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    folder = cache_dir / "models" / checkpoint_folder_name(shape, n_layer)
    if folder.is_dir():
        return Check("disk", "ok", f"{model} ({n_layer} layers) is already built in {folder}")
    parent = existing_parent(cache_dir)
    try:
        check_free_space(shape, n_layer, parent)
    except BloomperfError as exc:
        return Check("disk", "fail", str(exc))
    free = shutil.disk_usage(parent).free
    return Check(
        "disk",
        "ok",
        f"{free / 1e9:.0f} GB free in {parent}: enough to build {model} ({n_layer} layers)",
    )


def existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_ram(model: str, layers: int | None, ranks: int) -> Check:
    """Each DeepSpeed rank loading through from_pretrained holds the whole model in host RAM."""
    shape = MODEL_SHAPES.get(model)
    if shape is None:
        return Check("ram", "ok", f"{model}: size unknown before loading; not checked")
    weights = shape.parameters(check_layers(layers, shape.n_layer, shape.name)) * 2
    total = psutil.virtual_memory().total
    size = f"{weights / 1e9:.1f} GB" if weights >= 1e8 else f"{weights / 1e6:.1f} MB"
    need = f"{ranks} rank{'s' if ranks > 1 else ''} × {size} of 16-bit weights"
    if weights > total:
        return Check(
            "ram",
            "fail",
            f"one copy of {model} ({weights / 1e9:.0f} GB) exceeds the {total / 1e9:.0f} GB of RAM",
        )
    if ranks * weights > total:
        return Check(
            "ram",
            "warn",
            f"{need} exceed the {total / 1e9:.0f} GB of RAM: DeepSpeed "
            "groups that load the full model on every rank cannot run",
        )
    return Check("ram", "ok", f"{need} fit in {total / 1e9:.0f} GB of RAM")


def check_build_locks(folder: Path | None = None) -> Check:
    """A torch ``lock`` file in bloomperf's extensions folder while no bloomperf build runs was
    left by a killed build: torch's builder would wait on it forever (the next run removes it)."""
    folder = folder if folder is not None else extensions_dir()
    stale = [] if build_in_progress(folder) else stale_batons(folder)
    if not stale:
        return Check("build-locks", "ok", f"no stale DeepSpeed build lock in {folder}")
    return Check(
        "build-locks",
        "warn",
        f"stale build lock {stale[0]}"
        + (f" and {len(stale) - 1} more" if len(stale) > 1 else "")
        + " left by a killed build: DeepSpeed would wait on it; the next bloomperf run removes "
        "it (or delete it)",
    )
