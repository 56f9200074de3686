"""A backend from outside bloomperf/: plain ``generate`` on the same BLOOM, with a static KV
cache (``cache_implementation="static"``: the whole cache allocated once, at its final length,
instead of growing by a token every step).

Everything bloomperf needs to know is a trait of the class; it is registered by one line of
this package's ``pyproject.toml`` (the ``bloomperf.backends`` entry-point group). It declares
no memory model: bloomperf then predicts nothing for its cells and skips none on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from bloomperf.backends.base import Backend, LoadRequest
from bloomperf.backends.compat import dtype_argument
from bloomperf.catalog.dtypes import load_torch_dtype


class StaticCacheBackend(Backend):
    name: ClassVar[str] = "static-cache"
    display_name: ClassVar[str] = "Static-Cache"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16")
    default_dtypes: ClassVar[Mapping[str, tuple[str, ...]]] = {"cpu": ("fp32",), "cuda": ("bf16",)}

    def load(self, request: LoadRequest) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self._device = torch.device("cuda:0" if request.device == "cuda" else "cpu")
        torch_dtype = dtype_argument(load_torch_dtype(request.dtype))
        model = AutoModelForCausalLM.from_pretrained(str(request.checkpoint), **torch_dtype)
        self.model = model.to(self._device).eval()

    def generate_options(self) -> dict[str, Any]:
        return {"cache_implementation": "static"}

    def details(self) -> dict[str, Any]:
        return {"path": "generate, static KV cache"}

    def close(self) -> None:
        del self.model
