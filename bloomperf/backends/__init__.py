"""The backend registry: the built-in backends in the blog's order, then those that installed
packages add through the ``bloomperf.backends`` entry-point group.

Everything the core needs to know about a backend is a trait of its class (``base.Backend``);
the core asks ``backend_class(name)`` and never names one. The controller (CLI, pytest plugin)
only reads traits; torch, transformers and DeepSpeed are imported inside worker processes.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from typing import TYPE_CHECKING

from bloomperf.catalog.dtypes import DTYPES as DTYPES  # the registry's callers read both names here
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
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKEND_CLASSES)  # the built-ins only


@functools.cache
def installed_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The backends installed packages declare, by name (read once: names only, nothing is
    imported until a backend is used). A built-in's name cannot be taken over."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in BACKEND_CLASSES:
            raise BloomperfError(f"{describe(point)}: {point.name!r} is a built-in backend's name")
        found.setdefault(point.name, point)
    return found


def backend_names() -> tuple[str, ...]:
    """Every backend: the built-ins in the blog's order, then the entry points'."""
    return (*BACKEND_CLASSES, *installed_entry_points())


def backend_class(name: str) -> type[Backend]:
    """The class of backend ``name``; a bad entry point is one line naming it."""
    if name in BACKEND_CLASSES:
        module_name, _, class_name = BACKEND_CLASSES[name].partition(":")
        cls: type[Backend] = getattr(importlib.import_module(module_name), class_name)
        return cls
    point = installed_entry_points().get(name)
    if point is None:
        raise BloomperfError(f"unknown backend {name!r} (valid: {', '.join(backend_names())})")
    return loaded_backend(point)


def loaded_backend(point: importlib.metadata.EntryPoint) -> type[Backend]:
    from bloomperf.backends.base import Backend

    try:
        loaded = point.load()
    except Exception as exc:  # whatever the outside module raises: it is that module's fault
        message = f"{describe(point)}: cannot load it ({type(exc).__name__}: {exc})"
        raise BloomperfError(message) from exc
    if not (isinstance(loaded, type) and issubclass(loaded, Backend)):
        raise BloomperfError(f"{describe(point)}: not a subclass of bloomperf's Backend")
    if getattr(loaded, "name", None) != point.name:
        raise BloomperfError(
            f"{describe(point)}: the class's name is {getattr(loaded, 'name', None)!r}"
        )
    return loaded


def describe(point: importlib.metadata.EntryPoint) -> str:
    return f"entry point {point.name} = {point.value} (group {ENTRY_POINT_GROUP})"


def display_name(name: str) -> str:
    """How tables name a backend (the blog's names); a backend not installed here (a results
    file from elsewhere) by its own name."""
    try:
        return backend_class(name).display_name
    except BloomperfError:
        return name


def row_label(backend: str, dtype: str) -> str:
    """A table row's label: ``DeepSpeed-Inference fp16``."""
    return f"{display_name(backend)} {dtype}"
