"""Every run option, defined once: the pytest plugin and the CLI both build theirs from here.

Each option has a CLI flag (``--batch-sizes``), a pytest flag (``--bloomperf-batch-sizes``), an
ini key (``bloomperf_batch_sizes``) and an environment variable (``BLOOMPERF_BATCH_SIZES``).
Resolution order, as in pytest-timeout: command line > environment > ini > default. Every value
is parsed and validated here (by its parser in ``option_parsers``), an error names where the bad
value came from, and the result is a typed ``config.RunConfig``, which holds the names' types
and defaults: the table adds only the parser, the help and the metavar.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bloomperf.backends import DTYPES, backend_names
from bloomperf.backends.ds_inference import LOAD_CHOICES
from bloomperf.catalog.sizes import parse_size
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.multinode import LAUNCHERS
from bloomperf.harness.parsers import (
    parse_batch_sizes,
    parse_bounded,
    parse_choice,
    parse_ds_config,
    parse_flag,
    parse_host,
    parse_hostfile_path,
    parse_max_memory,
    parse_names,
    parse_node_filter,
    parse_path,
    parse_percent,
    parse_port,
    parse_positive_float,
    parse_positive_int,
    parse_sharded,
    parse_text,
    parse_work_folder,
)
from bloomperf.store.results import MAX_CYCLES, MAX_NEW_TOKENS

# Tensor parallelism splits the attention heads (BLOOM-176B has 112): no degree beyond this
# fits any model or any machine.
MAX_TP = 128


# Each option's name, type and default are RunConfig's field: the table adds how it is parsed
# and what its help says, and reads the rest from there.
DEFAULTS: Mapping[str, Any] = {f.name: f.default for f in fields(RunConfig)}


@dataclass(frozen=True)
class Option:
    name: str  # a RunConfig field: batch_sizes
    parse: Callable[[str], Any]
    text: str  # the help; RunConfig's default is added to it
    metavar: str = "VALUE"

    @property
    def default(self) -> Any:
        return DEFAULTS[self.name]

    @property
    def flag(self) -> bool:
        """A switch without a value: the field is a bool."""
        return isinstance(self.default, bool)

    @property
    def help(self) -> str:
        """The text, then " [default]" (a None default is the device's, said in the text)."""
        if self.default is None or self.flag:
            return self.text
        shown = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return f"{self.text} [{shown}]"

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
    Option("layers", parse_positive_int, "truncate the model to N layers at full width [all]", "N"),
    Option(
        "backends",
        parse_names(backend_names()),
        f"backends, comma-separated ({', '.join(backend_names())}) "
        "[gpu: the blog's, cpu: accelerate]",
        "LIST",
    ),
    Option(
        "dtypes",
        parse_names(DTYPES),
        f"dtypes, comma-separated ({', '.join(DTYPES)}) [each backend's own, as in the blog]",
        "LIST",
    ),
    Option(
        "batch_sizes",
        parse_batch_sizes,
        "batch sizes, comma-separated [gpu: the blog's 1 … 512, cpu: 1,8,32]",
        "LIST",
    ),
    Option("new_tokens", parse_bounded(MAX_NEW_TOKENS), "new tokens per sequence, forced", "N"),
    Option("cycles", parse_bounded(MAX_CYCLES), "timed generate cycles per cell", "N"),
    Option("warmup", parse_bounded(MAX_CYCLES), "warm-up generate cycles per cell", "N"),
    Option("device", parse_choice(("auto", "cpu", "cuda")), "device: auto, cpu or cuda", "DEV"),
    Option(
        "output",
        parse_path,
        "results JSON file, rewritten after every cell "
        "[results/bloomperf-DATE-TIME.json, linked as results/latest.json]",
        "FILE",
    ),
    Option(
        "cache_dir",
        parse_path,
        "where built models are kept [$BLOOMPERF_CACHE or ~/.cache/bloomperf]",
        "DIR",
    ),
    Option(
        "threads",
        parse_positive_int,
        "CPU threads per worker rank (on a small shared CPU, "
        "spinning thread pools make figures erratic)",
        "N",
    ),
    Option("load_timeout", parse_positive_float, "seconds allowed for loading a model", "S"),
    Option("cell_timeout", parse_positive_float, "seconds allowed for one generate step", "S"),
    Option(
        "max_memory",
        parse_max_memory,
        "accelerate: the weights each GPU may take: blog (GPU 0 free, 51 GiB or 26 GiB int8 on "
        "the others), even, a map like 0:0GiB,1:51GiB, or auto (blog for all of bloom-176b on "
        "8 x 80 GB, else even)",
        "MAP",
    ),
    Option(
        "offload",
        parse_choice(("none", "cpu", "disk")),
        "accelerate offload: none, cpu or disk",
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
        "running out becomes a caught allocator failure (oom) instead of the OOM killer [none]",
        "SIZE",
    ),
    Option(
        "tp",
        parse_bounded(MAX_TP),
        "tensor-parallel degree / ranks for DeepSpeed backends [gpu: all visible GPUs, cpu: 1]",
        "N",
    ),
    Option(
        "zero_offload", parse_choice(("none", "cpu", "nvme")), "ds-zero parameter offload", "WHERE"
    ),
    Option(
        "sharded",
        parse_sharded,
        "ds-inference/ds-autotp: load this pre-sharded checkpoint (written by bloomperf shard) "
        "[none]",
        "DIR",
    ),
    Option(
        "load",
        parse_choice(LOAD_CHOICES),
        f"ds-inference/ds-autotp loading: {', '.join(LOAD_CHOICES)} "
        "[hf at TP=1 (int8 with kernels aside), else unsharded]",
        "HOW",
    ),
    Option(
        "ds_load_once",
        parse_flag,
        "ds-inference: load once per dtype and serve every batch size from that group "
        "(DeepSpeed sizes its kernel workspace at a group's first forward) "
        "[off: a fresh group per batch size]",
    ),
    Option(
        "host_ram",
        parse_size,
        "the machine's RAM (e.g. 128GiB), for host-RAM skips and doctor, where MemTotal reads "
        "low (a Firecracker guest starts small and grows with use) [MemTotal]",
        "SIZE",
    ),
    Option(
        "nvme_path", parse_work_folder, "folder on NVMe for ds-zero's nvme offload [none]", "DIR"
    ),
    Option(
        "ds_config",
        parse_ds_config,
        "DeepSpeed config JSON merged over ds-zero's defaults (kept in each cell's details) [none]",
        "FILE",
    ),
    Option(
        "hostfile",
        parse_hostfile_path,
        "DeepSpeed hostfile for multi-node launches [none: this node]",
        "FILE",
    ),
    Option(
        "num_nodes",
        parse_positive_int,
        "nodes for multi-node launches [every node of the hostfile]",
        "N",
    ),
    Option(
        "launcher",
        parse_choice(LAUNCHERS),
        "DeepSpeed's multi-node runner: pdsh, openmpi, mvapich or slurm",
        "NAME",
    ),
    Option("launcher_args", parse_text, "extra arguments for the multi-node runner [none]", "ARGS"),
    Option("ssh_port", parse_port, "ssh port of the nodes (pdsh) [ssh's default]", "PORT"),
    Option(
        "include",
        parse_node_filter,
        "DeepSpeed's --include: NODE[:SLOT,...][@NODE...] [all]",
        "SPEC",
    ),
    Option(
        "exclude",
        parse_node_filter,
        "DeepSpeed's --exclude, same syntax as --include [none]",
        "SPEC",
    ),
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
    Option(
        "history",
        parse_path,
        "add the finished run to this history folder, as history add does [none]",
        "DIR",
    ),
    Option(
        "github_output",
        parse_flag,
        "write the verdict and counts to $GITHUB_OUTPUT as the step's outputs, as diff "
        "--format github does",
    ),
    Option("probe", parse_flag, "run cells beyond a known OOM boundary too"),
    Option("strict", parse_flag, "fail when a cell runs where an OOM was expected"),
    Option(
        "allow_incomplete",
        parse_flag,
        "pass the gate even when the run measured nothing or did not finish",
    ),
    Option(
        "allow_no_baseline",
        parse_flag,
        "pass the gate even when no cell was judged: no baseline, or only another topology's "
        "or model's (a first run; accept its results as the baseline)",
    ),
    Option("no_lock", parse_flag, "run even if another bloomperf run holds the devices"),
    Option(
        "slowdown_percent",
        parse_percent,
        "inject a synthetic slowdown of PCT %% into every generate (for testing the gate "
        "itself); the results are marked synthetic, and diff and accept refuse them [none]",
        "PCT",
    ),
)


def add_options(add: Callable[..., Any], flag: Callable[[Option], str], dest_prefix: str) -> None:
    """Register every option with ``add`` (argparse's ``add_argument``, pytest's ``addoption``)."""
    for option in OPTIONS:
        how: dict[str, Any] = (
            {"action": "store_const", "const": "1"} if option.flag else {"metavar": option.metavar}
        )
        add(flag(option), dest=dest_prefix + option.name, default=None, help=option.help, **how)


def add_cli_options(parser: argparse.ArgumentParser) -> None:
    add_options(parser.add_argument, lambda option: option.cli_flag, "")


def add_pytest_options(group: Any, parser: Any) -> None:
    """Register the same options on pytest (``group`` from ``parser.getgroup``)."""
    add_options(group.addoption, lambda option: option.pytest_flag, "bloomperf_")
    for option in OPTIONS:
        parser.addini(option.ini_key, help=option.help)


def resolve_options(
    cli: Mapping[str, str | None],
    ini: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
    flag_style: str = "cli",
) -> RunConfig:
    """Parse every option from its first source (command line > env > ini); an option set
    nowhere keeps ``RunConfig``'s default."""
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
    return check_combinations(RunConfig(**resolved))


def check_combinations(config: RunConfig) -> RunConfig:
    """Options valid alone that contradict each other."""
    both = node_names(config.include) & node_names(config.exclude)
    if both:
        # Which wins would be the launcher's accident, said only once a group starts.
        raise BloomperfError(
            f"--include and --exclude: {', '.join(sorted(both))} is both included and excluded"
        )
    return config


def node_names(spec: str | None) -> set[str]:
    """The nodes a DeepSpeed ``NODE[:SLOT,...][@NODE...]`` filter names."""
    return {part.split(":")[0] for part in (spec or "").split("@") if part}


# The options that name a file the run reads: its --output must never be one of them.
INPUT_FILE_OPTIONS = ("ds_config", "hostfile")


def input_files(
    cli: Mapping[str, str | None],
    ini: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Path]:
    """The files the run reads, as given (the first source of each, as ``resolve_options``
    takes it): a ds-config is parsed into a dict there, and its path is gone."""
    env = os.environ if env is None else env
    ini = ini or {}
    found = []
    for option in OPTIONS:
        if option.name in INPUT_FILE_OPTIONS:
            sources = (cli.get(option.name), env.get(option.env_var), ini.get(option.name))
            raw = next((str(s) for s in sources if s not in (None, "")), None)
            if raw is not None:
                found.append(Path(raw))
    return found
