"""The cells to measure: backend × dtype × batch size, grouped by (backend, dtype).

Defaults follow the blog's rows on GPU; on CPU they are the tiny-model matrix that CI runs.
A group is what one worker process group serves: it loads the model once.
"""

from __future__ import annotations

from dataclasses import dataclass

from bloomperf.backends import BACKEND_NAMES
from bloomperf.config.run import RunConfig
from bloomperf.store.results import cell_id

DEFAULT_BACKENDS: dict[str, tuple[str, ...]] = {
    "cuda": ("accelerate", "ds-inference", "ds-zero"),
    "cpu": ("accelerate",),
}
# The blog's rows: each backend with the dtypes it was measured in.
DEFAULT_DTYPES: dict[str, dict[str, tuple[str, ...]]] = {
    "cuda": {
        "accelerate": ("bf16", "int8"),
        "ds-inference": ("fp16", "int8"),
        "ds-autotp": ("fp16",),
        "ds-zero": ("bf16",),
    },
    "cpu": {
        "accelerate": ("fp32", "bf16", "int8"),
        "ds-inference": ("fp16",),
        "ds-autotp": ("fp32",),
        "ds-zero": ("fp32",),
    },
}
DEFAULT_BATCH_SIZES: dict[str, tuple[int, ...]] = {
    "cuda": (1, 8, 16, 32, 64, 128, 256, 512),
    "cpu": (1, 8, 32),
}


@dataclass(frozen=True)
class Cell:
    backend: str
    dtype: str
    batch_size: int

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)

    @property
    def group(self) -> tuple[str, str]:
        return (self.backend, self.dtype)


@dataclass(frozen=True)
class Group:
    backend: str
    dtype: str
    batch_sizes: tuple[int, ...]

    def cells(self) -> list[Cell]:
        return [Cell(self.backend, self.dtype, b) for b in self.batch_sizes]


def plan_groups(options: RunConfig, device: str) -> list[Group]:
    """Groups in table order (the blog's backend order), batch sizes ascending."""
    backends = options.backends or DEFAULT_BACKENDS[device]
    batch_sizes = tuple(sorted(options.batch_sizes or DEFAULT_BATCH_SIZES[device]))
    groups: list[Group] = []
    for backend in sorted(backends, key=BACKEND_NAMES.index):
        dtypes = options.dtypes or DEFAULT_DTYPES[device][backend]
        groups.extend(Group(backend, dtype, batch_sizes) for dtype in dtypes)
    return groups
