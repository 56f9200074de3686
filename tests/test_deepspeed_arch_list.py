"""TORCH_CUDA_ARCH_LIST as DeepSpeed's JIT builder reads it, against DeepSpeed's own parser.

On an H100 (gpu_check, 2026-12-05) every ds-inference cell failed to load with DeepSpeed
0.19.8's "invalid literal for int() with base 10: '0a'": the machine's TORCH_CUDA_ARCH_LIST
named torch's arch-specific target 9.0a. ``InferenceBuilder.compute_capability_args`` is the
function that raised it; these tests run it, in JIT mode, on this CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.backends.compat import deepspeed_arch_list, deepspeed_arch_list_set

pytest.importorskip("deepspeed")

ENV = "TORCH_CUDA_ARCH_LIST"


@pytest.fixture(autouse=True)
def own_arch_list() -> Iterator[None]:
    """DeepSpeed's parser writes TORCH_CUDA_ARCH_LIST: each test gets the process's back."""
    saved = os.environ.get(ENV)
    yield
    if saved is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = saved


def deepspeed_reads(value: str) -> str:
    """What DeepSpeed's JIT builder makes of ``value``: the list it hands torch (it rewrites the
    variable), or its exception's type and text."""
    from deepspeed.ops.op_builder.transformer_inference import InferenceBuilder

    builder = InferenceBuilder()
    builder.jit_mode = True
    os.environ[ENV] = value
    try:
        builder.compute_capability_args()
    except ValueError as error:
        return f"ValueError: {error}"
    return os.environ[ENV]


entries = st.builds(
    lambda major, minor, letter, ptx: f"{major}.{minor}{letter}{ptx}",
    st.integers(6, 12),
    st.integers(0, 9),
    st.sampled_from(["", "a", "f"]),
    st.sampled_from(["", "+PTX"]),
)
arch_lists = st.lists(entries, min_size=1, max_size=5).flatmap(
    lambda parts: st.sampled_from([";", " ", "; "]).map(lambda sep: sep.join(parts))
)


def test_deepspeed_refuses_the_hopper_images_value_and_reads_the_rewritten_one() -> None:
    assert deepspeed_reads("9.0a") == "ValueError: invalid literal for int() with base 10: '0a'"
    assert deepspeed_arch_list("9.0a") == "9.0"
    assert deepspeed_reads("9.0") == "9.0+PTX"


@given(arch_lists)
def test_every_rewritten_list_is_one_deepspeed_reads(value: str) -> None:
    readable = deepspeed_arch_list(value)
    assert readable is not None
    assert not deepspeed_reads(readable).startswith("ValueError")
    # What DeepSpeed builds for: the same numeric targets, whatever letters the value carried.
    targets = {part.split("+")[0].rstrip("af") for part in value.replace(";", " ").split()}
    built = {part.split("+")[0] for part in deepspeed_reads(readable).split(";")}
    assert built == targets


@given(arch_lists)
def test_a_list_deepspeed_reads_already_is_left_as_it_is(value: str) -> None:
    readable = deepspeed_arch_list(value)
    assert deepspeed_arch_list(readable) == readable
    if not any(letter in value for letter in "af"):
        parts = value.replace(";", " ").split()
        assert readable == ";".join(dict.fromkeys(parts))


@pytest.mark.parametrize("value", [None, "", "  ", "Hopper", "9.0;Ampere", "sm_90", "9"])
def test_a_value_it_cannot_rewrite_leaves_the_choice_to_deepspeed(value: str | None) -> None:
    """Unset, DeepSpeed builds for the GPUs it sees: no guess at what a name means."""
    assert deepspeed_arch_list(value) is None


@pytest.mark.parametrize(("given", "during"), [("9.0a", "9.0"), ("Hopper", None), (None, None)])
def test_the_build_sees_the_rewritten_list_and_the_process_gets_its_own_back(
    given: str | None, during: str | None
) -> None:
    if given is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = given
    with deepspeed_arch_list_set():
        assert os.environ.get(ENV) == during
    assert os.environ.get(ENV) == given


def test_the_process_gets_its_own_list_back_when_the_build_raises() -> None:
    os.environ[ENV] = "9.0a"
    with pytest.raises(RuntimeError, match="nvcc"), deepspeed_arch_list_set():
        raise RuntimeError("nvcc failed")
    assert os.environ[ENV] == "9.0a"
