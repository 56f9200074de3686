"""accelerate's device map for a BLOOM shape, computed by transformers and accelerate themselves
on the meta device: no weight is read or allocated, so bloom-176b plans from its config alone.

The steps are those of ``from_pretrained(device_map="auto", max_memory=..., quantization_config=
BitsAndBytesConfig(load_in_8bit=True))`` in transformers 5 (``_get_device_map``): the 8-bit
quantizer replaces the linear layers (keeping ``lm_head`` and the tied embedding in fp16),
``get_balanced_memory`` balances the map, the quantizer's ``adjust_max_memory`` shrinks it,
``infer_auto_device_map`` places the modules and the quantizer's ``validate_environment`` refuses
any placement on the CPU or the disk. They are called one by one so that a refused map can still
be shown; ``tests/test_accelerate_map.py`` checks they agree with ``_get_device_map`` itself.
Imports torch and transformers: controller-side use is limited to ``run --dry-run``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from bloomperf.catalog.dtypes import load_torch_dtype
from bloomperf.catalog.models import ModelShape, bloom_config

_BLOCK = re.compile(r"^transformer\.h\.(\d+)$")


@dataclass(frozen=True)
class DeviceMap:
    """Where accelerate puts each module, and what it says about it."""

    placement: dict[str, int | str]  # module name ("" for the whole model) -> device
    bytes_per_device: dict[str, int]  # str(device) -> weight bytes as accelerate counts them
    planned_max_memory: dict[str, int]  # str(device) -> bytes after balancing and the quantizer
    refused: str  # transformers' error when it would refuse to load this map, else ""

    @property
    def offloaded(self) -> list[str]:
        return [name for name, device in self.placement.items() if device in ("cpu", "disk")]


def meta_model(shape: ModelShape, layers: int, dtype: str) -> tuple[Any, Any]:
    """BloomForCausalLM on the meta device, as ``from_pretrained`` prepares it before loading:
    (model, the quantizer or None)."""
    import torch
    from transformers import BitsAndBytesConfig, BloomConfig, BloomForCausalLM
    from transformers.quantizers.auto import get_hf_quantizer
    from transformers.utils import ContextManagers

    config = BloomConfig(**bloom_config(shape, layers))
    quantization = BitsAndBytesConfig(load_in_8bit=True) if dtype == "int8" else None
    quantizer, config, device_map = get_hf_quantizer(config, quantization, "auto", True, {})
    torch_dtype = load_torch_dtype(dtype)
    # from_pretrained's own context (the meta device, the dtype, weights not yet tied): the
    # 8-bit layers must be made inside it too, or their biases come out fp32, not fp16.
    contexts = BloomForCausalLM.get_init_context(torch_dtype, quantizer is not None, False, None)
    with ContextManagers(contexts):
        # A 176B model built for real takes the machine's memory (14 GB for the embedding
        # alone) before anything could notice: refuse unless the meta device is in effect.
        if torch.empty(0).device.type != "meta":
            raise RuntimeError("meta_model: torch.device('meta') is not in effect; not building")
        model = BloomForCausalLM(config)
        if quantizer is not None:
            quantizer.preprocess_model(
                model=model, dtype=torch_dtype, device_map=device_map, checkpoint_files=None
            )
    return model, quantizer


def infer_device_map(
    shape: ModelShape, layers: int, dtype: str, max_memory: dict[int | str, int]
) -> DeviceMap:
    """The device map ``from_pretrained`` would use with ``max_memory`` (the map bloomperf's
    accelerate backend passes), without loading anything."""
    from transformers.integrations.accelerate import (
        compute_module_sizes,
        get_balanced_memory,
        infer_auto_device_map,
    )

    model, quantizer = meta_model(shape, layers, dtype)
    # accelerate warns for every GPU index this machine lacks: a plan is for another machine.
    logging.getLogger("accelerate.utils.modeling").setLevel(logging.ERROR)
    no_split = model._no_split_modules
    planned = get_balanced_memory(
        model, dict(max_memory), no_split_module_classes=no_split, hf_quantizer=quantizer
    )
    if quantizer is not None:
        planned = quantizer.adjust_max_memory(planned)
    placement = infer_auto_device_map(
        model, max_memory=planned, no_split_module_classes=no_split, hf_quantizer=quantizer
    )
    refused = ""
    if quantizer is not None:
        try:
            quantizer.validate_environment(device_map=placement)
        except ValueError as exc:
            refused = str(exc).split(". ")[0]
    sizes, _ = compute_module_sizes(model, quantizer)
    per_device: dict[str, int] = {}
    for name, device in placement.items():
        per_device[str(device)] = per_device.get(str(device), 0) + int(sizes.get(name, 0))
    return DeviceMap(
        dict(placement), per_device, {str(k): int(v) for k, v in planned.items()}, refused
    )


def summarise(placement: dict[str, int | str]) -> dict[str, list[str]]:
    """Per device, its modules with consecutive blocks folded: ``transformer.h.0-9``."""
    grouped: dict[str, list[str]] = {}
    blocks: dict[str, list[int]] = {}
    for name, device in placement.items():
        match = _BLOCK.match(name)
        if match:
            blocks.setdefault(str(device), []).append(int(match.group(1)))
        else:
            grouped.setdefault(str(device), []).append(name or "(whole model)")
    for device, indices in blocks.items():
        grouped.setdefault(device, []).extend(fold_ranges(sorted(indices)))
    return grouped


def fold_ranges(indices: list[int]) -> list[str]:
    """[0, 1, 2, 5] -> ["transformer.h.0-2", "transformer.h.5"]."""
    folded: list[str] = []
    start = previous = indices[0] if indices else 0
    for index in [*indices[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        span = f"{start}" if start == previous else f"{start}-{previous}"
        folded.append(f"transformer.h.{span}")
        if index is not None:
            start = previous = index
    return folded if indices else []
