"""The options each backend reads, typed: a backend reads ``request.options.zero_offload``, so
an option it reads but no one defines is a mypy error, not a ``.get`` that is always None.

Each backend's dataclass holds only what that backend reads; ``BackendOptions`` is all of them
in one (what the worker spec carries to every backend). Field names are the run options' names
(``bloomperf.harness.options``), and ``tests/test_config.py`` checks that each is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AccelerateOptions:
    max_memory: str = "auto"  # accelerate_map's choice: blog, even, auto or a map
    offload: str = "none"  # none | cpu | disk
    offload_folder: str | None = None  # disk offload's folder (the controller makes one)


@dataclass(frozen=True)
class TensorParallelOptions:
    """ds-inference and ds-autotp."""

    tp: int | None = None  # ranks; None: every visible GPU (one on CPU)
    sharded: str | None = None  # a folder ``bloomperf shard`` wrote
    load: str | None = None  # unsharded | hf; None: the backend's own choice
    ds_load_once: bool = False  # ds-inference: one group serves every batch size
    host_ram: int | None = None  # bytes: the machine's documented RAM; None: MemTotal


@dataclass(frozen=True)
class DsZeroOptions:
    tp: int | None = None  # ranks, as for tensor parallelism
    zero_offload: str = "none"  # none | cpu | nvme
    nvme_path: str | None = None
    ds_config: dict[str, Any] | None = None  # merged over the ZeRO-3 defaults


@dataclass(frozen=True)
class BackendOptions(AccelerateOptions, TensorParallelOptions, DsZeroOptions):
    """Every backend's options: what ``LoadRequest.options`` and the worker spec hold."""
