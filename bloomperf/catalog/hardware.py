"""GPU datasheet figures and topology ids (``8xA100-80GB``, ``2x8xA100-40GB``).

Peak rates are *dense* tensor-core rates (the datasheets' "with sparsity" figures halved), in
FLOP/s; bandwidth is HBM/GDDR bandwidth in bytes/s; memory is the capacity the driver reports
(``nvidia-smi`` total), which is what a process can at most fill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB, MIB, unknown_name

GiB = GIB  # the unit is defined once, in formatting; the GPU tables here read better with it
TERA = 1e12


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    # Dense peak rates in FLOP/s (OP/s for int8); None where the chip has no such unit.
    peak_fp32: float
    peak_tf32: float | None
    peak_fp16: float
    peak_bf16: float | None
    peak_int8: float | None
    source: str
    aliases: tuple[str, ...] = ()

    def peak_rate(self, dtype: str) -> float:
        """The dense peak for matmuls in ``dtype``; int8 *weights* still multiply in fp16."""
        if dtype == "fp32":
            return self.peak_fp32
        if dtype == "bf16" and self.peak_bf16 is not None:
            return self.peak_bf16
        # fp16, int8 (weight-only quantisation: DeepSpeed and bitsandbytes dequantise to fp16
        # for the GEMM), and bf16 on a chip without bf16 units.
        return self.peak_fp16


def _spec(
    name: str,
    figures: tuple[int, float, float, float | None, float, float | None, float | None],
    source: str,
    aliases: tuple[str, ...] = (),
) -> GpuSpec:
    """``figures``: memory MiB, bandwidth GB/s, then dense FP32, TF32, FP16, BF16 and INT8
    peaks in TFLOPS (TOPS), None where the chip has no such unit."""
    memory_mib, bandwidth_gb_s, fp32, tf32, fp16, bf16, int8 = figures

    def rate(tflops: float | None) -> float | None:
        return None if tflops is None else tflops * TERA

    return GpuSpec(
        name=name,
        memory_bytes=memory_mib * MIB,
        bandwidth_bytes_per_s=bandwidth_gb_s * 1e9,
        peak_fp32=fp32 * TERA,
        peak_tf32=rate(tf32),
        peak_fp16=fp16 * TERA,
        peak_bf16=rate(bf16),
        peak_int8=rate(int8),
        source=source,
        aliases=aliases,
    )


GPU_SPECS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        _spec(
            "A100-40GB",
            (40960, 1555, 19.5, 156, 312, 312, 624),
            "NVIDIA A100 Tensor Core GPU datasheet (2021): A100 40GB SXM, 1,555 GB/s; "
            "dense FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS, INT8 624 TOPS",
            ("A100-SXM4-40GB",),
        ),
        _spec(
            "A100-80GB",
            (81920, 2039, 19.5, 156, 312, 312, 624),
            "NVIDIA A100 Tensor Core GPU datasheet (2021): A100 80GB SXM, 2,039 GB/s; "
            "dense FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS, INT8 624 TOPS",
            ("A100-SXM4-80GB", "A100-SXM-80GB"),
        ),
        _spec(
            "A100-PCIe-80GB",
            (81920, 1935, 19.5, 156, 312, 312, 624),
            "NVIDIA A100 Tensor Core GPU datasheet (2021): A100 80GB PCIe, 1,935 GB/s; "
            "dense FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS, INT8 624 TOPS",
            ("A100-80GB-PCIe", "A100-PCIE-80GB"),
        ),
        _spec(
            "H100-80GB",
            (81559, 3350, 67, 494.5, 989.5, 989.5, 1979),
            "NVIDIA H100 Tensor Core GPU datasheet (2023): H100 SXM, 3.35 TB/s; FP32 67, "
            "TF32 989 / BF16 1,979 / INT8 3,958 with sparsity, halved for dense",
            ("H100-SXM5-80GB", "H100-SXM-80GB", "H100-80GB-HBM3"),
        ),
        _spec(
            "H200-141GB",
            (143771, 4800, 67, 494.5, 989.5, 989.5, 1979),
            "NVIDIA H200 Tensor Core GPU datasheet (2024): H200 SXM 141 GB, 4.8 TB/s; FP32 67, "
            "TF32 989 / BF16 1,979 / INT8 3,958 with sparsity, halved for dense",
            ("H200-SXM-141GB", "H200"),
        ),
        _spec(
            "V100-32GB",
            (32768, 900, 15.7, None, 125, None, None),
            "NVIDIA Tesla V100 GPU datasheet (2020): V100 SXM2 32GB, 900 GB/s; FP32 15.7, "
            "tensor (FP16) 125 TFLOPS; no BF16, TF32 or INT8 tensor cores",
            ("V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
        ),
        _spec(
            "A6000-48GB",
            (49140, 768, 38.7, 77.4, 154.8, 154.8, 309.7),
            "NVIDIA RTX A6000 datasheet (2021): 48 GB GDDR6, 768 GB/s; FP32 38.7, tensor "
            "309.7 TFLOPS with sparsity (FP16/BF16 154.8 dense), INT8 309.7 TOPS dense",
            ("RTX-A6000-48GB", "RTX-A6000"),
        ),
        _spec(
            "L40S-48GB",
            (46068, 864, 91.6, 183, 362, 362, 733),
            "NVIDIA L40S GPU datasheet (2023): 48 GB GDDR6, 864 GB/s; FP32 91.6, TF32 366 / "
            "BF16 733 / INT8 1,466 with sparsity, halved for dense",
            ("L40S",),
        ),
    )
}

_TOPOLOGY = re.compile(r"^(?:(\d+)x)?(\d+)x(.+)$", re.IGNORECASE)


def find_gpu(name: str) -> GpuSpec:
    """A GPU by its table name or an alias (``A100-SXM4-80GB``), case and spaces ignored."""
    wanted = _normalise(name)
    for spec in GPU_SPECS.values():
        if wanted in {_normalise(n) for n in (spec.name, *spec.aliases)}:
            return spec
    # No --help lists the GPUs: their table is this module's.
    known = unknown_name(name, list(GPU_SPECS), used=30, where="catalog/hardware.py")
    raise BloomperfError(f"--topology: {known}")


def _normalise(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip()).upper().removeprefix("NVIDIA-")


MAX_NODES = 256
MAX_GPUS_PER_NODE = 16


def parse_topology_id(text: str) -> tuple[int, int, GpuSpec]:
    """``8xH200-141GB`` -> (1, 8, H200); ``2x8xA100-40GB`` -> (2, 8, A100-40GB)."""
    match = _TOPOLOGY.match(text.strip())
    if match is None:
        raise BloomperfError(
            f"--topology: {text!r} is not [NODESx]GPUSxGPU, e.g. 8xA100-80GB or 2x8xA100-40GB"
        )
    nodes = int(match.group(1) or 1)
    per_node = int(match.group(2))
    if nodes < 1 or per_node < 1:
        raise BloomperfError(f"--topology: {text!r}: node and GPU counts must be at least 1")
    if nodes > MAX_NODES or per_node > MAX_GPUS_PER_NODE:
        # The memory model works per GPU: absurd counts would only exhaust memory or time.
        raise BloomperfError(
            f"--topology: {text[:60]!r}: at most {MAX_NODES} nodes of {MAX_GPUS_PER_NODE} GPUs"
        )
    return nodes, per_node, find_gpu(match.group(3))


def topology_id(nodes: int, per_node: int, gpu: GpuSpec) -> str:
    prefix = f"{nodes}x" if nodes > 1 else ""
    return f"{prefix}{per_node}x{gpu.name}"


def known_topology(text: str) -> tuple[int, int, GpuSpec] | None:
    """``parse_topology_id`` for callers that carry on without a prediction: None for ``cpu``,
    a mixed node or a GPU missing from the table."""
    try:
        return parse_topology_id(text)
    except BloomperfError:
        return None
