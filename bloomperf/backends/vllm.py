"""vLLM's offline engine as a backend: ``LLM(model=...)`` once, ``generate`` per cycle.

vLLM lives in the serving venv (its torch and transformers pins differ from the main venv's),
so this backend's workers run under that venv's interpreter (``interpreter``). The engine runs
in the worker process itself (no engine-core child), so vLLM's own exceptions reach the worker's
failure classifier as raised, and the worker's memory is the engine's. Greedy, exactly N new
tokens (``min_tokens`` and ``ignore_eos``), as the other backends' ``generate``.
"""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING, Any, ClassVar

from bloomperf.backends.base import Backend, DtypesByDevice, LoadRequest
from bloomperf.catalog.serving_venv import BUILD_HINT, serving_python_path
from bloomperf.config.backend import BackendOptions

if TYPE_CHECKING:
    import torch

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# BLOOM's training context: the blog's prompts plus 100 new tokens fit well inside it. It also
# sizes vLLM's check that one sequence's KV cache fits (its refusal is a cell's OOM).
MAX_MODEL_LEN = 2048
# Logprobs per row for the output check: vLLM gives the top few, never the whole row.
CHECK_LOGPROBS = 5


class VllmBackend(Backend):
    name: ClassVar[str] = "vllm"
    display_name: ClassVar[str] = "vLLM"
    dtypes: ClassVar[tuple[str, ...]] = tuple(VLLM_DTYPES)
    default_dtypes: ClassVar[DtypesByDevice] = {"cuda": ("bf16",), "cpu": ("fp32",)}
    # Not in a run without --backends: it needs the serving venv. No memory model either: its
    # cells are never skipped on a prediction, only beyond a measured OOM.

    @classmethod
    def interpreter(cls) -> str | None:
        return str(serving_python_path())

    @classmethod
    def unmet_requirement(cls, dtype: str, device: str, options: BackendOptions) -> str | None:
        reason = super().unmet_requirement(dtype, device, options)
        if reason:
            return reason
        if not serving_python_path().exists():
            return f"vllm runs under {serving_python_path()}, which does not exist; {BUILD_HINT}"
        return None

    def prepare(self, request: LoadRequest) -> None:
        # In-process engine core: its exceptions are raised here, not summarised by a parent.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        super().prepare(request)

    def import_dependencies(self) -> None:
        import vllm  # noqa: F401

    def load(self, request: LoadRequest) -> None:
        import torch
        from vllm import LLM

        self.model = LLM(
            model=str(request.checkpoint),
            dtype=VLLM_DTYPES[request.dtype],
            max_model_len=MAX_MODEL_LEN,
            enforce_eager=True,  # no CUDA-graph capture: load time is the engine's own
            seed=0,
        )
        self._device = torch.device("cpu")  # prompts go in as token id lists

    def generate(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generate_kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """The prompts (left padding removed) through ``LLM.generate``; returns prompt + new
        token ids like ``model.generate``. ``generate_kwargs``' stopping criteria are
        transformers' and are not called: no per-step marks."""
        import torch

        new_tokens = int(generate_kwargs["max_new_tokens"])
        outputs = self.run_prompts(input_ids, attention_mask, self.sampling(new_tokens))
        rows = [list(output.outputs[0].token_ids) for output in outputs]
        if any(len(row) != new_tokens for row in rows):
            lengths = sorted({len(row) for row in rows})
            raise RuntimeError(f"vLLM produced {lengths} new tokens instead of {new_tokens}")
        produced = torch.tensor(rows, dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, produced], dim=-1)

    def next_token_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """The log-probabilities vLLM reports for each row's first token (its top few: the
        engine computes the whole row, and a NaN in it shows in these)."""
        import torch

        outputs = self.run_prompts(input_ids, attention_mask, self.sampling(1, CHECK_LOGPROBS))
        rows = [
            [entry.logprob for entry in (output.outputs[0].logprobs or [{}])[0].values()]
            for output in outputs
        ]
        return torch.tensor(rows, dtype=torch.float32)

    def sampling(self, new_tokens: int, logprobs: int | None = None) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            temperature=0.0,  # greedy, as the workload's do_sample=False
            max_tokens=new_tokens,
            min_tokens=new_tokens,
            ignore_eos=True,
            logprobs=logprobs,
        )

    def run_prompts(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: Any
    ) -> list[Any]:
        prompts = [
            {"prompt_token_ids": ids[mask.bool()].tolist()}
            for ids, mask in zip(input_ids, attention_mask, strict=True)
        ]
        outputs: list[Any] = self.model.generate(prompts, sampling, use_tqdm=False)
        return outputs

    def details(self) -> dict[str, Any]:
        import vllm

        return {"path": "vllm", "vllm": vllm.__version__, "max_model_len": MAX_MODEL_LEN}

    def close(self) -> None:
        self.model = None
        gc.collect()
