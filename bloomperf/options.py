"""Every run option, defined once: the pytest plugin and the CLI both build theirs from here.

Each option has a CLI flag (``--batch-sizes``), a pytest flag (``--bloomperf-batch-sizes``), an
ini key (``bloomperf_batch_sizes``) and an environment variable (``BLOOMPERF_BATCH_SIZES``).
Resolution order, as in pytest-timeout: command line > environment > ini > default. Every value
is parsed and validated here, and an error names where the bad value came from.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf import accelerate_map
from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.backends.ds_inference import LOAD_CHOICES, read_shard_marker
from bloomperf.errors import BloomperfError
from bloomperf.multinode import LAUNCHERS
from bloomperf.sizes import parse_size


def parse_names(valid: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if not names:
            raise ValueError("is empty")
        for name in names:
            if name not in valid:
                raise ValueError(f"unknown value {name!r} (valid: {', '.join(valid)})")
        return names

    return parse


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            size = int(part)
        except ValueError:
            raise ValueError(f"{part!r} is not an integer batch size") from None
        if size <= 0:
            raise ValueError(f"batch size must be a positive integer, got {size}")
        sizes.append(size)
    if not sizes:
        raise ValueError("is empty")
    return tuple(sorted(set(sizes)))


def parse_positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise ValueError(f"must be a positive integer, got {value}")
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
            raise ValueError(f"unknown value {text!r} (valid: {', '.join(valid)})")
        return text

    return parse


def parse_text(text: str) -> str:
    if not text.strip():
        raise ValueError("is empty")
    return text


def parse_path(text: str) -> Path:
    return Path(parse_text(text))


def parse_ds_config(text: str) -> dict[str, Any]:
    """A DeepSpeed config JSON file, read now: a missing or malformed file is a usage error."""
    path = parse_path(text)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object")
    return data


def parse_max_memory(text: str) -> str:
    return accelerate_map.parse_choice(parse_text(text).strip())


def parse_work_folder(text: str) -> Path:
    """A folder bloomperf or a library will write into (offload, NVMe): it must be a folder, or
    creatable under a writable one; said now, not minutes later when the model stage fails."""
    folder = parse_path(text)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a folder")
    existing = next(p for p in (folder.absolute(), *folder.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{folder}: {existing} is not a writable folder")
    return folder


def parse_sharded(text: str) -> Path:
    """A folder ``bloomperf shard`` wrote: its marker must be there and readable."""
    folder = parse_path(text)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    try:
        read_shard_marker(folder)
    except BloomperfError as exc:
        raise ValueError(str(exc)) from None
    return folder


def parse_flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use 1/0, true/false)")


@dataclass(frozen=True)
class Option:
    name: str  # attribute name: batch_sizes
    parse: Callable[[str], Any]
    help: str
    metavar: str = "VALUE"
    flag: bool = False  # a switch without a value

    @property
    def cli_flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def pytest_flag(self) -> str:
        return "--bloomperf-" + self.name.replace("_", "-")

    @property
    def ini_key(self) -> str:
        return "bloomperf_" + self.name

    @property
    def env_var(self) -> str:
        return "BLOOMPERF_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option(
        "model",
        parse_text,
        "model: a shape (tiny, bloom-560m … bloom-176b), a local "
        "checkpoint folder, or a hub id in the local cache [cpu: tiny, gpu: bloom-176b]",
        "NAME",
    ),
    Option("layers", parse_positive_int, "truncate the model to N layers at full width", "N"),
    Option(
        "backends",
        parse_names(BACKEND_NAMES),
        f"backends, comma-separated ({', '.join(BACKEND_NAMES)})",
        "LIST",
    ),
    Option(
        "dtypes",
        parse_names(DTYPES),
        f"dtypes, comma-separated ({', '.join(DTYPES)}) "
        "[default: each backend's own, as in the blog]",
        "LIST",
    ),
    Option("batch_sizes", parse_batch_sizes, "batch sizes, comma-separated", "LIST"),
    Option("new_tokens", parse_positive_int, "new tokens per sequence, forced [100]", "N"),
    Option("cycles", parse_positive_int, "timed generate cycles per cell [5]", "N"),
    Option("warmup", parse_positive_int, "warm-up generate cycles per cell [1]", "N"),
    Option(
        "device", parse_choice(("auto", "cpu", "cuda")), "device: auto, cpu or cuda [auto]", "DEV"
    ),
    Option("output", parse_path, "results JSON file, rewritten after every cell", "FILE"),
    Option(
        "cache_dir",
        parse_path,
        "where built models are kept [$BLOOMPERF_CACHE or ~/.cache/bloomperf]",
        "DIR",
    ),
    Option(
        "threads",
        parse_positive_int,
        "CPU threads per worker rank [1: on a small shared "
        "CPU, spinning thread pools make figures erratic]",
        "N",
    ),
    Option("load_timeout", parse_positive_float, "seconds allowed for loading a model [1800]", "S"),
    Option(
        "cell_timeout", parse_positive_float, "seconds allowed for one generate step [1800]", "S"
    ),
    Option(
        "max_memory",
        parse_max_memory,
        "accelerate: the weights each GPU may take: blog (GPU 0 free, 51 GiB or 26 GiB int8 on "
        "the others), even, a map like 0:0GiB,1:51GiB, or auto (blog for all of bloom-176b on "
        "8 x 80 GB, else even) [auto]",
        "MAP",
    ),
    Option(
        "offload",
        parse_choice(("none", "cpu", "disk")),
        "accelerate offload: none, cpu or disk [none]",
        "WHERE",
    ),
    Option(
        "offload_folder",
        parse_work_folder,
        "folder for disk offload (accelerate) [a temporary folder]",
        "DIR",
    ),
    Option(
        "memory_limit",
        parse_size,
        "cap each worker's address space (e.g. 6GiB): on CPU, "
        "running out becomes a caught allocator failure (oom) instead of the OOM killer",
        "SIZE",
    ),
    Option(
        "tp",
        parse_positive_int,
        "tensor-parallel degree / ranks for DeepSpeed backends [gpu: all visible GPUs, cpu: 1]",
        "N",
    ),
    Option(
        "zero_offload",
        parse_choice(("none", "cpu", "nvme")),
        "ds-zero parameter offload [none]",
        "WHERE",
    ),
    Option(
        "sharded",
        parse_sharded,
        "ds-inference/ds-autotp: load this pre-sharded checkpoint (written by bloomperf shard)",
        "DIR",
    ),
    Option(
        "load",
        parse_choice(LOAD_CHOICES),
        f"ds-inference/ds-autotp loading: {', '.join(LOAD_CHOICES)} "
        "[unsharded where DeepSpeed can read the files, else hf]",
        "HOW",
    ),
    Option("nvme_path", parse_work_folder, "folder on NVMe for ds-zero's nvme offload", "DIR"),
    Option(
        "ds_config",
        parse_ds_config,
        "DeepSpeed config JSON merged over ds-zero's defaults (kept in each cell's details)",
        "FILE",
    ),
    Option("hostfile", parse_path, "DeepSpeed hostfile for multi-node launches", "FILE"),
    Option("num_nodes", parse_positive_int, "nodes for multi-node launches", "N"),
    Option(
        "launcher",
        parse_choice(LAUNCHERS),
        "DeepSpeed's multi-node runner: pdsh, openmpi, mvapich or slurm [pdsh]",
        "NAME",
    ),
    Option("launcher_args", parse_text, "extra arguments for the multi-node runner", "ARGS"),
    Option("ssh_port", parse_positive_int, "ssh port of the nodes (pdsh) [ssh's default]", "PORT"),
    Option(
        "include", parse_node_filter, "DeepSpeed's --include: NODE[:SLOT,...][@NODE...]", "SPEC"
    ),
    Option("exclude", parse_node_filter, "DeepSpeed's --exclude, same syntax as --include", "SPEC"),
    Option(
        "master_addr", parse_host, "rendezvous address [the first host of the hostfile]", "HOST"
    ),
    Option(
        "control_addr",
        parse_host,
        "address rank 0 reaches bloomperf at [the local end of the route to the first host]",
        "HOST",
    ),
    Option("baselines", parse_path, "baselines folder [./baselines, user folder, shipped]", "DIR"),
    Option("probe", parse_flag, "run cells beyond a known OOM boundary too", flag=True),
    Option("strict", parse_flag, "fail when a cell runs where an OOM was expected", flag=True),
    Option(
        "allow_incomplete",
        parse_flag,
        "pass the gate even when the run measured nothing or did not finish",
        flag=True,
    ),
    Option("no_lock", parse_flag, "run even if another bloomperf run holds the devices", flag=True),
    Option(
        "slowdown_percent",
        parse_percent,
        "inject a synthetic slowdown of PCT %% into every generate (for testing the gate "
        "itself); the results are marked synthetic, and diff and accept refuse them",
        "PCT",
    ),
)


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        if option.flag:
            parser.add_argument(
                option.cli_flag,
                dest=option.name,
                action="store_const",
                const="1",
                default=None,
                help=option.help,
            )
        else:
            parser.add_argument(
                option.cli_flag,
                dest=option.name,
                default=None,
                metavar=option.metavar,
                help=option.help,
            )


def add_pytest_options(group: Any, parser: Any) -> None:
    """Register the same options on pytest (``group`` from ``parser.getgroup``)."""
    for option in OPTIONS:
        if option.flag:
            group.addoption(
                option.pytest_flag,
                dest="bloomperf_" + option.name,
                action="store_const",
                const="1",
                default=None,
                help=option.help,
            )
        else:
            group.addoption(
                option.pytest_flag,
                dest="bloomperf_" + option.name,
                default=None,
                metavar=option.metavar,
                help=option.help,
            )
        parser.addini(option.ini_key, help=option.help if option.help != argparse.SUPPRESS else "")


def resolve_options(
    cli: Mapping[str, str | None],
    ini: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
    flag_style: str = "cli",
) -> dict[str, Any]:
    """Parse every option from its first source (command line > env > ini); None if unset."""
    env = os.environ if env is None else env
    ini = ini or {}
    resolved: dict[str, Any] = {}
    for option in OPTIONS:
        flag = option.cli_flag if flag_style == "cli" else option.pytest_flag
        for raw, where in (
            (cli.get(option.name), flag),
            (env.get(option.env_var), f"environment variable {option.env_var}"),
            (ini.get(option.name), f"ini option {option.ini_key}"),
        ):
            if raw == "" and where == flag:
                # --batch-sizes "" must not silently run the whole default matrix.
                raise BloomperfError(f"{flag}: is empty (give a value, or leave the option out)")
            if raw is not None and raw != "":
                try:
                    resolved[option.name] = option.parse(str(raw))
                except ValueError as exc:
                    raise BloomperfError(f"{where}: {exc}") from None
                break
        else:
            resolved[option.name] = None
    return resolved
