"""The backend interface: load once, generate many times, close.

A backend runs inside a worker process (one per rank). The worker owns timing, inputs and the
protocol; a backend only knows how to put BLOOM on devices and call ``generate``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bloomperf.config.backend import BackendOptions

if TYPE_CHECKING:
    import torch


DtypesByDevice = Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class LoadRequest:
    checkpoint: Path  # a saved model folder: config.json, *.safetensors, tokenizer files
    dtype: str  # one of bloomperf.backends.DTYPES
    device: str  # "cuda" or "cpu"
    rank: int = 0
    world_size: int = 1
    options: BackendOptions = field(default_factory=BackendOptions)  # from the run's options


class Backend(ABC):
    """A backend's traits are all the core asks about it (docs/extending.md)."""

    name: ClassVar[str]  # as given to --backends and stored in results
    display_name: ClassVar[str]  # the row label in tables ("DeepSpeed-Inference")
    dtypes: ClassVar[tuple[str, ...]]  # every dtype it can run
    # Per device ("cuda", "cpu"), the dtypes a run without --dtypes measures.
    default_dtypes: ClassVar[DtypesByDevice] = {}
    default_on: ClassVar[tuple[str, ...]] = ()  # devices whose run without --backends has it
    # A key of ``analysis.memory_model.MEMORY_MODELS``, or None: never predicted, so its cells
    # are never skipped on a prediction (only on a measured OOM).
    memory_model: ClassVar[str | None] = None
    # One process spreading the model over every visible GPU (accelerate's device map), rather
    # than one rank per GPU: decides which GPUs the group is given, sampled and locked.
    spans_visible_gpus: ClassVar[bool] = False
    rank_per_gpu: ClassVar[bool] = False  # DeepSpeed's groups: a rank per GPU, or --tp ranks
    # Whether loading may JIT-build DeepSpeed ops (in TORCH_EXTENSIONS_DIR, under the build lock).
    builds_ops: ClassVar[bool] = False
    model: Any = None  # the loaded model (or DeepSpeed's module wrapping it), set by ``load``
    _device: torch.device  # where inputs go, set by ``load``
    _cuda_devices: tuple[int, ...] | None = None  # what ``synchronize`` waits for, once loaded

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        """Why this backend cannot run ``dtype`` here (a skip reason), or None if it can.

        Called in the controller, so it must not import torch or touch a GPU.
        """
        if dtype not in cls.dtypes:
            return f"{cls.name} does not support {dtype} (supported: {', '.join(cls.dtypes)})"
        return None

    @classmethod
    def interpreter(cls) -> str | None:
        """The Python that runs this backend's workers (None: the controller's own). A
        backend whose library lives in another venv names that venv's interpreter."""
        return None

    @classmethod
    def world_size(cls, device: str, visible_devices: int, options: BackendOptions) -> int:
        """How many ranks the worker group needs (1: a plain process)."""
        if not cls.rank_per_gpu:
            return 1
        return options.tp or (max(1, visible_devices) if device == "cuda" else 1)

    @classmethod
    def group_per_batch(cls, options: BackendOptions) -> bool:
        """Whether each batch size needs a worker group of its own (a fresh load) rather than
        the (backend, dtype) group that served the previous batch."""
        return False

    @classmethod
    def shard_mismatch(cls, marker: Mapping[str, Any], world_size: int) -> str | None:
        """Why a ``--sharded`` folder (its marker) does not fit the group, or None."""
        return None

    @classmethod
    def host_memory_reason(
        cls, checkpoint: Path, world_size: int, dtype: str, options: BackendOptions
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
        with self.inference_context():
            output: torch.Tensor = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                **self.generate_options(),
                **generate_kwargs,
            )
        return output

    def next_token_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """The logits of the token after each prompt: one forward pass, for the output check.

        Only the last position's logits are computed where the model allows it, so the check
        allocates no more than ``generate``'s own first step.
        """
        keep = {"logits_to_keep": 1} if accepts(self.model.forward, "logits_to_keep") else {}
        with self.inference_context():
            output = self.model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **keep
            )
        logits: torch.Tensor = output.logits[:, -1, :]
        return logits

    def inference_context(self) -> AbstractContextManager[Any]:
        """What ``generate`` runs under: no autograd, and no version counters either."""
        import torch

        return torch.inference_mode()

    def generate_options(self) -> dict[str, Any]:
        """Backend-specific ``generate`` arguments (e.g. ZeRO's ``synced_gpus``)."""
        return {}

    @property
    def input_device(self) -> torch.device:
        """Where input ids must be placed before ``generate`` (set by ``load``)."""
        return self._device

    def cuda_devices(self) -> tuple[int, ...]:
        """The CUDA devices this rank's model runs on: the input device and every GPU of
        accelerate's device map (a model spread over 8 GPUs queues work on all 8)."""
        import torch

        if getattr(self, "model", None) is None:  # not loaded yet: the current device only
            return (torch.cuda.current_device(),) if torch.cuda.is_initialized() else ()
        if self._cuda_devices is None:  # the map does not change once loaded
            places = [
                self.input_device,
                *(getattr(self.model, "hf_device_map", None) or {}).values(),
            ]
            self._cuda_devices = cuda_indices(places)
        return self._cuda_devices

    def synchronize(self) -> None:
        """Wait for queued work on every device of the model, so a timer read after this is
        honest (``torch.cuda.synchronize()`` alone waits for the current device only)."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for index in self.cuda_devices():
                torch.cuda.synchronize(index)

    def details(self) -> dict[str, Any]:
        """What actually ran (implementation path, TP degree, device map...), for the results."""
        return {}

    def close(self) -> None:
        """Release what ``load`` took. The worker process exits afterwards anyway."""


def cuda_indices(places: list[Any]) -> tuple[int, ...]:
    """The CUDA device indices among device-map values and devices (0, "cuda:1", "cpu", "disk",
    torch.device("cuda", 2)...), sorted, each once."""
    import torch

    found: set[int] = set()
    for place in places:
        if isinstance(place, int) and not isinstance(place, bool):
            found.add(place)
        elif isinstance(place, (str, torch.device)) and str(place).startswith("cuda"):
            index = torch.device(place).index
            found.add(torch.cuda.current_device() if index is None else index)
    return tuple(sorted(found))


def accepts(function: Any, argument: str) -> bool:
    """Whether ``function`` takes ``argument`` by name (transformers 5's BLOOM takes
    ``logits_to_keep``; 4.43's rejects unknown arguments)."""
    try:
        return argument in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
