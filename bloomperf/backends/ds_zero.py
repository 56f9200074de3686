"""DeepSpeed ZeRO-3 inference, as in the blog's ``bloom-ds-zero-inference.py``.

``HfDeepSpeedConfig`` is created before ``from_pretrained`` so that transformers partitions the
weights across the ranks while loading (no rank ever holds the whole model), then
``deepspeed.initialize`` wraps the model; ``generate`` runs with ``synced_gpus`` when there are
several ranks, because every rank must take part in each forward's parameter gathering even
after its own sequences finish. Parameters can be offloaded to CPU or to NVMe (option
``zero_offload``: none | cpu | nvme, with ``nvme_path``).

Every rank generates its own batch. The worker feeds all ranks the same inputs (the blog's
script did too); the aggregate throughput of ranks serving independent inputs is world_size
times the batch per cycle, reported in ``details()["aggregate_batch_factor"]``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

from bloomperf.backends.base import Backend, DtypesByDevice, LoadRequest
from bloomperf.backends.compat import dtype_argument, installed_version
from bloomperf.backends.ds_ranks import (
    deepspeed_missing,
    join_rank_group,
    timed_step,
)
from bloomperf.catalog.dtypes import load_torch_dtype
from bloomperf.config.backend import BackendOptions, DsZeroOptions
from bloomperf.core.errors import BloomperfError

OFFLOAD_CHOICES = ("none", "cpu", "nvme")


class DeepSpeedZeroBackend(Backend):
    builds_ops: ClassVar[bool] = True
    rank_per_gpu: ClassVar[bool] = True
    name: ClassVar[str] = "ds-zero"
    display_name: ClassVar[str] = "DeepSpeed-ZeRO"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16")
    default_dtypes: ClassVar[DtypesByDevice] = {"cuda": ("bf16",), "cpu": ("fp32",)}
    default_on: ClassVar[tuple[str, ...]] = ("cuda",)
    memory_model: ClassVar[str | None] = "zero-3"

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        reason = super().unmet_requirement(dtype, device, options) or deepspeed_missing()
        if reason:
            return reason
        offload = options.zero_offload
        if offload not in OFFLOAD_CHOICES:
            return f"zero_offload={offload} is not one of {', '.join(OFFLOAD_CHOICES)}"
        if offload == "nvme":
            return nvme_unsupported(options)
        return None

    def prepare(self, request: LoadRequest) -> None:
        """Importing DeepSpeed and joining the rank group (on CPU: the shared-memory all-reduce's
        JIT build) happen before the load clock, each timed on its own, as for ds-inference."""
        super().prepare(request)
        self._prepare_s: dict[str, float] = {}
        with timed_step(self._prepare_s, "import_s"):
            import deepspeed  # noqa: F401
            from transformers.integrations import HfDeepSpeedConfig  # noqa: F401
        with timed_step(self._prepare_s, "rendezvous_s"):
            self._local_rank = join_rank_group(request.device)

    def load(self, request: LoadRequest) -> None:
        import deepspeed
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.integrations import HfDeepSpeedConfig

        local_rank = self._local_rank
        self._device = torch.device(f"cuda:{local_rank}" if request.device == "cuda" else "cpu")
        self._world_size = request.world_size
        self._offload_option = request.options.zero_offload
        config = AutoConfig.from_pretrained(str(request.checkpoint))
        ds_config = merged_config(
            zero3_config(request, config.hidden_size), request.options.ds_config or {}
        )
        self._ds_config = ds_config
        # Must exist (and stay referenced) before from_pretrained: it is what makes transformers
        # load straight into ZeRO-3 partitions.
        self._hf_ds_config = HfDeepSpeedConfig(ds_config)
        model = AutoModelForCausalLM.from_pretrained(
            str(request.checkpoint), **dtype_argument(load_torch_dtype(request.dtype))
        )
        engine = deepspeed.initialize(model=model, config_params=ds_config)[0]
        engine.module.eval()
        self.engine = engine
        self.model = engine.module

    def generate_options(self) -> dict[str, Any]:
        # Every ZeRO-3 rank must keep calling forward (to serve all-gathers) until all are done.
        return {"synced_gpus": self._world_size > 1}

    def inference_context(self) -> AbstractContextManager[Any]:
        """``no_grad``, not ``inference_mode``: ZeRO-3 gathers each parameter for its forward
        and releases it by pointing its data at a fresh empty tensor; under inference_mode that
        tensor is an inference tensor, left on every parameter after generate (checked on CPU
        with 1 and 2 ranks), which autograd refuses afterwards ("Inference tensors cannot be
        saved for backward", the conflict ArcticTraining met with ZeRO-3). DeepSpeed's own
        gather and release code runs under no_grad; what inference_mode adds is skipping
        version counters, nothing next to ZeRO-3's all-gathers."""
        import torch

        return torch.no_grad()

    def details(self) -> dict[str, Any]:
        return {
            "path": "ds-zero",
            # What DeepSpeed's engine applied: --ds-config may set another stage than the
            # blog's 3 (bloomperf's default), and the figures are that stage's.
            "zero_stage": int(self.engine.zero_optimization_stage()),
            "ranks": self._world_size,
            "offload": applied_offload(self.engine),
            "zero_offload": self._offload_option,  # asked for; --ds-config may override it
            "checkpoint": "hf",
            "kernel_inject": False,
            # Each rank could serve its own batch; the measured cycle runs the same one on all.
            "aggregate_batch_factor": self._world_size,
            "partition": zero_partition(self.model),
            "deepspeed": installed_version("deepspeed"),
            "ds_config": self._ds_config,
            "prepare_s": dict(self._prepare_s),
        }

    def close(self) -> None:
        del self.model, self.engine


def zero_partition(model: Any) -> dict[str, Any] | None:
    """ZeRO-3's own record for the first query_key_value weight: its full size (ds_numel), the
    part this rank holds (ds_tensor), which proves the parameters really are partitioned, and
    where that part lives (a GPU, "cpu" when offloaded there, or "nvme" when swapped out)."""
    for name, parameter in model.named_parameters():
        if name.endswith("query_key_value.weight") and hasattr(parameter, "ds_tensor"):
            part = parameter.ds_tensor
            on_nvme = getattr(part, "final_location", None) == "nvme"
            return {
                "ds_numel": int(parameter.ds_numel),
                "rank_numel": int(part.numel()),
                "device": "nvme" if on_nvme else str(part.device),
            }
    return None


def applied_offload(engine: Any) -> str:
    """The parameter offload ZeRO-3's engine applied (none | cpu | nvme), read from its
    DeepSpeedZeRoOffload after ``deepspeed.initialize``, not from the zero_offload option: a
    ``--ds-config`` offload_param overrides that option, and on a CPU run the partition's
    device reads "cpu" either way."""
    offload = getattr(engine.optimizer, "parameter_offload", engine.optimizer)
    device = getattr(offload, "offload_device", None)
    return "none" if device is None else str(getattr(device, "value", device))


def zero3_config(request: LoadRequest, hidden_size: int) -> dict[str, Any]:
    """The blog script's ZeRO-3 inference config, with this run's dtype and offload."""
    offload = request.options.zero_offload
    zero: dict[str, Any] = {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": hidden_size * hidden_size,
        "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
        "stage3_param_persistence_threshold": 0,
    }
    if offload == "cpu":
        zero["offload_param"] = {"device": "cpu", "pin_memory": request.device == "cuda"}
    elif offload == "nvme":
        zero["offload_param"] = {
            "device": "nvme",
            "nvme_path": str(nvme_folder(request.options)),
            "pin_memory": request.device == "cuda",
            "buffer_count": 4,
            "buffer_size": max(10**8, 4 * hidden_size * hidden_size),
        }
        zero["aio"] = {
            "block_size": 1048576,
            "queue_depth": 8,
            "single_submit": False,
            "overlap_events": True,
            "thread_count": 1,
        }
    return {
        "bf16": {"enabled": request.dtype == "bf16"},
        "fp16": {"enabled": request.dtype == "fp16"},
        "zero_optimization": zero,
        "steps_per_print": 2000,
        "train_batch_size": request.world_size,
        "train_micro_batch_size_per_gpu": 1,
        "wall_clock_breakdown": False,
    }


def merged_config(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``--ds-config`` over bloomperf's defaults: nested objects merge key by key, any other
    value (lists included) replaces the default."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merged_config(merged[key], value)
        else:
            merged[key] = value
    return merged


def nvme_folder(options: DsZeroOptions) -> Path:
    raw = options.nvme_path
    if not raw:
        raise BloomperfError("nvme_path: zero_offload=nvme needs a folder on the NVMe drive")
    folder = Path(raw)
    if not folder.is_dir():
        raise BloomperfError(f"nvme_path: {folder} is not a folder")
    return folder


def nvme_unsupported(options: DsZeroOptions) -> str | None:
    """Why NVMe offload cannot run here: its async I/O op must be buildable (libaio)."""
    if not options.nvme_path:
        return "zero_offload=nvme needs the nvme_path option (a folder on the NVMe drive)"
    # ZeRO's NVMe offload goes through the async_io op, JIT-built against libaio; checking the
    # builder imports DeepSpeed, which the controller avoids, so look for the library itself.
    from ctypes.util import find_library

    if find_library("aio") is None:
        return "NVMe offload needs DeepSpeed's async_io op, built against libaio (libaio-dev)"
    return None
