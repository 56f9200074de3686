"""What DeepSpeed-Inference's meta-device loader reads, written from bloomperf's checkpoints.

The blog's path builds BLOOM on the meta device and hands ``init_inference`` a checkpoints JSON
(``{"type": "BLOOM", "checkpoints": [...], "version": 1.0}``); each rank then reads the files one
by one and keeps its own share. DeepSpeed 0.19.8 reads those files in two ways
(``module_inject/replace_module.py``, ``replace_transformer_layer``):

- kernel injection: ``torch.load`` only (no safetensors);
- auto-TP: ``torch.load`` or safetensors, but it looks tensors up under BLOOM's original names,
  without ``transformer.`` (``skip_level_0_prefix``), which bloomperf's safetensors have.

So bloomperf writes, once per checkpoint, a torch-pickle copy of each weight file under BLOOM's
original names (as in ``bigscience/bloom``) in ``<checkpoint>/deepspeed/``, with the JSON
beside it. Ranks of a group take a file lock: the first writes, the others wait and reuse it.
Peak memory while writing: one weight file. The tied ``lm_head`` is not written: DeepSpeed's
``set_lm_head`` points a still-meta ``lm_head`` at the loaded embedding.

Also here: what each load path costs in host memory, to skip a configuration that would swap.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB
from bloomperf.core.jsonfile import write_json_atomic

VIEW_DIR = "deepspeed"
CHECKPOINTS_JSON = "checkpoints.json"
PREFIX = "transformer."


def weight_files(checkpoint: Path) -> list[Path]:
    """The checkpoint's weight files, safetensors first (what bloomperf writes), else pickles."""
    files = sorted(checkpoint.glob("*.safetensors")) or sorted(checkpoint.glob("*.bin"))
    if not files:
        raise BloomperfError(f"{checkpoint}: no *.safetensors or *.bin weight files")
    return files


def fingerprint(files: list[Path]) -> dict[str, int]:
    """Name -> size of the source files: a changed checkpoint gets a fresh copy."""
    return {path.name: path.stat().st_size for path in files}


def checkpoints_json(checkpoint: Path) -> tuple[Path, float]:
    """The checkpoints JSON for ``init_inference(checkpoint=...)`` and the seconds spent writing
    DeepSpeed's copy (0.0 when a complete copy was already there)."""
    view = checkpoint / VIEW_DIR
    sources = weight_files(checkpoint)
    try:
        view.mkdir(exist_ok=True)
        # The lock is the folder itself: no lock file to leave behind.
        folder = os.open(view, os.O_RDONLY)
    except OSError as exc:
        raise BloomperfError(
            f"{view}: cannot write DeepSpeed's copy of the checkpoint ({exc}); "
            "use --load hf or a folder written by `bloomperf shard`"
        ) from None
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # the other ranks wait here for the first
        description = view / CHECKPOINTS_JSON
        if is_complete(description, sources):
            return description, 0.0
        check_free_space(view, sources)
        started = time.perf_counter()
        count = len(sources)
        names = [write_torch_copy(path, view, i, count) for i, path in enumerate(sources)]
        write_description(description, names, sources)
        return description, time.perf_counter() - started
    finally:
        os.close(folder)  # releases the lock


def check_free_space(view: Path, sources: list[Path]) -> None:
    needed = sum(path.stat().st_size for path in sources)
    free = shutil.disk_usage(view).free
    if free < needed:
        raise BloomperfError(
            f"{view}: DeepSpeed's copy of the checkpoint needs {needed / GIB:.1f} GiB, "
            f"{free / GIB:.1f} GiB free; free some, or use `bloomperf shard`"
        )


def is_complete(description: Path, sources: list[Path]) -> bool:
    try:
        existing = json.loads(description.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(existing, dict) and existing.get("source") == fingerprint(sources)


def write_torch_copy(source: Path, view: Path, index: int, count: int) -> str:
    """One weight file as a torch pickle under BLOOM's original names; returns its name."""
    import torch

    name = source.name.rsplit(".", 1)[0] + ".pt"
    print(
        f"bloomperf: writing DeepSpeed's copy of {source.name} ({index + 1}/{count}) to {view}",
        file=sys.stderr,
        flush=True,
    )
    state = read_weights(source)
    state = {key.removeprefix(PREFIX): tensor for key, tensor in state.items()}
    partial = view / f".{name}.partial"
    torch.save(state, partial)
    os.replace(partial, view / name)
    return name


def read_weights(path: Path) -> dict[str, Any]:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def write_description(description: Path, names: list[str], sources: list[Path]) -> None:
    """The JSON DeepSpeed's ``SDLoaderFactory.get_sd_loader_json`` reads, written last: its
    presence (with a matching source fingerprint) marks the copy complete."""
    document = {
        "type": "BLOOM",
        "checkpoints": names,
        "version": 1.0,
        "base_dir": str(description.parent),
        "source": fingerprint(sources),
    }
    write_json_atomic(description, document)


# -- host memory per load path ----------------------------------------------------------------


def host_bytes_per_rank(
    load: str, checkpoint: Path, ranks: int, scale: float, share_on_host: bool
) -> int:
    """Host memory one rank needs while loading, by load path (``scale``: loaded dtype's bytes
    over the files' bytes per weight).

    - ``hf``: ``from_pretrained`` of the whole model on every rank;
    - ``unsharded``: one weight file at a time (``torch.load`` reads it whole), plus the rank's
      share when ``share_on_host``: auto-TP fills its share on the host and moves it with
      ``module.to(device)`` at the end; kernel injection copies into GPU buffers as it goes;
    - ``pre-sharded``: the rank's own files.
    """
    files = weight_files(checkpoint)
    total = sum(path.stat().st_size for path in files) * scale
    largest = max(path.stat().st_size for path in files) * scale
    return host_bytes_for(load, total, largest, ranks, share_on_host)


def host_bytes_for(load: str, total: float, largest: float, ranks: int, share_on_host: bool) -> int:
    """host_bytes_per_rank's rule on the sizes alone (``total`` and ``largest`` weight file, in
    the loaded dtype): benchmarks/rehearse.py judges a machine's groups before any file exists."""
    if load == "hf":
        return int(total)
    if load == "unsharded":
        return int(largest + (total / ranks if share_on_host else 0))
    return int(total / ranks)


ADVICE = {
    "hf": "drop --load hf: the checkpoints-JSON load reads one file at a time",
    "unsharded": "use fewer ranks, or a folder written by `bloomperf shard` on a larger host",
    "pre-sharded": "use fewer ranks or a larger host",
}


HOST_RAM_SKIP = "host RAM: "  # how every host-RAM skip reason starts (analysis/compare reads it)


def host_memory_reason(
    need_per_rank: int, ranks: int, load: str, host_bytes: int, doubt: str = ""
) -> str | None:
    """The skip reason when the group's ranks together need more than the host's RAM, by what
    the load path really holds (``host_bytes_per_rank``). A RAM figure in doubt (``doubt``:
    why, e.g. a Firecracker guest's MemTotal, which grows with use) is named in the reason:
    ranks that would swap a whole machine are still not started on a guess."""
    need = need_per_rank * ranks
    if need <= host_bytes:
        return None
    return (
        f"{HOST_RAM_SKIP}{ranks} ranks x {need_per_rank / GIB:.1f} GiB host memory each "
        f"({load} load) = "
        f"{need / GIB:.1f} GiB > {host_bytes / GIB:.1f} GiB RAM: it would swap; {ADVICE[load]}"
        + (f" (the RAM figure may read low: {doubt})" if doubt else "")
    )
