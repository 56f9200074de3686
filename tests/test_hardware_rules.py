"""The GPU table by value, against the datasheets, and topology ids both ways.

The expected figures are typed here from the vendors' datasheets (dense rates: the "with
sparsity" figures halved), not read from the table they check.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.hardware import (
    GPU_SPECS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    GpuSpec,
    find_gpu,
    known_topology,
    parse_topology_id,
    topology_id,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import LINE_WIDTH

T = 1e12
# name: memory MiB (nvidia-smi's total), bandwidth bytes/s, dense FP32, TF32, FP16, BF16, INT8.
DATASHEETS = {
    "A100-40GB": (40960, 1555e9, 19.5 * T, 156 * T, 312 * T, 312 * T, 624 * T),
    "A100-80GB": (81920, 2039e9, 19.5 * T, 156 * T, 312 * T, 312 * T, 624 * T),
    "A100-PCIe-80GB": (81920, 1935e9, 19.5 * T, 156 * T, 312 * T, 312 * T, 624 * T),
    "H100-80GB": (81559, 3350e9, 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 1979 * T),
    "H200-141GB": (143771, 4800e9, 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 1979 * T),
    "V100-32GB": (32768, 900e9, 15.7 * T, None, 125 * T, None, None),
    "A6000-48GB": (49140, 768e9, 38.7 * T, 77.4 * T, 154.8 * T, 154.8 * T, 309.7 * T),
    "L40S-48GB": (46068, 864e9, 91.6 * T, 183 * T, 362 * T, 362 * T, 733 * T),
}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_each_gpus_figures_are_its_datasheets(name: str) -> None:
    spec = GPU_SPECS[name]
    memory_mib, bandwidth, fp32, tf32, fp16, bf16, int8 = DATASHEETS[name]
    assert spec.name == name
    assert spec.memory_bytes == memory_mib * 1024 * 1024
    # Exactly: each figure is its datasheet number times a power of ten, as written here.
    assert spec.bandwidth_bytes_per_s == bandwidth
    assert spec.peak_fp32 == fp32
    assert (spec.peak_tf32, spec.peak_bf16, spec.peak_int8) == (tf32, bf16, int8)
    assert spec.peak_fp16 == fp16
    assert "datasheet" in spec.source
    assert spec.aliases and all(isinstance(alias, str) for alias in spec.aliases)
    assert set(GPU_SPECS) == set(DATASHEETS)


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_a_gpus_matmul_peak_per_dtype(name: str) -> None:
    spec = GPU_SPECS[name]
    _, _, fp32, _, fp16, bf16, _ = DATASHEETS[name]
    assert spec.peak_rate("fp32") == pytest.approx(fp32)
    assert spec.peak_rate("fp16") == pytest.approx(fp16)
    # int8 weights are dequantised to fp16 for the GEMM; bf16 without bf16 units runs as fp16.
    assert spec.peak_rate("int8") == pytest.approx(fp16)
    assert spec.peak_rate("bf16") == pytest.approx(fp16 if bf16 is None else bf16)


def test_bf16_and_fp16_peaks_are_told_apart_where_they_differ() -> None:
    """Every chip in the table has equal BF16 and FP16 peaks; one that does not keeps them."""
    chip = replace(GPU_SPECS["A100-80GB"], peak_bf16=100 * T, peak_fp16=300 * T)
    assert chip.peak_rate("bf16") == 100 * T
    assert chip.peak_rate("fp16") == 300 * T
    assert chip.peak_rate("int8") == 300 * T
    assert replace(chip, peak_bf16=None).peak_rate("bf16") == 300 * T


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),  # as NVML names it
        ("nvidia a100 sxm4 80gb", "A100-80GB"),
        ("  NVIDIA H100 80GB HBM3 ", "H100-80GB"),
        ("h200", "H200-141GB"),
        ("Tesla_V100_SXM2_32GB", "V100-32GB"),
        ("NVIDIA RTX A6000", "A6000-48GB"),
        ("a100-pcie-80gb", "A100-PCIe-80GB"),
        ("NVIDIA-L40S", "L40S-48GB"),
    ],
)
def test_a_gpu_is_found_by_any_spelling_of_its_name_or_alias(text: str, name: str) -> None:
    assert find_gpu(text) is GPU_SPECS[name]


@pytest.mark.parametrize("text", ["B200-192GB", "A100", "NVIDIA", "A100-80GB-NVIDIA", ""])
def test_an_unknown_gpu_is_one_line_that_says_where_the_table_is(text: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        find_gpu(text)
    shown = text if len(text) <= 12 else text[:11] + "…"
    assert str(refused.value) == (
        f"--topology: unknown value {shown!r} ({len(GPU_SPECS)} valid ones: catalog/hardware.py)"
    )
    assert len(f"bloomperf: error: {refused.value}") <= LINE_WIDTH


# ---- topology ids ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8xA100-80GB", (1, 8, "A100-80GB")),
        ("2x8xA100-40GB", (2, 8, "A100-40GB")),
        ("1x4xH200", (1, 4, "H200-141GB")),
        (" 4XA100-SXM4-80GB ", (1, 4, "A100-80GB")),
        (f"{MAX_NODES}x{MAX_GPUS_PER_NODE}xH100-80GB", (MAX_NODES, MAX_GPUS_PER_NODE, "H100-80GB")),
    ],
)
def test_a_topology_id_names_nodes_gpus_per_node_and_the_gpu(
    text: str, expected: tuple[int, int, str]
) -> None:
    nodes, per_node, gpu = parse_topology_id(text)
    assert (nodes, per_node, gpu.name) == expected
    assert known_topology(text) == (nodes, per_node, gpu)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu", "'cpu' is not [NODESx]GPUSxGPU, e.g. 8xA100-80GB or 2x8xA100-40GB"),
        ("A100-80GB", "'A100-80GB' is not [NODESx]GPUSxGPU, e.g. 8xA100-80GB or 2x8xA100-40GB"),
        ("0xA100-80GB", "'0xA100-80GB': node and GPU counts must be at least 1"),
        ("0x8xA100-80GB", "'0x8xA100-80GB': node and GPU counts must be at least 1"),
        ("2x0xA100-80GB", "'2x0xA100-80GB': node and GPU counts must be at least 1"),
        ("0x0xA100-80GB", "'0x0xA100-80GB': node and GPU counts must be at least 1"),
        (
            f"{MAX_NODES + 1}x8xA100-80GB",
            f"'{MAX_NODES + 1}x8xA100-80GB': at most {MAX_NODES} nodes of 16 GPUs",
        ),
        (
            f"{MAX_GPUS_PER_NODE + 1}xA100-80GB",
            f"'{MAX_GPUS_PER_NODE + 1}xA100-80GB': at most {MAX_NODES} nodes of 16 GPUs",
        ),
        (
            f"{MAX_NODES + 1}x{MAX_GPUS_PER_NODE + 1}xA100-80GB",
            f"'{MAX_NODES + 1}x{MAX_GPUS_PER_NODE + 1}xA100-80GB': at most 256 nodes of 16 GPUs",
        ),
        ("8xB200", "unknown value 'B200' (8 valid ones: catalog/hardware.py)"),
    ],
)
def test_a_topology_id_out_of_range_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        parse_topology_id(text)
    assert str(refused.value) == f"--topology: {message}"
    assert known_topology(text) is None


def test_an_absurd_count_is_shown_cut_to_sixty_characters() -> None:
    text = "9" * 90 + "x8xA100-80GB"
    with pytest.raises(BloomperfError) as refused:
        parse_topology_id(text)
    assert str(refused.value) == f"--topology: {text[:60]!r}: at most 256 nodes of 16 GPUs"


def test_one_node_has_no_node_prefix() -> None:
    gpu = GPU_SPECS["H200-141GB"]
    assert topology_id(1, 8, gpu) == "8xH200-141GB"
    assert topology_id(2, 8, gpu) == "2x8xH200-141GB"


@given(
    st.integers(1, MAX_NODES),
    st.integers(1, MAX_GPUS_PER_NODE),
    st.sampled_from(sorted(GPU_SPECS)),
)
def test_an_id_written_reads_back_as_the_same_shape(nodes: int, per_node: int, name: str) -> None:
    gpu: GpuSpec = GPU_SPECS[name]
    text = topology_id(nodes, per_node, gpu)
    assert parse_topology_id(text) == (nodes, per_node, gpu)
    assert text.count("x") == (2 if nodes > 1 else 1)
