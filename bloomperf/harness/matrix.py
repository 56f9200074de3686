"""The cells to measure: backend × dtype × batch size, grouped by (backend, dtype).

Without --backends and --dtypes, each backend's own traits say where it runs and in which dtypes
(``Backend.default_on``, ``Backend.default_dtypes``: the blog's rows on GPU, the tiny-model
matrix that CI runs on CPU).
A group is what one worker process group serves: it loads the model once.
"""

from __future__ import annotations

from dataclasses import dataclass

from bloomperf.backends import backend_class, backend_names
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.store.results import cell_id

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
    backends = options.backends or default_backends(device)
    batch_sizes = tuple(sorted(options.batch_sizes or DEFAULT_BATCH_SIZES[device]))
    groups: list[Group] = []
    for backend in sorted(backends, key=backend_names().index):
        # Loaded now, so that a bad entry point is refused before anything starts.
        dtypes = backend_class(backend).default_dtypes.get(device) or ()
        dtypes = options.dtypes or dtypes
        if not dtypes:
            raise BloomperfError(f"--backends {backend}: no default dtype on {device}: --dtypes")
        groups.extend(Group(backend, dtype, batch_sizes) for dtype in dtypes)
    return groups


def default_backends(device: str) -> tuple[str, ...]:
    """The backends a run on ``device`` measures unless --backends names others."""
    return tuple(name for name in backend_names() if device in backend_class(name).default_on)
