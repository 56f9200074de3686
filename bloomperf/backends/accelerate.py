"""Hugging Face Accelerate: ``from_pretrained(device_map="auto")``, naive pipeline parallelism.

As in transformers-bloom-inference's ``bloom-accelerate-inference.py``: layers are spread over
the GPUs by a ``max_memory`` map, int8 goes through bitsandbytes, and what does not fit can be
offloaded to CPU RAM or to disk.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

from bloomperf.backends.base import Backend, LoadRequest
from bloomperf.backends.compat import dtype_argument
from bloomperf.errors import BloomperfError

if TYPE_CHECKING:
    import torch

GIB = 2**30
# The blog's hand-made map for BLOOM-176B on 8 × A100-80GB: GPU 0 holds no weights so it has
# room for activations and logits; the other seven hold the layers.
BLOG_MAX_MEMORY: dict[str, dict[int | str, str]] = {
    "bf16": {0: "0GIB", **{i: "51GIB" for i in range(1, 8)}},
    "fp16": {0: "0GIB", **{i: "51GIB" for i in range(1, 8)}},
    "int8": {0: "0GIB", **{i: "26GIB" for i in range(1, 8)}},
}
# bloom-accelerate-inference.py's margin over an even split: layer sizes differ and the first
# and last GPUs also hold embeddings.
EVEN_SPLIT_MARGIN = 1.10
OFFLOAD_CHOICES = ("none", "cpu", "disk")


def torch_dtype(dtype: str) -> torch.dtype:
    import torch

    # int8 weights are quantised by bitsandbytes; the rest of the model stays in fp16 (the blog).
    return {
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "int8": torch.float16,
    }[dtype]


def parse_max_memory(text: str) -> dict[int | str, str]:
    """``"0:0GiB,1:51GiB,cpu:100GiB"`` → {0: "0GiB", 1: "51GiB", "cpu": "100GiB"}."""
    result: dict[int | str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition(":")
        if not sep or not value:
            raise BloomperfError(
                f"--bloomperf-max-memory: {part!r} is not DEVICE:SIZE (e.g. 0:51GiB,cpu:100GiB)"
            )
        result[int(key) if key.isdigit() else key] = value
    return result


def even_split_max_memory(parameters: int, dtype: str, n_gpus: int) -> dict[int | str, int]:
    """The weights split evenly over the GPUs, plus a margin (what the blog's script derives)."""
    per_gpu = int(weight_bytes(parameters, dtype) / n_gpus * EVEN_SPLIT_MARGIN)
    return {i: per_gpu for i in range(n_gpus)}


def weight_bytes(parameters: int, dtype: str) -> int:
    return parameters * (1 if dtype == "int8" else (4 if dtype == "fp32" else 2))


def max_memory_map(request: LoadRequest, parameters: int) -> dict[int | str, Any] | None:
    choice = str(request.options.get("max_memory") or "auto")
    if request.device == "cpu":
        if request.options.get("offload") == "disk":
            # Keep part of the weights in RAM so the rest really goes through the disk. (Below
            # about 3/4, accelerate's reserve for the largest layer sends everything to disk.)
            share = weight_bytes(parameters, request.dtype) * 3 // 4
            return {"cpu": request.options.get("cpu_memory") or share}
        return None
    import torch

    n_gpus = torch.cuda.device_count()
    if choice == "blog":
        if request.dtype not in BLOG_MAX_MEMORY:
            raise BloomperfError(f"--bloomperf-max-memory: the blog's map has no {request.dtype}")
        return {k: v for k, v in BLOG_MAX_MEMORY[request.dtype].items() if int(k) < n_gpus}
    if choice == "auto":
        limits: dict[int | str, Any] = dict(
            even_split_max_memory(parameters, request.dtype, n_gpus)
        )
    else:
        limits = dict(parse_max_memory(choice))
    if request.options.get("offload") in ("cpu", "disk"):
        limits["cpu"] = request.options.get("cpu_memory") or "1000GiB"
    return limits


def silence_bitsandbytes() -> None:
    # bitsandbytes on CPU warns about a cast on every matmul: thousands of lines per cell.
    warnings.filterwarnings("ignore", module="bitsandbytes")
    warnings.filterwarnings("ignore", message=".*MatMul8bitLt.*")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


class AccelerateBackend(Backend):
    name: ClassVar[str] = "accelerate"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16", "int8")

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: dict[str, Any]) -> str | None:
        reason = super().unmet_requirement(dtype, device, options)
        if reason:
            return reason
        if dtype == "int8":
            from importlib.util import find_spec

            if find_spec("bitsandbytes") is None:
                return "int8 needs bitsandbytes (pip install 'bloomperf[gpu]')"
        return None

    def import_dependencies(self) -> None:
        super().import_dependencies()
        import accelerate  # noqa: F401

    def load(self, request: LoadRequest) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(request.checkpoint))
        parameters = bloom_parameters(config)
        kwargs: dict[str, Any] = {
            **dtype_argument(torch_dtype(request.dtype)),
            "device_map": "auto" if request.device == "cuda" else "cpu",
        }
        limits = max_memory_map(request, parameters)
        if limits is not None:
            kwargs["max_memory"] = limits
            kwargs["device_map"] = "auto"
        if request.options.get("offload") in ("cpu", "disk"):
            kwargs["device_map"] = "auto"
        if request.options.get("offload") == "disk":
            kwargs["offload_folder"] = str(request.options["offload_folder"])
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


def bloom_parameters(config: Any) -> int:
    h, layers, vocab = config.hidden_size, config.n_layer, config.vocab_size
    return int(layers * (12 * h * h + 13 * h) + vocab * h + 4 * h)
