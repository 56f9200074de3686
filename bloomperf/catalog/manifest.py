"""What a built model folder was built from, and whether the folder still holds it.

A build ends by writing ``bloomperf-manifest.json`` into the folder: the shape, layers, dtype,
seed and builder version it was built from, and per file its size and a SHA-256 (of the whole
file for the small JSON files, of the header for the safetensors shards, whose tensors are
gigabytes). Before a run uses a cached folder, ``checkpoint_problem`` checks the folder against
its manifest, and the manifest against what this shape builds (config.json's bytes, each shard's
header and size are known without building). A changed ``n_layer``, a truncated shard, garbage
in config.json or an emptied folder is found in milliseconds, before a worker would load it as
if it were the model (a config with one layer less loads, and measures the wrong model).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from bloomperf.catalog.checkpoint_builder import BUILDER_VERSION, json_bytes, plan_shards
from bloomperf.catalog.models import ModelShape, bloom_config
from bloomperf.core.jsonfile import write_json_atomic

MANIFEST_NAME = "bloomperf-manifest.json"
MANIFEST_KIND = "bloomperf-checkpoint-manifest"
MANIFEST_VERSION = 1
# A manifest lists a few files; anything larger is not one.
MAX_MANIFEST_BYTES = 1 << 20


def built_from(shape: ModelShape, layers: int, seed: int) -> dict[str, Any]:
    """What a build's bytes depend on."""
    return {
        "shape": shape.name,
        "layers": layers,
        "dtype": shape.checkpoint_dtype,
        "seed": seed,
        "builder": BUILDER_VERSION,
        "config": bloom_config(shape, layers),
    }


def expected_files(shape: ModelShape, layers: int) -> dict[str, dict[str, Any]]:
    """The entries of the files whose bytes follow from the shape alone (tokenizer files are
    trained at build time, so only the manifest knows theirs)."""
    files = {"config.json": json_entry(json_bytes(bloom_config(shape, layers)))}
    for plan in plan_shards(shape, layers):
        files[plan.name] = {"size": plan.size, "header_sha256": sha256(plan.header)}
    return files


def json_entry(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": sha256(data)}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_manifest(folder: Path, shape: ModelShape, layers: int, seed: int) -> None:
    """Describe the files a build just wrote into ``folder`` (the build's last step)."""
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name == MANIFEST_NAME or not path.is_file():
            continue
        files[path.name] = describe_file(path)
    write_json_atomic(
        folder / MANIFEST_NAME,
        {
            "kind": MANIFEST_KIND,
            "version": MANIFEST_VERSION,
            "built_from": built_from(shape, layers, seed),
            "files": files,
        },
    )


def describe_file(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if path.suffix == ".safetensors":
        return {"size": size, "header_sha256": sha256(read_header(path))}
    return {"size": size, "sha256": sha256(path.read_bytes())}


def read_header(path: Path) -> bytes:
    """A safetensors file's length prefix and header (what the manifest hashes)."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        length = int.from_bytes(prefix, "little")
        # A garbage length (up to 2**64) is read only as far as the file goes, not allocated.
        return prefix + f.read(min(length, os.fstat(f.fileno()).st_size))


def checkpoint_problem(folder: Path, shape: ModelShape, layers: int, seed: int = 0) -> str | None:
    """What is wrong with a cached model folder, in a few words; None when it holds what a
    build of ``shape`` with ``layers`` blocks and ``seed`` writes."""
    if not folder.is_dir():
        return "is not a folder"
    manifest = read_manifest(folder)
    if isinstance(manifest, str):
        return manifest
    if manifest.get("built_from") != built_from(shape, layers, seed):
        return f"its {MANIFEST_NAME} was written for another build"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return f"its {MANIFEST_NAME} lists no files"
    for name, entry in expected_files(shape, layers).items():
        if files.get(name) != entry:
            return f"its {MANIFEST_NAME} does not describe {name} as this shape builds it"
    for name, entry in sorted(files.items()):
        problem = file_problem(folder / name, entry)
        if problem:
            return f"{name} {problem}"
    return None


def read_manifest(folder: Path) -> dict[str, Any] | str:
    """The manifest, or what is wrong with it."""
    path = folder / MANIFEST_NAME
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            return f"its {MANIFEST_NAME} is too large"
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return f"has no {MANIFEST_NAME} (an unfinished or older build)"
    except (OSError, ValueError) as exc:
        return f"its {MANIFEST_NAME} cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        return f"its {MANIFEST_NAME} is not a checkpoint manifest"
    return data


def file_problem(path: Path, entry: Any) -> str | None:
    """How a file differs from its manifest entry; None when it does not."""
    if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
        return "has a malformed manifest entry"
    try:
        size = path.stat().st_size
        if size != entry["size"]:
            return f"is {size} bytes, built as {entry['size']}"
        if "header_sha256" in entry:
            return None if sha256(read_header(path)) == entry["header_sha256"] else "header changed"
        return None if sha256(path.read_bytes()) == entry.get("sha256") else "content changed"
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
