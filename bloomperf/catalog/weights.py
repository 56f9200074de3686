"""Bytes of BLOOM's weights on a GPU, per dtype, as the libraries hold them.

int8 means bitsandbytes' (or DeepSpeed's) weight-only quantisation: the matmul weights take one
byte per parameter, everything else (biases, layer norms, the word embedding and its tied
``lm_head``) stays in fp16. These are also the sizes accelerate counts when it places modules
(``compute_module_sizes`` with the 8-bit quantizer's ``param_element_size``).
"""

from __future__ import annotations

from bloomperf.catalog.dtypes import DTYPE_TABLE
from bloomperf.catalog.models import ModelShape, block_matmul_parameters, block_other_parameters


def weight_bytes_per_param(dtype: str) -> int:
    return DTYPE_TABLE[dtype].stored_bytes


def activation_bytes(dtype: str) -> int:
    """Activations, KV cache, logits and unquantised parameters: int8 still computes in fp16."""
    return DTYPE_TABLE[dtype].load_bytes


def layer_bytes(shape: ModelShape, dtype: str, shards: int = 1) -> int:
    """One block: its 12h^2 matmul weights in ``dtype``, its 13h biases and norms in fp16."""
    matmul = block_matmul_parameters(shape.hidden_size) * weight_bytes_per_param(dtype)
    rest = block_other_parameters(shape.hidden_size) * activation_bytes(dtype)
    return (matmul + rest) // shards


def embedding_bytes(shape: ModelShape, dtype: str) -> int:
    """The (tied) word embedding and its layernorm, never quantised."""
    return (shape.vocab_size + 2) * shape.hidden_size * activation_bytes(dtype)


def final_norm_bytes(shape: ModelShape, dtype: str) -> int:
    return 2 * shape.hidden_size * activation_bytes(dtype)


def model_weight_bytes(shape: ModelShape, layers: int, dtype: str) -> int:
    """Every weight of the model on its devices (the tied ``lm_head`` counted once)."""
    return (
        layers * layer_bytes(shape, dtype)
        + embedding_bytes(shape, dtype)
        + final_norm_bytes(shape, dtype)
    )
