"""What ``--model`` names, as a checkpoint folder on this machine.

A registry shape is built once into the cache as an ordinary Hugging Face checkpoint folder
(config.json, safetensors shards, tokenizer files), so every backend loads it exactly as it would
load the real weights. Speed and memory depend on the shape, not on the values, so random weights
from a fixed seed measure the same thing as the trained ones. ``--model`` also takes a local
checkpoint folder or a hub id that is already in the local cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.catalog.checkpoint_builder import BUILDER_VERSION, build_checkpoint
from bloomperf.catalog.dtypes import TORCH_BYTES
from bloomperf.catalog.manifest import checkpoint_problem, write_manifest
from bloomperf.catalog.models import (
    MODEL_SHAPES,
    ModelShape,
    bloom_config,
    check_layers,
    count_parameters,
    find_shape,
)
from bloomperf.catalog.names import MODEL_NAME, check_model_name
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import parse_json_text
from bloomperf.core.paths import real_path, xdg_home


@dataclass(frozen=True)
class PreparedModel:
    name: str  # registry name, or the path / hub id given
    path: Path  # folder with config.json, *.safetensors, tokenizer files
    layers: int
    parameters: int
    shape: ModelShape | None  # None for an external checkpoint whose config is no registry shape


def default_cache_dir() -> Path:
    """``$BLOOMPERF_CACHE``, else ``$XDG_CACHE_HOME/bloomperf``, else ``~/.cache/bloomperf``."""
    env = os.environ.get("BLOOMPERF_CACHE")
    if env:
        return Path(env)
    return xdg_home("XDG_CACHE_HOME", Path.home() / ".cache") / "bloomperf"


def resolve_model(
    name: str, layers: int | None = None, cache_dir: Path | str | None = None
) -> PreparedModel:
    """Turn a ``--model`` value into a checkpoint folder, building a registry shape if needed."""
    if name in MODEL_SHAPES:
        cache = Path(cache_dir) if cache_dir else default_cache_dir()
        return prepare_shape(MODEL_SHAPES[name], layers, cache)
    folder = Path(name).expanduser()
    if folder.is_dir():
        # Results and baselines carry the model's name, which becomes part of a file name:
        # a local folder is named by its last part (its path is recorded beside it).
        plain = real_path(folder).name if not MODEL_NAME.fullmatch(name) else name
        return prepare_external(check_model_name(plain, "--model"), folder, layers)
    snapshot = find_cached_snapshot(name)
    if snapshot is None:
        known = ", ".join(MODEL_SHAPES)
        raise BloomperfError(
            f"--model: {name!r} is not a known shape ({known}), a local checkpoint folder, "
            "or a hub id in the local cache"
        )
    return prepare_external(name, snapshot, layers)


def prepare_shape(shape: ModelShape, layers: int | None, cache_dir: Path) -> PreparedModel:
    n_layer = check_layers(layers, shape.n_layer, shape.name)
    folder = cache_dir / "models" / checkpoint_folder_name(shape, n_layer)
    if checkpoint_problem(folder, shape, n_layer) is not None:
        build_into_cache(shape, n_layer, folder)
    return PreparedModel(shape.name, folder, n_layer, shape.parameters(n_layer), shape)


def checkpoint_folder_name(shape: ModelShape, layers: int, seed: int = 0) -> str:
    """``<name>[-L<layers>]-<hash>``: the hash changes with anything that changes the bytes."""
    key = json.dumps(
        {"config": bloom_config(shape, layers), "seed": seed, "builder": BUILDER_VERSION},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    truncated = f"-L{layers}" if layers != shape.n_layer else ""
    return f"{shape.name}{truncated}-{digest}"


def build_into_cache(shape: ModelShape, layers: int, folder: Path) -> None:
    """Build under a lock, so two processes asking for the same model build it once."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            problem = checkpoint_problem(folder, shape, layers)
            if problem is None:  # another process built (or rebuilt) it while we waited
                return
            remove_stale_partials(folder)
            if folder.exists() or folder.is_symlink():
                set_aside(folder, problem)
            check_free_space(shape, layers, folder.parent)
            started = time.perf_counter()
            build_and_rename(shape, layers, folder)
    except OSError as exc:
        raise BloomperfError(
            f"--model: cannot build {shape.name} in {folder.parent}: {exc}"
        ) from None
    elapsed = time.perf_counter() - started
    print(
        f"bloomperf: built {shape.name} ({layers} layers) in {elapsed:.1f} s: {folder}",
        file=sys.stderr,
    )


def build_and_rename(shape: ModelShape, layers: int, folder: Path) -> None:
    """Build in a temporary sibling, renamed when complete: a half-built one is never used."""
    partial = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent)
    )
    try:
        build_checkpoint(shape, layers, partial)
        write_manifest(partial, shape, layers, seed=0)
        partial.chmod(0o755)  # mkdtemp makes it private; a shared cache must be readable
        os.rename(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def remove_stale_partials(folder: Path) -> None:
    # Only called while holding the folder's lock: any partial left is from a killed builder.
    for stale in folder.parent.glob(f".{folder.name}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)


def set_aside(folder: Path, problem: str) -> None:
    """Move a cached folder that no longer holds its build out of the way (said once), so the
    rebuild renames into its place; a run that still reads the old one keeps its files."""
    try:
        aside = Path(
            tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent)
        )
        os.rename(folder, aside / "stale")
    except OSError as exc:
        raise BloomperfError(
            f"--model: {folder}: {problem}, and it cannot be rebuilt: {exc.strerror or exc}"
        ) from None
    print(f"bloomperf: {folder}: {problem}; rebuilding it", file=sys.stderr)
    shutil.rmtree(aside, ignore_errors=True)


def check_free_space(shape: ModelShape, layers: int, parent: Path, free: int | None = None) -> None:
    """Refuse a build that would not fit; ``free`` defaults to what ``parent``'s disk has."""
    needed = shape.parameters(layers) * TORCH_BYTES[shape.checkpoint_dtype]
    free = free if free is not None else shutil.disk_usage(parent).free
    if free < needed * 1.05:
        raise BloomperfError(
            f"--model: building {shape.name} with {layers} layers needs {needed / 1e9:.1f} GB "
            f"but {parent} has {free / 1e9:.1f} GB free (set BLOOMPERF_CACHE elsewhere)"
        )


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def find_cached_snapshot(repo_id: str) -> Path | None:
    """The local snapshot of a hub model, or None. Never downloads (works offline)."""
    if not _HUB_ID.match(repo_id):
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, a bad cache entry, or no huggingface_hub: all mean "not here"
        return None


def prepare_external(name: str, folder: Path, layers: int | None) -> PreparedModel:
    """Check an existing checkpoint folder is a complete BLOOM checkpoint."""
    config = read_checkpoint_config(folder)
    hidden = config_int(config, folder, "hidden_size", "n_embed")
    n_layer = config_int(config, folder, "n_layer", "num_hidden_layers")
    n_head = config_int(config, folder, "n_head", "num_attention_heads")
    vocab = config_int(config, folder, "vocab_size")
    if layers is not None and layers != n_layer:
        raise BloomperfError(
            f"--layers: only registry shapes can be truncated; {name} has {n_layer} layers"
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise BloomperfError(f"--model: {folder} has no *.safetensors or *.bin weights")
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        raise BloomperfError(f"--model: {folder} has no tokenizer files (tokenizer.json)")
    tied = config.get("tie_word_embeddings", True) is not False
    parameters = count_parameters(hidden, n_layer, vocab, tied)
    return PreparedModel(
        name, folder, n_layer, parameters, find_shape(hidden, n_layer, n_head, vocab)
    )


def read_checkpoint_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BloomperfError(f"--model: {folder} has no config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BloomperfError(f"--model: cannot read {path}: {exc}") from None
    config = parse_json_text(text, str(path))
    if not isinstance(config, dict) or config.get("model_type") != "bloom":
        found = config.get("model_type") if isinstance(config, dict) else None
        raise BloomperfError(f"--model: {path} is not a BLOOM config (model_type {found!r})")
    return config


def config_int(config: dict[str, Any], folder: Path, *keys: str) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise BloomperfError(f"--model: {folder}/config.json has no positive integer {keys[0]}")
