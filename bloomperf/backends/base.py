"""The backend interface: load once, generate many times, close.

A backend runs inside a worker process (one per rank). The worker owns timing, inputs and the
protocol; a backend only knows how to put BLOOM on devices and call ``generate``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LoadRequest:
    checkpoint: Path  # a saved model folder: config.json, *.safetensors, tokenizer files
    dtype: str  # one of bloomperf.backends.DTYPES
    device: str  # "cuda" or "cpu"
    rank: int = 0
    world_size: int = 1
    options: dict[str, Any] = field(default_factory=dict)  # backend options from CLI/plugin


class Backend(ABC):
    name: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]]
    # One process spreading the model over every visible GPU (accelerate's device map), rather
    # than one rank per GPU: decides which GPUs the group is given, sampled and locked.
    spans_visible_gpus: ClassVar[bool] = False
    model: Any  # the loaded model (or DeepSpeed's module wrapping it), set by ``load``
    _device: torch.device  # where inputs go, set by ``load``

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: dict[str, Any]) -> str | None:
        """Why this backend cannot run ``dtype`` here (a skip reason), or None if it can.

        Called in the controller, so it must not import torch or touch a GPU.
        """
        if dtype not in cls.dtypes:
            return f"{cls.name} does not support {dtype} (supported: {', '.join(cls.dtypes)})"
        return None

    @classmethod
    def world_size(cls, device: str, visible_devices: int, options: dict[str, Any]) -> int:
        """How many ranks the worker group needs (1: a plain process)."""
        return 1

    @classmethod
    def host_memory_reason(
        cls, checkpoint: Path, world_size: int, dtype: str, options: dict[str, Any]
    ) -> str | None:
        """Why the group's ranks would not fit in host RAM while loading (a skip reason, with
        the figures), or None. Controller-side: reads file sizes, imports nothing heavy."""
        return None

    def prepare(self, request: LoadRequest) -> None:
        """What must happen before the load clock starts (imports, rendezvous, JIT builds)."""
        self.import_dependencies()

    def import_dependencies(self) -> None:
        """Import what ``load`` needs, so load time does not include Python import time."""
        import transformers.models.bloom.modeling_bloom  # noqa: F401

    @abstractmethod
    def load(self, request: LoadRequest) -> None:
        """Build the model ready to generate. Everything in here counts as load time."""

    def generate(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generate_kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """The output token ids (prompt + new tokens) for one batch: ``model.generate``."""
        import torch

        with torch.inference_mode():
            output: torch.Tensor = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                **self.generate_options(),
                **generate_kwargs,
            )
        return output

    def generate_options(self) -> dict[str, Any]:
        """Backend-specific ``generate`` arguments (e.g. ZeRO's ``synced_gpus``)."""
        return {}

    @property
    def input_device(self) -> torch.device:
        """Where input ids must be placed before ``generate`` (set by ``load``)."""
        return self._device

    def synchronize(self) -> None:
        """Wait for queued device work, so a timer read after this is honest."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def details(self) -> dict[str, Any]:
        """What actually ran (implementation path, TP degree, device map...), for the results."""
        return {}

    def close(self) -> None:
        """Release what ``load`` took. The worker process exits afterwards anyway."""
