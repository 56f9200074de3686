"""What differs between the installed software stacks (current vs reference profile).

Everything here reads package metadata, never imports the packages: the controller calls it
to decide skip reasons without loading torch or DeepSpeed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
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


# torch names architecture-specific and family targets with a letter after the minor version
# ("9.0a": Hopper's wgmma; "10.0f"), and Hopper images set TORCH_CUDA_ARCH_LIST=9.0a. DeepSpeed
# 0.19.8's JIT builder reads each part as integers (``compute_capability_args`` in
# op_builder/builder.py) and raises "invalid literal for int() with base 10: '0a'": seen on an
# H100, where every ds-inference cell failed to load. Its kernels use no sm_90a instruction.
ARCH_ENTRY = re.compile(r"(\d+)\.(\d+)[a-z]?(\+PTX)?")


def deepspeed_arch_list(value: str | None) -> str | None:
    """TORCH_CUDA_ARCH_LIST as DeepSpeed's JIT builder can read it: each "X.Y<letter>" target
    becomes "X.Y" (a "+PTX" kept), duplicates dropped, in order. None (DeepSpeed then builds for
    the GPUs it sees) when the value is unset, blank, or names what this cannot rewrite (torch's
    architecture names such as "Hopper")."""
    entries = (value or "").replace(";", " ").split()
    rewritten: list[str] = []
    for entry in entries:
        match = ARCH_ENTRY.fullmatch(entry)
        if match is None:
            return None
        plain = f"{match[1]}.{match[2]}{match[3] or ''}"
        if plain not in rewritten:
            rewritten.append(plain)
    return ";".join(rewritten) or None


@contextmanager
def deepspeed_arch_list_set() -> Iterator[None]:
    """TORCH_CUDA_ARCH_LIST rewritten by ``deepspeed_arch_list`` (unset where it gives None)
    while DeepSpeed builds, and the process's own value again afterwards."""
    given = os.environ.get("TORCH_CUDA_ARCH_LIST")
    try:
        put_arch_list(deepspeed_arch_list(given))
        yield
    finally:
        put_arch_list(given)


def put_arch_list(value: str | None) -> None:
    """Set TORCH_CUDA_ARCH_LIST, or unset it for None."""
    if value is None:
        os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
    else:
        os.environ["TORCH_CUDA_ARCH_LIST"] = value
