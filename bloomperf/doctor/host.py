"""The doctor's host checks: free /dev/shm, disk for the model cache, RAM for ranks × weights."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from bloomperf.catalog.caches import (
    baton_builders,
    build_in_progress,
    extensions_dir,
    stale_batons,
)
from bloomperf.catalog.checkpoints import check_free_space, checkpoint_folder_name
from bloomperf.catalog.leftovers import dead_run_folders
from bloomperf.catalog.manifest import checkpoint_problem
from bloomperf.catalog.models import MODEL_SHAPES, check_layers
from bloomperf.catalog.topology import host_ram
from bloomperf.catalog.weights import embedding_bytes, layer_bytes
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB, MIB
from bloomperf.core.jsonfile import dead_temps
from bloomperf.doctor.check import Check

GB = 1e9

# DeepSpeed's shared-memory all-reduce keeps one 66 MiB /dev/shm segment per rank (seen here);
# NCCL's intra-node transport needs /dev/shm as well: Docker's default 64 MiB is too small.
SHM_PER_RANK = 66 * MIB
SHM_COMFORT = 1 * GIB


@dataclass(frozen=True)
class HostFacts:
    """The host figures the disk and RAM checks compare against: this machine's, or another
    machine's documented ones (benchmarks/rehearse.py judges the H200's from its facts file)."""

    ram_bytes: int
    disk_free_bytes: int | None = None  # None: measure the cache folder's file system
    ram_doubt: str = ""  # why the RAM figure may be far too low ("" when it is not in doubt)
    ram_source: str = "MemTotal"  # where ram_bytes came from (catalog.topology.HostRam)

    @classmethod
    def here(cls, given_ram: int | None = None) -> HostFacts:
        """This machine; ``given_ram``: its documented RAM (``--host-ram``) over MemTotal."""
        ram = host_ram(given_ram)
        return cls(ram_bytes=ram.bytes, ram_doubt=ram.doubt, ram_source=ram.source)


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


def check_disk(model: str, layers: int | None, cache_dir: Path, free: int | None = None) -> Check:
    shape = MODEL_SHAPES.get(model)
    if shape is None:
        return Check("disk", "ok", f"{model}: an existing checkpoint, nothing to build")
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    folder = cache_dir / "models" / checkpoint_folder_name(shape, n_layer)
    if folder.exists() or folder.is_symlink():
        problem = checkpoint_problem(folder, shape, n_layer)
        if problem is None:
            return Check("disk", "ok", f"{model} ({n_layer} layers) is already built in {folder}")
        return Check("disk", "warn", f"{folder}: {problem}; the next run rebuilds it")
    parent = existing_parent(cache_dir)
    free = free if free is not None else shutil.disk_usage(parent).free
    try:
        check_free_space(shape, n_layer, parent, free)
    except BloomperfError as exc:
        return Check("disk", "fail", str(exc))
    return Check(
        "disk",
        "ok",
        f"{free / 1e9:.0f} GB free in {parent}: enough to build {model} ({n_layer} layers)",
    )


def existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_ram(model: str, layers: int | None, ranks: int, total: int, doubt: str = "") -> Check:
    """RAM for what the loading paths really hold: accelerate (device map) and the meta-device
    loads (ds-inference, ds-autotp across ranks) read one weight file at a time, never a whole
    copy; from_pretrained (ds-autotp at TP=1, ``--load hf``) holds one copy per rank. A figure
    in ``doubt`` (a Firecracker guest's MemTotal grows with use) only warns."""
    shape = MODEL_SHAPES.get(model)
    if shape is None:
        return Check("ram", "ok", f"{model}: size unknown before loading; not checked")
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    weights = shape.parameters(n_layer) * 2
    piece = max(embedding_bytes(shape, "bf16"), layer_bytes(shape, "bf16"))
    ram = f"the {total / GB:.0f} GB of RAM" + (f" ({doubt})" if doubt else "")
    size = f"{weights / GB:.1f} GB" if weights >= 1e8 else f"{weights / 1e6:.1f} MB"
    need = f"{ranks} rank{'s' if ranks > 1 else ''} × {size} of 16-bit weights"
    if piece > total:
        return Check(
            "ram",
            "warn" if doubt else "fail",
            f"even one weight file of {model} ({piece / GB:.1f} GB) exceeds {ram}",
        )
    if weights > total:
        return Check(
            "ram",
            "warn",
            f"one copy of {model} ({weights / GB:.0f} GB) exceeds {ram}: from_pretrained loads "
            "(ds-autotp at TP=1, --load hf) cannot run; accelerate and meta-device loads can",
        )
    if ranks * weights > total:
        return Check(
            "ram",
            "warn",
            f"{need} exceed {ram}: DeepSpeed groups that load the full model on every rank "
            "cannot run",
        )
    return Check("ram", "warn" if doubt else "ok", f"{need} fit in {ram}")


def check_host_ram(model: str, layers: int | None, ranks: int, host: HostFacts) -> Check:
    """check_ram on the host's figure, saying where the figure came from."""
    check = check_ram(model, layers, ranks, host.ram_bytes, host.ram_doubt)
    return Check(check.name, check.status, f"{check.reason} (RAM from {host.ram_source})")


def live_builds(batons: list[Path]) -> dict[Path, list[int]]:
    """The batons a live process is building under (catalog.caches.baton_builders)."""
    return {b: pids for b in batons for pids in [baton_builders(b)] if pids}


def check_build_locks(folder: Path | None = None) -> Check:
    """A torch ``lock`` file in bloomperf's extensions folder while no bloomperf build runs was
    left by a killed build: torch's builder would wait on it forever (the next run removes it)."""
    folder = folder if folder is not None else extensions_dir()
    batons = [] if build_in_progress(folder) else stale_batons(folder)
    live = live_builds(batons)
    stale = [b for b in batons if b not in live]
    if live and not stale:
        baton, pids = next(iter(live.items()))
        return Check(
            "build-locks",
            "ok",
            f"a build is running: {baton} is held by PID {pids[0]} building there",
        )
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


def check_leftovers(tmp: Path | None = None, results: Path = Path("results")) -> Check:
    """Temporary folders (``$TMPDIR``) and files (beside the default results) of killed runs,
    which the next run removes: a few are harmless, a disk-offload folder can be large."""
    found = [*dead_run_folders(tmp), *dead_temps(results)]
    if not found:
        return Check("leftovers", "ok", "no temporary file or folder of a killed run")
    more = f" and {len(found) - 1} more" if len(found) > 1 else ""
    return Check(
        "leftovers",
        "warn",
        f"{found[0]}{more} left by killed runs; the next bloomperf run removes them",
    )
