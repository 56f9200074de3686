"""The files DeepSpeed's fused-kernel build compiles and links against, looked up as torch's
extension builder looks them up (``torch.utils.cpp_extension``): the CUDA toolkit's headers in
``$CUDA_HOME/include``, its libraries in ``$CUDA_HOME/lib64`` (else ``lib``), and ``Python.h``.

DeepSpeed 0.19.8's ``InferenceBuilder`` (op_builder/transformer_inference.py) includes
``cublas_v2.h`` and ``curand_kernel.h`` besides CUDA's own headers, and links ``-lcurand``: the
linker needs the unversioned ``libcurand.so``, which a toolkit's developer files bring and the
``nvidia-curand`` wheel (``libcurand.so.10`` alone) does not. nvcc present is not enough: a
missing one of these fails the JIT build minutes into the ds-inference step.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from bloomperf.doctor.check import Check

HEADERS = ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cublas_v2.h", "curand_kernel.h")
LIBRARIES = ("libcudart.so", "libcurand.so")  # linked by name: the unversioned files


@dataclass(frozen=True)
class BuildTree:
    """Where the build looks: the CUDA toolkit's root (None: none found) and Python's headers."""

    cuda_home: Path | None
    python_include: Path


def find_cuda_home() -> Path | None:
    """torch's rule (cpp_extension._find_cuda_home): $CUDA_HOME or $CUDA_PATH, else the folder
    above nvcc's, else /usr/local/cuda when it exists."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            return Path(os.environ[name])
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(os.path.realpath(nvcc)).parent.parent
    default = Path("/usr/local/cuda")
    return default if default.is_dir() else None


def this_build_tree() -> BuildTree:
    return BuildTree(find_cuda_home(), Path(sysconfig.get_paths()["include"]))


def missing_build_files(tree: BuildTree) -> list[str]:
    """What the fused-kernel build would not find, by name and where it looked."""
    missing = []
    if not (tree.python_include / "Python.h").is_file():
        missing.append(f"Python.h (not in {tree.python_include}: the python3-dev files)")
    if tree.cuda_home is None:
        return [*missing, "the CUDA toolkit (no CUDA_HOME, no nvcc, no /usr/local/cuda)"]
    include = tree.cuda_home / "include"
    missing += [f"{h} (not in {include})" for h in HEADERS if not (include / h).is_file()]
    lib64 = tree.cuda_home / "lib64"
    lib = lib64 if lib64.is_dir() else tree.cuda_home / "lib"
    missing += [f"{name} (not in {lib})" for name in LIBRARIES if not (lib / name).exists()]
    return missing


def check_build_files(tree: BuildTree, device: str) -> Check:
    """ok when every header and library the fused-kernel build needs is where it looks; else
    a fail for ``--device cuda`` (ds-inference cannot run), a warning otherwise."""
    missing = missing_build_files(tree)
    if not missing:
        return Check(
            "build-files",
            "ok",
            f"the fused-kernel build finds CUDA's, cuBLAS's and cuRAND's headers and "
            f"libcurand in {tree.cuda_home}, and Python.h",
        )
    status = "fail" if device == "cuda" else "warn"
    shown = "; ".join(missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
    return Check("build-files", status, f"DeepSpeed's fused-kernel build lacks {shown}")
