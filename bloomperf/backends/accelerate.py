"""Hugging Face Accelerate: ``from_pretrained(device_map="auto")``, naive pipeline parallelism.

As in transformers-bloom-inference's ``bloom-accelerate-inference.py``: layers are spread over
the GPUs by a ``max_memory`` map, int8 goes through bitsandbytes, and what does not fit can be
offloaded to CPU RAM or to disk.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, ClassVar

from bloomperf.backends.base import Backend, DtypesByDevice, LoadRequest
from bloomperf.backends.compat import dtype_argument, int8_on_cpu_reason
from bloomperf.catalog.accelerate_map import max_memory_map, weight_caps
from bloomperf.catalog.dtypes import load_torch_dtype
from bloomperf.catalog.models import ModelShape
from bloomperf.catalog.weights import model_weight_bytes
from bloomperf.config.backend import AccelerateOptions, BackendOptions


def max_memory_limits(request: LoadRequest, shape: ModelShape) -> dict[int | str, Any] | None:
    """The ``max_memory`` for ``from_pretrained``, from the one rule in ``accelerate_map``."""
    if request.device == "cpu":
        if request.options.offload == "disk":
            # Keep part of the weights in RAM so the rest really goes through the disk. (Below
            # about 3/4, accelerate's reserve for the largest layer sends everything to disk.)
            return {"cpu": model_weight_bytes(shape, shape.n_layer, request.dtype) * 3 // 4}
        return None
    import torch

    n_gpus = torch.cuda.device_count()
    memory = torch.cuda.get_device_properties(0).total_memory
    return gpu_max_memory(request.options, shape, request.dtype, n_gpus, memory)


def gpu_max_memory(
    options: AccelerateOptions, shape: ModelShape, dtype: str, n_gpus: int, gpu_memory_bytes: int
) -> dict[int | str, Any]:
    """The map for ``n_gpus`` GPUs (also what ``run --dry-run`` hands accelerate's planner)."""
    caps = weight_caps(options.max_memory, shape, shape.n_layer, dtype, n_gpus, gpu_memory_bytes)
    limits: dict[int | str, Any] = dict(max_memory_map(caps, dtype))
    if options.offload in ("cpu", "disk"):
        limits["cpu"] = "1000GiB"
    return limits


def silence_bitsandbytes() -> None:
    # bitsandbytes on CPU warns about a cast on every matmul: thousands of lines per cell.
    warnings.filterwarnings("ignore", module="bitsandbytes")
    warnings.filterwarnings("ignore", message=".*MatMul8bitLt.*")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


class AccelerateBackend(Backend):
    name: ClassVar[str] = "accelerate"
    display_name: ClassVar[str] = "Accelerate"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16", "int8")
    # The blog's rows on GPU; on CPU the tiny-model matrix that CI runs.
    default_dtypes: ClassVar[DtypesByDevice] = {
        "cuda": ("bf16", "int8"),
        "cpu": ("fp32", "bf16", "int8"),
    }
    default_on: ClassVar[tuple[str, ...]] = ("cuda", "cpu")
    memory_model: ClassVar[str | None] = "device-map"
    spans_visible_gpus: ClassVar[bool] = True

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        reason = super().unmet_requirement(dtype, device, options)
        if reason:
            return reason
        if dtype == "int8":
            from importlib.util import find_spec

            if find_spec("bitsandbytes") is None:
                return "int8 needs bitsandbytes (pip install 'bloomperf[gpu]')"
            if device == "cpu":
                return int8_on_cpu_reason()
        return None

    def import_dependencies(self) -> None:
        super().import_dependencies()
        import accelerate  # noqa: F401

    def load(self, request: LoadRequest) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(request.checkpoint))
        kwargs: dict[str, Any] = {
            **dtype_argument(load_torch_dtype(request.dtype)),
            "device_map": "auto" if request.device == "cuda" else "cpu",
        }
        limits = max_memory_limits(request, config_shape(config))
        if limits is not None:
            kwargs["max_memory"] = limits
            kwargs["device_map"] = "auto"
        if request.options.offload in ("cpu", "disk"):
            kwargs["device_map"] = "auto"
        if request.options.offload == "disk":
            kwargs["offload_folder"] = request.options.offload_folder
        if request.dtype == "int8":
            from transformers import BitsAndBytesConfig

            silence_bitsandbytes()
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        self.model = AutoModelForCausalLM.from_pretrained(str(request.checkpoint), **kwargs)
        self.model.eval()
        self._device = torch.device("cuda:0" if request.device == "cuda" else "cpu")
        self._device_map = getattr(self.model, "hf_device_map", None)

    def details(self) -> dict[str, Any]:
        placement: dict[str, int] = {}
        for where in (self._device_map or {}).values():
            placement[str(where)] = placement.get(str(where), 0) + 1
        return {"path": "accelerate", "modules_per_device": placement}

    def close(self) -> None:
        del self.model


def config_shape(config: Any) -> ModelShape:
    """The checkpoint's shape, from its config (a registry shape or any BLOOM checkpoint)."""
    return ModelShape(
        "checkpoint", config.hidden_size, config.n_layer, config.n_head, config.vocab_size
    )
