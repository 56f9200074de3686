"""DeepSpeed-Inference: tensor parallelism with ``deepspeed.init_inference``.

Two backends, so that test ids and results say which path ran:

- ``ds-inference``: DeepSpeed's fused BLOOM kernels (``replace_with_kernel_inject=True``), as in
  the blog. DeepSpeed refuses BLOOM kernel injection with transformers newer than 4.43.4, and the
  kernels are CUDA-only, so this needs the *reference* profile on a GPU; elsewhere it is skipped
  with that reason and never silently replaced by auto-TP.
- ``ds-autotp``: DeepSpeed's automatic tensor parallelism without kernels (any transformers, CPU
  or GPU).

Checkpoint paths (``details()["checkpoint"]``):
- ``unsharded``: the blog's path: the model is built on the meta device and DeepSpeed loads the
  weights from a checkpoints JSON, each rank keeping its share.
- ``pre-sharded``: a folder written by ``bloomperf shard --tp N`` (DeepSpeed's
  ``save_mp_checkpoint_path``); each rank reads only its own shard files.
- ``hf``: ``from_pretrained`` on every rank, then sharding (option ``load=hf``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

from bloomperf.backends.base import Backend, DtypesByDevice, LoadRequest
from bloomperf.backends.compat import (
    deepspeed_arch_list_set,
    dtype_argument,
    installed_version,
    version_tuple,
)
from bloomperf.backends.ds_checkpoint import (
    checkpoints_json,
    host_bytes_per_rank,
    host_memory_reason,
)
from bloomperf.backends.ds_ranks import (
    deepspeed_missing,
    join_rank_group,
    timed_step,
)
from bloomperf.catalog.dtypes import DTYPE_TABLE, load_torch_dtype, stored_torch_dtype
from bloomperf.catalog.topology import host_ram
from bloomperf.config.backend import BackendOptions, TensorParallelOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import get_bool, get_int, read_document

# The last transformers release whose BLOOM DeepSpeed's kernel injection accepts.
KERNEL_TRANSFORMERS_MAX = "4.43.4"
SHARD_MARKER = "bloomperf-shard.json"
LOAD_CHOICES = ("unsharded", "hf")
# Why int8 never runs from from_pretrained (read in DeepSpeed 0.19.8's sources).
INT8_NEEDS_CHECKPOINT = (
    "DeepSpeed quantizes int8 weights only while loading a checkpoint (GroupQuantizer in "
    "module_inject/policy.py maybe_copy); init_inference on a loaded model does not (the "
    "quantize call is commented out in module_inject/containers/base.py) and its int8 "
    "kernels would run on fp16 values copied into int8 buffers"
)


class TensorParallelBackend(Backend):
    builds_ops: ClassVar[bool] = True
    rank_per_gpu: ClassVar[bool] = True
    kernel_inject: ClassVar[bool]

    @classmethod
    def host_memory_reason(
        cls, checkpoint: Path, world_size: int, dtype: str, options: BackendOptions
    ) -> str | None:
        load = load_path(cls.kernel_inject, world_size, options, dtype)
        folder = Path(options.sharded) if options.sharded and load == "pre-sharded" else checkpoint
        scale = DTYPE_TABLE[dtype].load_bytes / file_bytes_per_weight(checkpoint)
        try:
            need = host_bytes_per_rank(load, folder, world_size, scale, not cls.kernel_inject)
        except (BloomperfError, OSError):
            return None  # a missing folder fails at load, with the loader's own message
        ram = host_ram(options.host_ram)
        return host_memory_reason(need, world_size, load, ram.bytes, ram.doubt)

    def prepare(self, request: LoadRequest) -> None:
        """Everything that must not count as load time, each step timed on its own: importing
        DeepSpeed, joining the rank group (on CPU this JIT-builds the shared-memory all-reduce),
        JIT-building the fused kernels, and writing DeepSpeed's copy of the checkpoint."""
        import torch

        super().prepare(request)
        self._prepare_s: dict[str, float] = {}
        with self.timed("import_s"):
            import deepspeed  # noqa: F401
        with self.timed("rendezvous_s"):
            local_rank = join_rank_group(request.device)
        if self.kernel_inject:
            with self.timed("op_build_s"):
                build_fused_kernels()
        self._device = torch.device(f"cuda:{local_rank}" if request.device == "cuda" else "cpu")
        self._tp = request.world_size
        self._checkpoint = load_path(
            self.kernel_inject, request.world_size, request.options, request.dtype
        )
        self._checkpoints_json: Path | None = None
        if self._checkpoint == "unsharded":
            # Timed on every rank: a rank that waited for another to write the copy waited as long.
            with self.timed("checkpoint_copy_s"):
                self._checkpoints_json, _ = checkpoints_json(request.checkpoint)

    def timed(self, name: str) -> AbstractContextManager[None]:
        return timed_step(self._prepare_s, name)

    def load(self, request: LoadRequest) -> None:
        self.model = self.load_weights(request)
        self.model.eval()
        if not self.kernel_inject and self._tp > 1:
            give_alibi_an_explicit_mask(self.model)

    def load_weights(self, request: LoadRequest, **kwargs: Any) -> Any:
        """The model on this rank's devices by the path ``prepare`` chose (``kwargs`` go to
        ``init_inference``: ``bloomperf shard`` passes ``save_mp_checkpoint_path``)."""
        if self._checkpoint == "pre-sharded":
            return self._load_presharded(request, Path(str(request.options.sharded)))
        if self._checkpoint == "hf":
            return self._load_hf(request, **kwargs)
        return self._load_unsharded(request, **kwargs)

    def init_inference(self, model: Any, request: LoadRequest, **kwargs: Any) -> Any:
        import deepspeed

        # Injection JIT-builds whatever op it needs and has not loaded yet: the same list.
        with deepspeed_arch_list_set():
            engine = deepspeed.init_inference(
                model,
                tensor_parallel={"tp_size": request.world_size},
                dtype=stored_torch_dtype(request.dtype),
                replace_with_kernel_inject=self.kernel_inject,
                **kwargs,
            )
        return engine.module

    def _load_hf(self, request: LoadRequest, **kwargs: Any) -> Any:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(request.checkpoint), **dtype_argument(load_torch_dtype(request.dtype))
        )
        return self.init_inference(model, request, **kwargs)

    def _load_unsharded(self, request: LoadRequest, **kwargs: Any) -> Any:
        model = meta_model(request.checkpoint, request.dtype)
        description = self._checkpoints_json
        assert description is not None, "prepare() writes the checkpoints JSON"
        # Auto-TP joins file names to the base_dir argument, not to the JSON's own base_dir.
        return self.init_inference(
            model, request, checkpoint=str(description), base_dir=str(description.parent), **kwargs
        )

    @classmethod
    def shard_mismatch(cls, marker: Mapping[str, Any], world_size: int) -> str | None:
        if marker["tp"] != world_size:
            return (
                f"sharded for TP={marker['tp']}, but {cls.name} runs {world_size} rank(s): "
                f"pass --tp {marker['tp']}, or shard anew"
            )
        if marker["kernel_inject"] != cls.kernel_inject:
            wanted = (
                DeepSpeedInferenceBackend if marker["kernel_inject"] else DeepSpeedAutoTPBackend
            )
            return f"written for {wanted.name}, not {cls.name}"
        return None

    def _load_presharded(self, request: LoadRequest, folder: Path) -> Any:
        reason = self.shard_mismatch(read_shard_marker(folder), request.world_size)
        if reason:
            raise BloomperfError(f"{folder}: {reason}")
        model = meta_model(request.checkpoint, request.dtype)
        if self.kernel_inject:
            # DeepSpeed reads its own ds_inference_config.json: each rank its tp_RR_* files.
            return self.init_inference(model, request, checkpoint=str(folder / DS_SHARD_CONFIG))
        # Auto-TP has no loader for pre-sharded files. The replicated tensors (embeddings,
        # norms) go in first, so that auto-TP cuts lm_head, tied to the embeddings, from real
        # weights: DeepSpeed saved rank 0's lm_head slice with them, useless to other ranks.
        # Then the layers are sharded while still on the meta device and filled from this
        # rank's own files.
        assign_tensors(model, folder / "non-tp.pt", skip=("lm_head.",))
        model.tie_weights()
        model = self.init_inference(model, request)
        for path in sorted(folder.glob(f"tp_{request.rank:0>2d}_*.pt")):
            assign_tensors(model, path)
        still_meta = [name for name, p in model.named_parameters() if p.is_meta]
        if still_meta:
            raise BloomperfError(f"{folder}: rank {request.rank} lacks {', '.join(still_meta[:3])}")
        return model

    def details(self) -> dict[str, Any]:
        return {
            "path": self.name,
            "kernel_inject": self.kernel_inject,
            "tp": self._tp,
            "qkv_shape": qkv_shape(self.model),
            "checkpoint": self._checkpoint,
            "offload": "none",
            "prepare_s": dict(self._prepare_s),
            "transformers": installed_version("transformers"),
            "deepspeed": installed_version("deepspeed"),
        }

    def close(self) -> None:
        del self.model


def qkv_shape(model: Any) -> list[int] | None:
    """This rank's first fused query/key/value weight: 3·hidden/tp rows under auto-TP. ``tp``
    says what was asked; this shape proves the weights really were split."""
    for name, parameter in model.named_parameters():
        if name.endswith(("query_key_value.weight", "attn_qkvw")):
            return list(parameter.shape)
    return None


class DeepSpeedInferenceBackend(TensorParallelBackend):
    name: ClassVar[str] = "ds-inference"
    display_name: ClassVar[str] = "DeepSpeed-Inference"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "int8")
    default_dtypes: ClassVar[DtypesByDevice] = {"cuda": ("fp16", "int8"), "cpu": ("fp16",)}
    default_on: ClassVar[tuple[str, ...]] = ("cuda",)
    memory_model: ClassVar[str | None] = "ds-kernels"
    kernel_inject: ClassVar[bool] = True

    @classmethod
    def group_per_batch(cls, options: BackendOptions) -> bool:
        """DeepSpeed-Inference allocates its kernel workspace once, sized by the batch of a
        group's first forward (ds_transformer.py, inference_context.h; DeepSpeed issues #4684,
        #3402): a group that served batch 1 first writes past that buffer at larger batches
        (beyond about 2.6 k rows at TP=1), and its peaks and OOM boundary are not the blog's,
        which ran one batch per process. So a fresh group per batch size, unless
        ``--ds-load-once`` trades that for one load per dtype."""
        return not options.ds_load_once

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        reason = super().unmet_requirement(dtype, device, options) or deepspeed_missing()
        if reason:
            return reason
        if device != "cuda":
            return "fused kernels need a CUDA GPU"
        if dtype == "int8" and options.load == "hf" and not options.sharded:
            return f"{INT8_NEEDS_CHECKPOINT}; --load hf gives it none"
        return fused_kernels_unsupported()


class DeepSpeedAutoTPBackend(TensorParallelBackend):
    name: ClassVar[str] = "ds-autotp"
    display_name: ClassVar[str] = "DeepSpeed-AutoTP"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16")
    default_dtypes: ClassVar[DtypesByDevice] = {"cuda": ("fp16",), "cpu": ("fp32",)}
    memory_model: ClassVar[str | None] = "tensor-parallel"
    kernel_inject: ClassVar[bool] = False

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        if dtype == "int8":
            # DeepSpeed's int8 inference is a property of its fused kernels (and of a
            # pre-quantised checkpoint); auto-TP keeps the model's own nn.Linear layers.
            return "int8 needs DeepSpeed's fused kernels (ds-inference), not auto-TP"
        return super().unmet_requirement(dtype, device, options) or deepspeed_missing()


def load_path(
    kernel_inject: bool, world_size: int, options: TensorParallelOptions, dtype: str = "fp16"
) -> str:
    """``pre-sharded`` with ``sharded=DIR``; else the blog's meta-device ``unsharded`` path,
    unless ``load=hf`` asks for from_pretrained. At TP=1, from_pretrained (one host copy, no
    DeepSpeed copy of the checkpoint) for both backends:

    - auto-TP: DeepSpeed applies no auto-TP policy at TP=1 (inference/engine.py), so it would
      never read the checkpoints JSON and would leave the meta model empty;
    - kernel injection: with no ``checkpoint=``, ``_apply_injection_policy`` reads no file and
      ``replace_with_policy`` copies the model's own weights into the fused modules
      (``copy_data_to_new_module``, module_inject/replace_module.py); the checkpoints JSON would
      first need a 17 GB torch-pickle copy (``ds_checkpoint``) that every load reads again. Not
      for int8: DeepSpeed quantizes only while loading a checkpoint (INT8_NEEDS_CHECKPOINT)."""
    if options.sharded:
        return "pre-sharded"
    if options.load == "hf":
        return "hf"
    if world_size == 1 and (not kernel_inject or dtype != "int8"):
        return "hf"
    return "unsharded"


def file_bytes_per_weight(checkpoint: Path) -> int:
    """Bytes per weight in the checkpoint's files (config.json's torch_dtype; 2 if unknown)."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return 2
    name = config.get("torch_dtype") if isinstance(config, dict) else None
    return 4 if name == "float32" else 2


def build_fused_kernels() -> None:
    """JIT-build DeepSpeed's fused inference kernels now (or load them from
    TORCH_EXTENSIONS_DIR), so that load time does not include nvcc. The first injected layer
    would build them otherwise (``BaseOp`` in ops/transformer/inference/op_binding/base.py);
    ``OpBuilder.load`` keeps the built module, so that later call finds it. DeepSpeed reads
    TORCH_CUDA_ARCH_LIST as it builds: one it cannot parse is rewritten for the build."""
    from deepspeed.ops.op_builder import InferenceBuilder

    with deepspeed_arch_list_set():
        InferenceBuilder().load()


def fused_kernels_unsupported() -> str | None:
    version = installed_version("transformers") or "none"
    if version_tuple(version) > version_tuple(KERNEL_TRANSFORMERS_MAX):
        return (
            f"fused BLOOM kernels need transformers<={KERNEL_TRANSFORMERS_MAX} "
            f"(installed: {version}); install the reference profile"
        )
    return None


def meta_model(checkpoint: Path, dtype: str) -> Any:
    """The model's skeleton on the meta device: no memory, no init time (the blog's way)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(checkpoint))
    # torch's device context, not deepspeed.OnDevice: OnDevice replaces torch.Tensor.__new__,
    # which breaks torch._dynamo's import (signature mismatch) with torch 2.13.
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, **dtype_argument(load_torch_dtype(dtype)))


DS_SHARD_CONFIG = "ds_inference_config.json"


def read_shard_marker(folder: Path) -> dict[str, Any]:
    path = folder / SHARD_MARKER
    if not path.is_file():
        raise BloomperfError(f"{folder}: not a pre-sharded checkpoint ({SHARD_MARKER} missing)")
    marker = read_document(path, "a shard marker")  # bounded, strict JSON
    if not isinstance(marker, dict):
        raise BloomperfError(f"{path}: unreadable shard marker (not a JSON object)")
    # Typed like every document read: "kernel_inject": "false" is not False.
    return {
        "tp": get_int(marker, "tp", str(path), minimum=1),
        "kernel_inject": get_bool(marker, "kernel_inject", str(path)),
    }


def assign_tensors(model: Any, path: Path, skip: tuple[str, ...] = ()) -> None:
    """Put a saved state dict's tensors into the model (replacing meta tensors)."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if not k.startswith(skip)}
    model.load_state_dict(state, strict=False, assign=True)


def give_alibi_an_explicit_mask(model: Any) -> None:
    """Fix the crash of auto-TP generation without padding (e.g. every batch of 1).

    DeepSpeed shards BLOOM's heads and replaces ``BloomModel.build_alibi_tensor`` with a version
    that keeps only this rank's heads. transformers 5 added a branch to ``BloomModel.forward``:
    with no attention mask (``generate`` drops an all-ones mask) it builds alibi from
    ``_get_alibi_slopes(self.num_heads)`` directly, for all heads, bypassing the replacement, and
    the attention's ``baddbmm`` then fails (``expanded size ... must match``). Passing the
    equivalent all-ones mask explicitly sends every call through the sharded builder.
    transformers <= 4.43 has no such branch, and needs nothing.
    """
    from transformers.models.bloom import modeling_bloom

    if not hasattr(modeling_bloom, "_get_alibi_slopes"):
        return
    model.transformer.register_forward_pre_hook(add_all_ones_mask, with_kwargs=True)


def add_all_ones_mask(
    module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    import torch

    if kwargs.get("attention_mask") is not None:
        return None
    tokens = args[0] if args else kwargs.get("input_ids")
    if tokens is None:
        tokens = kwargs["inputs_embeds"]
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    past = cache.get_seq_length() if cache is not None else 0
    batch, length = tokens.shape[0], tokens.shape[1]
    kwargs["attention_mask"] = torch.ones(
        batch, past + length, dtype=torch.long, device=tokens.device
    )
    return args, kwargs
