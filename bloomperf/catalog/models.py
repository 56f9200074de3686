"""BLOOM's shapes, its parameter formula and its config.json: the facts everything is sized by.

The registry shapes (``tiny`` … ``bloom-176b``) are bigscience's configs plus two of ours small
enough for a CPU suite (``tiny``; ``tiny-serving``, whose head_dim vLLM accepts).
``bloomperf.catalog.checkpoint_builder`` writes a random-weight checkpoint of a shape;
``bloomperf.catalog.checkpoints`` turns a ``--model`` value into a checkpoint folder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bloomperf.core.errors import BloomperfError

# BLOOM's special token ids; the config and the tokenizer must agree on them.
SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = range(4)

# With the usual 0.02 the layers barely perturb the (tied) embedding, and greedy decoding repeats
# the last prompt token forever. std = 5/sqrt(hidden) gives every projection an output of a few
# units whatever the width (0.625 at hidden 64, 0.042 at 14336), so the activations stay far
# inside fp16's range and tokens vary: bloom-560m with 2 layers gave 8 to 30 distinct tokens in
# 30 greedy ones per blog prompt (1 to 7 with 2.4/sqrt(hidden)); tiny 14 on average over 6 seeds.
# A random net still falls into a short cycle on some prompts (tiny: about 1 row in 6).
INIT_SCALE = 5.0


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    n_layer: int
    n_head: int
    vocab_size: int
    # What the built checkpoint stores; backends cast to the dtype they benchmark.
    checkpoint_dtype: str = "bfloat16"

    def parameters(self, layers: int | None = None) -> int:
        """Exact parameter count of BloomForCausalLM (lm_head is tied to the embedding)."""
        n_layer = self.n_layer if layers is None else layers
        return count_parameters(self.hidden_size, n_layer, self.vocab_size)

    @property
    def initializer_range(self) -> float:
        return round(INIT_SCALE / math.sqrt(self.hidden_size), 4)


def block_matmul_parameters(hidden: int) -> int:
    """One block's matmul weights: qkv 3h², dense h², mlp 4h² and 4h² (the part int8 quantises)."""
    return 12 * hidden * hidden


def block_other_parameters(hidden: int) -> int:
    """One block's biases (qkv 3h, dense h, mlp 4h and h) and two layernorms (4h)."""
    return 13 * hidden


def count_parameters(hidden: int, n_layer: int, vocab: int, tied: bool = True) -> int:
    per_layer = block_matmul_parameters(hidden) + block_other_parameters(hidden)
    # Embedding plus its layernorm (2h) and the final layernorm (2h).
    total = n_layer * per_layer + vocab * hidden + 4 * hidden
    return total if tied else total + vocab * hidden


# Real configs of bigscience/bloom-*; ``tiny`` is ours: small enough for a CPU test suite.
MODEL_SHAPES: dict[str, ModelShape] = {
    shape.name: shape
    for shape in (
        ModelShape("tiny", 64, 2, 4, 1024, checkpoint_dtype="float32"),
        # The serving suite's model: vLLM's CPU attention refuses tiny's head_dim 16
        # ("Unsupported CPU attention configuration"); hidden 256 over 4 heads is head_dim 64.
        ModelShape("tiny-serving", 256, 2, 4, 1024, checkpoint_dtype="float32"),
        ModelShape("bloom-560m", 1024, 24, 16, 250880),
        ModelShape("bloom-1b1", 1536, 24, 16, 250880),
        ModelShape("bloom-1b7", 2048, 24, 16, 250880),
        ModelShape("bloom-3b", 2560, 30, 32, 250880),
        ModelShape("bloom-7b1", 4096, 30, 32, 250880),
        ModelShape("bloom-176b", 14336, 70, 112, 250880),
    )
}


def check_layers(layers: int | None, n_layer: int, what: str) -> int:
    if layers is None:
        return n_layer
    if not 1 <= layers <= n_layer:
        raise BloomperfError(f"--layers: {layers} is out of range for {what} (1 to {n_layer})")
    return layers


def bloom_config(shape: ModelShape, layers: int) -> dict[str, Any]:
    """config.json in the classic BLOOM spelling, which transformers 4.43 and 5.x both read."""
    return {
        "architectures": ["BloomForCausalLM"],
        "model_type": "bloom",
        "hidden_size": shape.hidden_size,
        "n_layer": layers,
        "n_head": shape.n_head,
        "vocab_size": shape.vocab_size,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": shape.initializer_range,
        "apply_residual_connection_post_layernorm": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
        "slow_but_exact": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "unk_token_id": UNK_ID,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        # transformers 4.x reads torch_dtype, 5.x reads dtype.
        "torch_dtype": shape.checkpoint_dtype,
        "dtype": shape.checkpoint_dtype,
    }


def generation_config() -> dict[str, Any]:
    # Only the token ids: no max_length, sampling or repetition settings that would silently
    # change what the workload's explicit generate() arguments ask for.
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def find_shape(hidden: int, n_layer: int, n_head: int, vocab: int) -> ModelShape | None:
    wanted = (hidden, n_layer, n_head, vocab)
    for shape in MODEL_SHAPES.values():
        if (shape.hidden_size, shape.n_layer, shape.n_head, shape.vocab_size) == wanted:
            return shape
    return None
