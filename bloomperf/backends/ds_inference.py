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
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bloomperf.backends.base import Backend, LoadRequest
from bloomperf.backends.compat import dtype_argument, installed_version, version_tuple
from bloomperf.backends.ds_ranks import deepspeed_missing, join_rank_group, torch_dtype
from bloomperf.errors import BloomperfError

if TYPE_CHECKING:
    import torch

# The last transformers release whose BLOOM DeepSpeed's kernel injection accepts.
KERNEL_TRANSFORMERS_MAX = "4.43.4"
SHARD_MARKER = "bloomperf-shard.json"
LOAD_CHOICES = ("unsharded", "hf")


class _TensorParallelBackend(Backend):
    kernel_inject: ClassVar[bool]

    @classmethod
    def world_size(cls, device: str, visible_devices: int, options: dict[str, Any]) -> int:
        if options.get("tp"):
            return int(options["tp"])
        return max(1, visible_devices) if device == "cuda" else 1

    def load(self, request: LoadRequest) -> None:
        import torch

        local_rank = join_rank_group(request.device)
        self._device = torch.device(f"cuda:{local_rank}" if request.device == "cuda" else "cpu")
        self._tp = request.world_size
        sharded = request.options.get("sharded")
        if sharded:
            self._checkpoint = "pre-sharded"
            self.model = self._load_presharded(request, Path(str(sharded)))
        elif (
            request.options.get("load", default_load(self.kernel_inject, request.checkpoint))
            == "hf"
        ):
            self._checkpoint = "hf"
            self.model = self._load_hf(request)
        else:
            self._checkpoint = "unsharded"
            self.model = self._load_unsharded(request)
        self.model.eval()
        if not self.kernel_inject and self._tp > 1:
            give_alibi_an_explicit_mask(self.model)

    def init_inference(self, model: Any, request: LoadRequest, **kwargs: Any) -> Any:
        import deepspeed

        engine = deepspeed.init_inference(
            model,
            tensor_parallel={"tp_size": request.world_size},
            dtype=torch_dtype(request.dtype),
            replace_with_kernel_inject=self.kernel_inject,
            **kwargs,
        )
        return engine.module

    def _load_hf(self, request: LoadRequest) -> Any:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(request.checkpoint), **dtype_argument(weights_dtype(request.dtype))
        )
        return self.init_inference(model, request)

    def _load_unsharded(self, request: LoadRequest) -> Any:
        files = checkpoint_files(request.checkpoint, torch_only=self.kernel_inject)
        checkpoints_json = write_checkpoints_json(files)
        model = meta_model(request.checkpoint, request.dtype)
        return self.init_inference(
            model, request, checkpoint=str(checkpoints_json), base_dir=str(request.checkpoint)
        )

    def _load_presharded(self, request: LoadRequest, folder: Path) -> Any:
        marker = read_shard_marker(folder)
        if marker["tp"] != request.world_size:
            raise BloomperfError(
                f"{folder}: sharded for TP={marker['tp']}, but this group has "
                f"{request.world_size} ranks"
            )
        if marker["kernel_inject"] != self.kernel_inject:
            wanted = "ds-inference" if marker["kernel_inject"] else "ds-autotp"
            raise BloomperfError(f"{folder}: written by {wanted}; load it with that backend")
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
            "checkpoint": self._checkpoint,
            "offload": "none",
            "transformers": installed_version("transformers"),
            "deepspeed": installed_version("deepspeed"),
        }

    def close(self) -> None:
        del self.model


class DeepSpeedInferenceBackend(_TensorParallelBackend):
    name: ClassVar[str] = "ds-inference"
    dtypes: ClassVar[tuple[str, ...]] = ("fp16", "bf16", "int8")
    kernel_inject: ClassVar[bool] = True

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: dict[str, Any]) -> str | None:
        reason = super().unmet_requirement(dtype, device, options) or deepspeed_missing()
        if reason:
            return reason
        if device != "cuda":
            return "fused kernels need a CUDA GPU"
        return fused_kernels_unsupported()


class DeepSpeedAutoTPBackend(_TensorParallelBackend):
    name: ClassVar[str] = "ds-autotp"
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16")
    kernel_inject: ClassVar[bool] = False

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: dict[str, Any]) -> str | None:
        if dtype == "int8":
            # DeepSpeed's int8 inference is a property of its fused kernels (and of a
            # pre-quantised checkpoint); auto-TP keeps the model's own nn.Linear layers.
            return "int8 needs DeepSpeed's fused kernels (ds-inference), not auto-TP"
        return super().unmet_requirement(dtype, device, options) or deepspeed_missing()


def default_load(kernel_inject: bool, checkpoint: Path) -> str:
    """The blog's meta-device path where DeepSpeed can read the files, else from_pretrained.

    DeepSpeed's meta-device loading belongs to kernel injection and reads torch pickles only
    (safetensors-only folders, like bloomperf's random checkpoints, cannot go that way). Its
    auto-TP variant expects the original BLOOM key names (no "transformer." prefix) and leaves a
    TP=1 model unloaded, so auto-TP reads with from_pretrained. ``details()`` says which ran.
    """
    has_torch_files = any(checkpoint.glob("*.bin")) or any(checkpoint.glob("*.pt"))
    return "unsharded" if kernel_inject and has_torch_files else "hf"


def fused_kernels_unsupported() -> str | None:
    version = installed_version("transformers") or "none"
    if version_tuple(version) > version_tuple(KERNEL_TRANSFORMERS_MAX):
        return (
            f"fused BLOOM kernels need transformers<={KERNEL_TRANSFORMERS_MAX} "
            f"(installed: {version}); install the reference profile"
        )
    return None


def weights_dtype(dtype: str) -> torch.dtype:
    """The dtype weights are read in: int8 is quantised by DeepSpeed from fp16."""
    import torch

    return torch.float16 if dtype == "int8" else torch_dtype(dtype)


def meta_model(checkpoint: Path, dtype: str) -> Any:
    """The model's skeleton on the meta device: no memory, no init time (the blog's way)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(checkpoint))
    # torch's device context, not deepspeed.OnDevice: OnDevice replaces torch.Tensor.__new__,
    # which breaks torch._dynamo's import (signature mismatch) with torch 2.13.
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, **dtype_argument(weights_dtype(dtype)))


def checkpoint_files(folder: Path, torch_only: bool) -> list[str]:
    """The weight files of a saved model, by name, in a stable order."""
    safetensors = sorted(p.name for p in folder.glob("*.safetensors"))
    torch_files = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.pt")
    )
    # DeepSpeed's kernel-injection loader reads torch pickles only; auto-TP reads both.
    files = torch_files if torch_only else (safetensors or torch_files)
    if not files:
        kind = "*.bin/*.pt" if torch_only else "*.safetensors or *.bin"
        raise BloomperfError(f"{folder}: no {kind} weight files to load (use load=hf)")
    return files


def write_checkpoints_json(files: list[str]) -> Path:
    """The checkpoints JSON DeepSpeed's meta-device loader reads (names relative to base_dir)."""
    with tempfile.NamedTemporaryFile(
        "w", prefix="bloomperf-checkpoints-", suffix=".json", delete=False
    ) as handle:
        json.dump({"type": "BLOOM", "checkpoints": files, "version": 1.0}, handle)
    return Path(handle.name)


DS_SHARD_CONFIG = "ds_inference_config.json"


def read_shard_marker(folder: Path) -> dict[str, Any]:
    path = folder / SHARD_MARKER
    if not path.is_file():
        raise BloomperfError(f"{folder}: not a pre-sharded checkpoint ({SHARD_MARKER} missing)")
    try:
        marker = json.loads(path.read_text())
        return {"tp": int(marker["tp"]), "kernel_inject": bool(marker["kernel_inject"])}
    except (ValueError, KeyError, TypeError) as exc:
        raise BloomperfError(f"{path}: unreadable shard marker ({exc})") from None


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
