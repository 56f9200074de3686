"""A run's configuration, typed: what ``bloomperf.harness.options`` resolves the option table into.

``RunConfig`` has one field per option of the table (same name, the type its parser returns)
and holds each default once (the backends' are ``BackendOptions``'); ``None`` means "the device
decides" (model, matrix, ranks). The option table reads each default, and whether an option is
a switch (a bool field), from here.
``LaunchOptions`` is the part that starts worker groups (threads, multi-node); the backends'
part is ``bloomperf.config.backend.BackendOptions``. Reading an option that is not defined is
a mypy error, where a ``dict.get`` was always None (``tests/test_config.py`` holds the proof).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from bloomperf.config.backend import BackendOptions


@dataclass(frozen=True)
class LaunchOptions:
    """How a worker group is started: CPU threads, and DeepSpeed's multi-node runner."""

    threads: int = 1  # CPU threads per rank: spinning pools make small shared CPUs erratic
    hostfile: Path | None = None
    num_nodes: int | None = None
    launcher: str = "pdsh"
    launcher_args: str | None = None
    ssh_port: int | None = None
    include: str | None = None
    exclude: str | None = None
    master_addr: str | None = None
    control_addr: str | None = None


@dataclass(frozen=True)
class RunConfig(LaunchOptions):
    """Every run option, parsed (``bloomperf.harness.options.resolve_options`` builds it); the
    launcher's options are inherited from ``LaunchOptions``."""

    model: str | None = None
    layers: int | None = None
    backends: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] | None = None
    new_tokens: int = 100
    cycles: int = 5
    warmup: int = 1
    device: str = "auto"
    output: Path | None = None
    cache_dir: Path | None = None
    load_timeout: float = 1800.0
    cell_timeout: float = 1800.0
    # The backends' options: their defaults are BackendOptions' (what a worker gets unless told).
    max_memory: str = BackendOptions.max_memory
    offload: str = BackendOptions.offload
    offload_folder: Path | None = None
    memory_limit: int | None = None  # bytes
    tp: int | None = None
    zero_offload: str = BackendOptions.zero_offload
    sharded: Path | None = None
    load: str | None = None
    ds_load_once: bool = BackendOptions.ds_load_once
    host_ram: int | None = BackendOptions.host_ram
    nvme_path: Path | None = None
    ds_config: dict[str, Any] | None = None
    baselines: Path | None = None
    history: Path | None = None  # the history folder a finished run is added to
    github_output: bool = False
    probe: bool = False
    strict: bool = False
    allow_incomplete: bool = False
    allow_no_baseline: bool = False
    no_lock: bool = False
    slowdown_percent: float | None = None

    def backend_options(self, offload_folder: Path | None = None) -> BackendOptions:
        """The backends' part (``offload_folder``: disk offload's folder when none was given)."""
        given = replace(self, offload_folder=self.offload_folder or offload_folder)
        return BackendOptions(
            **{f.name: as_text(getattr(given, f.name)) for f in fields(BackendOptions)}
        )

    def launch_options(self) -> LaunchOptions:
        """The launcher's part alone (what a worker group's spec keeps)."""
        return LaunchOptions(**{f.name: getattr(self, f.name) for f in fields(LaunchOptions)})


def as_text(value: Any) -> Any:
    """A path as the worker spec carries it (JSON text); any other value as it is."""
    return str(value) if isinstance(value, Path) else value
