"""The dtypes bloomperf measures, each described once: the torch type its weights are read and
computed in, and the torch type its matmul weights have once on the device.

int8 is weight-only quantisation (bitsandbytes for accelerate, DeepSpeed's kernels for
ds-inference): the checkpoint is read in fp16 and the library quantises the matmul weights to one
byte each while loading; activations, the KV cache, biases, norms and the word embedding stay in
fp16. So an int8 model loads at 2 bytes per weight and holds 1 byte per matmul weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

TORCH_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}


@dataclass(frozen=True)
class DType:
    name: str
    load: str  # torch dtype the checkpoint is read in and the model computes in
    stored: str  # torch dtype of the matmul weights on the device (DeepSpeed's dtype argument)

    @property
    def load_bytes(self) -> int:
        """Bytes per weight while loading, and per activation, cache entry or unquantised weight."""
        return TORCH_BYTES[self.load]

    @property
    def stored_bytes(self) -> int:
        """Bytes per matmul weight once on the device."""
        return TORCH_BYTES[self.stored]


# Order is the order of rows in tables.
DTYPE_TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", "float32", "float32"),
        DType("bf16", "bfloat16", "bfloat16"),
        DType("fp16", "float16", "float16"),
        DType("int8", "float16", "int8"),
    )
}
DTYPES: tuple[str, ...] = tuple(DTYPE_TABLE)


def load_torch_dtype(name: str) -> torch.dtype:
    """What ``from_pretrained`` is given: int8 loads in fp16, quantised by the library."""
    import torch

    dtype: torch.dtype = getattr(torch, DTYPE_TABLE[name].load)
    return dtype


def stored_torch_dtype(name: str) -> torch.dtype:
    """What ``deepspeed.init_inference`` is given: torch.int8 for int8."""
    import torch

    dtype: torch.dtype = getattr(torch, DTYPE_TABLE[name].stored)
    return dtype
