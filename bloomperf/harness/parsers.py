"""The option table's parsers: text from a flag, the environment or an ini file → a typed
value (the type of the ``RunConfig`` field of the same name), or ``ValueError`` saying why not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bloomperf.backends.ds_inference import read_shard_marker
from bloomperf.catalog import accelerate_map
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import UnknownName
from bloomperf.core.jsonfile import read_document
from bloomperf.harness.hostfile import read_hostfile
from bloomperf.store.results import MAX_BATCH_SIZE

# A DeepSpeed config is a few hundred bytes; a megabyte is not one.
MAX_DS_CONFIG_BYTES = 1 << 20


def parse_names(valid: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if not names:
            raise ValueError("is empty")
        for name in names:
            if name not in valid:
                raise UnknownName(name, valid)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            # One cell per name: a second would be measured, then silently replace the first.
            raise ValueError(f"{', '.join(twice)} given twice")
        return names

    return parse


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    sizes = [
        parse_bounded_int(part.strip(), MAX_BATCH_SIZE, "batch size") for part in text.split(",")
    ]
    twice = sorted({s for s in sizes if sizes.count(s) > 1})
    if twice:
        raise ValueError(f"batch size {', '.join(map(str, twice))} given twice")
    return tuple(sorted(sizes))


def parse_bounded(limit: int, name: str = "") -> Callable[[str], int]:
    """A positive integer no larger than ``limit`` (what a run or a reader can hold)."""

    def parse(text: str) -> int:
        return parse_bounded_int(text, limit, name)

    return parse


def parse_bounded_int(text: str, limit: int, name: str = "") -> int:
    value = parse_positive_int(text, name)
    if value > limit:
        raise ValueError(f"{name + ' ' if name else ''}must be at most {limit}, got {value}")
    return value


def parse_positive_int(text: str, name: str = "") -> int:
    """A positive integer; ``name`` ("batch size") is said in the error."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer{' ' + name if name else ''}") from None
    if value <= 0:
        raise ValueError(f"{name + ' ' if name else ''}must be a positive integer, got {value}")
    return value


def parse_positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"must be a positive number, got {text}")
    return value


def parse_percent(text: str) -> float:
    value = parse_positive_float(text)
    if value > 1000:
        raise ValueError(f"must be at most 1000, got {text}")
    return value


def parse_node_filter(text: str) -> str:
    """DeepSpeed's ``NAME[:SLOT[,SLOT...]][@NAME...]``; no character a shell would act on."""
    if not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._-]*(:\d+(,\d+)*)?(@[A-Za-z0-9][A-Za-z0-9._-]*(:\d+(,\d+)*)?)*",
        text,
    ):
        raise ValueError(f"{text!r} is not NODE[:SLOT[,SLOT...]][@NODE...]")
    return text


def parse_host(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text):
        raise ValueError(f"{text!r} is not a host name or address")
    return text


def parse_choice(valid: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in valid:
            raise UnknownName(text, valid)
        return text

    return parse


def parse_text(text: str) -> str:
    if not text.strip():
        raise ValueError("is empty")
    return text


def parse_path(text: str) -> Path:
    return Path(parse_text(text))


def parse_ds_config(text: str) -> dict[str, Any]:
    """A DeepSpeed config JSON file, read now through the bounded reader (a regular file of at
    most 1 MiB, UTF-8, strict JSON): a FIFO, a device or a huge file is a usage error."""
    path = parse_path(text)
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if info.st_size > MAX_DS_CONFIG_BYTES:
        raise ValueError(f"{path}: {info.st_size} bytes, over {MAX_DS_CONFIG_BYTES} for a config")
    try:
        data = read_document(path, "a DeepSpeed config")
    except BloomperfError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object")
    return data


def parse_hostfile_path(text: str) -> Path:
    """A DeepSpeed hostfile, read now: missing, unreadable or garbage is said before the run."""
    path = parse_path(text)
    try:
        read_hostfile(path)
    except BloomperfError as exc:
        raise ValueError(str(exc)) from None
    return path


def parse_port(text: str) -> int:
    return parse_bounded_int(text, 65535, "port")


def parse_max_memory(text: str) -> str:
    return accelerate_map.parse_choice(parse_text(text).strip())


def parse_work_folder(text: str) -> Path:
    """A folder bloomperf or a library will write into (offload, NVMe): it must be a folder, or
    creatable under a writable one; said now, not minutes later when the model stage fails."""
    folder = parse_path(text)
    try:
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} exists and is not a folder")
        existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    except PermissionError as exc:  # a folder on the way that may not be entered
        raise ValueError(f"{folder}: cannot be reached: {exc.strerror}") from None
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{folder}: {existing} is not a writable folder")
    return folder


def parse_sharded(text: str) -> Path:
    """A folder ``bloomperf shard`` wrote: its marker must be there and readable."""
    folder = parse_path(text)
    try:
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder")
        read_shard_marker(folder)
    except BloomperfError as exc:
        raise ValueError(str(exc)) from None
    except PermissionError as exc:  # it, or a folder on the way, may not be entered
        raise ValueError(f"{folder}: cannot be reached: {exc.strerror}") from None
    return folder


def parse_flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use 1/0, true/false)")
