"""What differs between the installed software stacks (current vs reference profile).

Everything here reads package metadata, never imports the packages: the controller calls it
to decide skip reasons without loading torch or DeepSpeed.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, without importing it (controller-safe)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_tuple(version: str) -> tuple[int, ...]:
    """ "4.43.4" -> (4, 43, 4); "5.0.0.dev0" -> (5, 0, 0): enough to compare releases."""
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def dtype_argument(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """``from_pretrained``'s dtype keyword: ``dtype`` since transformers 4.56, before that
    ``torch_dtype`` (the reference profile's 4.43.4 silently ignores ``dtype``)."""
    if version_tuple(installed_version("transformers") or "0") >= (4, 56):
        return {"dtype": dtype}
    return {"torch_dtype": dtype}


# transformers 4.45 (PR #31098, "Enable BNB multi-backend support") dropped the bitsandbytes
# quantizers' CUDA-only check; before it, ``from_pretrained`` raises "No GPU found. A GPU is
# needed for quantization." on a machine without CUDA (read in 4.43.4's quantizer_bnb_8bit.py).
BNB_CPU_TRANSFORMERS = (4, 45)


def int8_on_cpu_reason() -> str | None:
    """Why bitsandbytes int8 cannot load on CPU with the installed transformers, if it cannot."""
    version = installed_version("transformers") or "0"
    if version_tuple(version) >= BNB_CPU_TRANSFORMERS:
        return None
    needed = ".".join(map(str, BNB_CPU_TRANSFORMERS))
    return f"int8 on CPU needs transformers >= {needed} (installed: {version})"
