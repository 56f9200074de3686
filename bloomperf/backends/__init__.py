"""The backend registry: the built-ins in the blog's order, then what installed packages add
through the ``bloomperf.backends`` entry-point group. The core asks a backend's class for its
traits (``base.Backend``) and names none; torch and DeepSpeed load only in worker processes.
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING

from bloomperf.catalog.dtypes import DTYPES as DTYPES  # the registry's callers read both names here
from bloomperf.catalog.serving_workload import SHAPES
from bloomperf.core.errors import BloomperfError

if TYPE_CHECKING:
    from bloomperf.backends.base import Backend

ENTRY_POINT_GROUP = "bloomperf.backends"
# name -> "module:Class". Order is the order of rows in tables (the blog's order).
BACKEND_CLASSES: dict[str, str] = {
    "accelerate": "bloomperf.backends.accelerate:AccelerateBackend",
    "ds-inference": "bloomperf.backends.ds_inference:DeepSpeedInferenceBackend",
    "ds-autotp": "bloomperf.backends.ds_inference:DeepSpeedAutoTPBackend",
    "ds-zero": "bloomperf.backends.ds_zero:DeepSpeedZeroBackend",
    "vllm": "bloomperf.backends.vllm:VllmBackend",
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKEND_CLASSES)  # the built-ins only


@functools.cache
def installed_entry_points() -> dict[str, EntryPoint]:
    """The installed packages' backends by name (names only: nothing imported until used)."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in BACKEND_CLASSES:
            raise BloomperfError(f"{describe(point)}: {point.name!r} is a built-in backend's name")
        found.setdefault(point.name, point)
    return found


def backend_names() -> tuple[str, ...]:
    return (*BACKEND_CLASSES, *installed_entry_points())


def row_names() -> tuple[str, ...]:
    """What a stored cell's ``backend`` may name: a backend, or the row of a serving workload
    that `bloomperf serve` swept (no backend runs it; docs/serving.md)."""
    return (*backend_names(), *(serving_row(shape) for shape in SHAPES))


def serving_row(workload: str) -> str:
    return f"serve-{workload}"


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; a bad entry point is one line naming it."""
    from bloomperf.backends.base import Backend

    if name in BACKEND_CLASSES:
        module_name, _, class_name = BACKEND_CLASSES[name].partition(":")
        cls: type[Backend] = getattr(importlib.import_module(module_name), class_name)
        return cls
    if name not in installed_entry_points():
        raise BloomperfError(f"unknown backend {name!r} (valid: {', '.join(backend_names())})")
    point = installed_entry_points()[name]
    try:
        loaded = point.load()
    except Exception as exc:  # whatever the outside module raises, it is that module's
        raise BloomperfError(f"{describe(point)}: cannot load it ({exc!r})") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        raise BloomperfError(f"{describe(point)}: not a subclass of bloomperf's Backend")
    if (named := getattr(loaded, "name", None)) != name:
        raise BloomperfError(f"{describe(point)}: the class's name is {named!r}")
    return loaded


def describe(point: EntryPoint) -> str:
    return f"entry point {point.name} = {point.value} (group {ENTRY_POINT_GROUP})"


def row_label(backend: str, dtype: str) -> str:
    """A table row's label, by the backend's display name (by its name where a results file
    names one not installed here)."""
    try:
        return f"{getattr(backend_class(backend), 'display_name', backend)} {dtype}"
    except BloomperfError:
        return f"{backend} {dtype}"
