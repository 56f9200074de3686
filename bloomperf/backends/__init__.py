"""The backend registry: names to implementation modules, imported lazily.

The controller (CLI, pytest plugin) only needs names and static facts; torch, transformers and
DeepSpeed are imported inside worker processes, by ``load_backend``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bloomperf.catalog.dtypes import DTYPES as DTYPES  # the registry's callers read both names here

if TYPE_CHECKING:
    from bloomperf.backends.base import Backend

# name -> "module:Class". Order is the order of rows in tables (the blog's order).
BACKEND_CLASSES: dict[str, str] = {
    "accelerate": "bloomperf.backends.accelerate:AccelerateBackend",
    "ds-inference": "bloomperf.backends.ds_inference:DeepSpeedInferenceBackend",
    "ds-autotp": "bloomperf.backends.ds_inference:DeepSpeedAutoTPBackend",
    "ds-zero": "bloomperf.backends.ds_zero:DeepSpeedZeroBackend",
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKEND_CLASSES)


def backend_class(name: str) -> type[Backend]:
    module_name, _, class_name = BACKEND_CLASSES[name].partition(":")
    module = importlib.import_module(module_name)
    cls: type[Backend] = getattr(module, class_name)
    return cls
