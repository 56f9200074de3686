"""The one max-memory rule against transformers' and accelerate's own planning, on the meta device.

Every map here goes through the real code ``from_pretrained`` runs before it reads a weight: the
bitsandbytes 8-bit quantizer (built from ``BitsAndBytesConfig``), ``get_balanced_memory``, the
quantizer's ``adjust_max_memory`` and ``infer_auto_device_map``. bloom-176b plans from its config.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.backends.accelerate import gpu_max_memory
from bloomperf.catalog.accelerate_map import (
    QUANTIZER_MAX_MEMORY_FACTOR,
    balanced_caps,
    blog_caps,
    even_caps,
    max_memory_map,
    on_machine,
    parse_choice,
    parse_map,
    resolve_choice,
    split_model,
    weight_caps,
)
from bloomperf.catalog.device_map import infer_device_map, meta_model, summarise
from bloomperf.catalog.hardware import GPU_SPECS, GiB
from bloomperf.catalog.models import MODEL_SHAPES, ModelShape
from bloomperf.catalog.weights import (
    embedding_bytes,
    final_norm_bytes,
    layer_bytes,
    model_weight_bytes,
)
from bloomperf.config.backend import AccelerateOptions

pytest.importorskip("bitsandbytes")

BLOOM = MODEL_SHAPES["bloom-176b"]
# What torch reports as total_memory (the backend reads it): a little under the datasheets'.
A100 = int(79.15 * GiB)
H200 = int(139.8 * GiB)
# (layers, GPUs, GPU memory): the blog's node, and the 2-layer model on one H200.
TOPOLOGIES = [(70, 8, A100), (2, 1, H200)]
REFUSAL = "Some modules are dispatched on the CPU or the disk"


def planned_map(
    shape: ModelShape, layers: int, dtype: str, choice: str, n_gpus: int, memory: int
) -> dict[str, int | str]:
    """The map the accelerate backend passes to ``from_pretrained``, planned by accelerate."""
    checkpoint = replace(shape, n_layer=layers)  # what the backend reads from config.json
    given = gpu_max_memory(AccelerateOptions(max_memory=choice), checkpoint, dtype, n_gpus, memory)
    plan = infer_device_map(shape, layers, dtype, given)
    assert plan.refused == "", plan.refused
    return plan.placement


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
@pytest.mark.parametrize("choice", ["auto", "blog", "even"])
@pytest.mark.parametrize(("layers", "n_gpus", "memory"), TOPOLOGIES)
def test_every_map_keeps_bloom_176b_on_the_gpus(
    layers: int, n_gpus: int, memory: int, choice: str, dtype: str
) -> None:
    placement = planned_map(BLOOM, layers, dtype, choice, n_gpus, memory)
    assert not {"cpu", "disk"} & set(placement.values()), placement
    if choice == "blog" and n_gpus == 8:
        assert 0 not in placement.values()  # the blog keeps GPU 0 for generate's tensors


@pytest.mark.parametrize(("layers", "n_gpus", "memory"), TOPOLOGIES)
def test_one_byte_per_parameter_overflowed_to_disk(layers: int, n_gpus: int, memory: int) -> None:
    # The rule this module replaced: parameters x 1 byte for int8, split evenly, + 10 %. The
    # embedding stays fp16 and the quantizer takes 10 % back, so the last blocks went to disk
    # and from_pretrained refused the load.
    old = int(BLOOM.parameters(layers) * 1 / n_gpus * 1.10)
    plan = infer_device_map(BLOOM, layers, "int8", dict.fromkeys(range(n_gpus), old))
    assert "disk" in plan.placement.values()
    assert plan.refused.startswith(REFUSAL)


def test_the_blogs_int8_map_as_given_overflows_under_the_quantizer() -> None:
    # 7 x 26 GiB x 0.9 = 175.9 GB offered; bloom-176b in int8 with an fp16 embedding: 179.9 GB.
    given = dict(enumerate(blog_caps("int8", 8)))
    assert model_weight_bytes(BLOOM, 70, "int8") == 179_856_990_208
    assert sum(given.values()) * 0.9 < model_weight_bytes(BLOOM, 70, "int8")
    plan = infer_device_map(BLOOM, 70, "int8", given)
    assert plan.refused.startswith(REFUSAL)
    # Compensated, every GPU takes its 26 GiB of weights again.
    compensated = infer_device_map(BLOOM, 70, "int8", max_memory_map(given, "int8"))
    assert compensated.refused == ""
    assert max(compensated.bytes_per_device.values()) <= 26 * GiB


@pytest.mark.parametrize(
    ("name", "layers", "dtype"), [("bloom-176b", 70, "int8"), ("tiny", 2, "bf16")]
)
def test_accelerate_counts_the_bytes_bloomperf_counts(name: str, layers: int, dtype: str) -> None:
    from transformers.integrations.accelerate import compute_module_sizes

    shape = MODEL_SHAPES[name]
    model, quantizer = meta_model(shape, layers, dtype)
    sizes, _ = compute_module_sizes(model, quantizer)
    assert sizes[""] == model_weight_bytes(shape, layers, dtype)
    if dtype == "int8":
        # The quantizer keeps lm_head (tied to the embedding) out of int8; blocks are 8-bit.
        assert "lm_head" in quantizer.modules_to_not_convert
        assert type(model.transformer.h[0].mlp.dense_h_to_4h).__name__ == "Linear8bitLt"
        assert type(model.lm_head).__name__ == "Linear"
        assert sizes["transformer.word_embeddings"] == shape.vocab_size * shape.hidden_size * 2


def test_the_compensation_is_the_quantizers_own_factor() -> None:
    _, quantizer = meta_model(MODEL_SHAPES["tiny"], 1, "int8")
    assert type(quantizer).__name__ == "Bnb8BitHfQuantizer"
    adjusted = quantizer.adjust_max_memory({0: 1_000_000})
    assert adjusted[0] == pytest.approx(1_000_000 * QUANTIZER_MAX_MEMORY_FACTOR["int8"])
    # What the rule passes comes back, after the quantizer, as at least the cap it meant.
    passed = max_memory_map({0: 26 * GiB}, "int8")
    assert quantizer.adjust_max_memory(passed)[0] >= 26 * GiB


def test_the_steps_agree_with_from_pretrained_s_own_planner() -> None:
    from transformers.integrations.accelerate import _get_device_map

    shape, layers = MODEL_SHAPES["bloom-560m"], 6
    max_memory = max_memory_map(weight_caps("even", shape, layers, "int8", 2, A100), "int8")
    model, quantizer = meta_model(shape, layers, "int8")
    expected = _get_device_map(model, "auto", dict(max_memory), quantizer)
    assert infer_device_map(shape, layers, "int8", max_memory).placement == dict(expected)
    too_small = {0: 50 * 2**20, 1: 50 * 2**20}
    with pytest.raises(ValueError, match=REFUSAL):
        _get_device_map(model, "auto", dict(too_small), quantizer)
    assert infer_device_map(shape, layers, "int8", too_small).refused.startswith(REFUSAL)


@pytest.mark.parametrize(
    ("name", "layers", "dtype", "n_gpus", "choice"),
    [
        ("bloom-176b", 70, "int8", 8, "blog"),
        ("bloom-176b", 70, "bf16", 8, "blog"),
        ("bloom-176b", 70, "int8", 8, "even"),
        ("bloom-176b", 70, "bf16", 8, "even"),
        ("bloom-176b", 2, "int8", 8, "even"),
        ("bloom-176b", 2, "bf16", 1, "even"),
        ("bloom-560m", 1, "fp32", 8, "even"),
        ("bloom-560m", 24, "int8", 4, "even"),
        ("tiny", 2, "int8", 2, "even"),
    ],
)
def test_the_memory_model_splits_as_accelerate_does(
    name: str, layers: int, dtype: str, n_gpus: int, choice: str
) -> None:
    shape = MODEL_SHAPES[name]
    max_memory = max_memory_map(weight_caps(choice, shape, layers, dtype, n_gpus, A100), dtype)
    placement = infer_device_map(shape, layers, dtype, max_memory).placement
    split = split_model(shape, layers, dtype, max_memory)
    assert split is not None
    assert split.layers == blocks_per_gpu(placement, layers, n_gpus)
    assert split.embedding_gpu == embedding_gpu(placement)


def blocks_per_gpu(placement: dict[str, int | str], layers: int, n_gpus: int) -> tuple[int, ...]:
    counts = [0] * n_gpus
    for name, device in placement.items():
        assert isinstance(device, int), (name, device)
        if name in ("", "transformer", "transformer.h"):
            counts[device] += layers
        elif name.startswith("transformer.h."):
            counts[device] += 1
    return tuple(counts)


def embedding_gpu(placement: dict[str, int | str]) -> int | str:
    for name in ("transformer.word_embeddings", "transformer", ""):
        if name in placement:
            return placement[name]
    raise AssertionError(placement)


def test_auto_is_the_blogs_map_only_where_the_blog_ran() -> None:
    assert resolve_choice("auto", BLOOM, 70, 8, A100) == "blog"
    assert resolve_choice("auto", BLOOM, 70, 8, int(79.1 * GiB)) == "blog"  # what torch sees
    assert resolve_choice("auto", BLOOM, 2, 1, H200) == "even"
    assert resolve_choice("auto", BLOOM, 70, 8, GPU_SPECS["A100-40GB"].memory_bytes) == "even"
    assert resolve_choice("auto", BLOOM, 69, 8, A100) == "even"


def test_explicit_maps_and_their_errors() -> None:
    assert parse_map("0:0GiB, 1:51GiB,cpu:1GB") == {0: 0, 1: 51 * GiB, "cpu": 10**9}
    for bad in ("0:", "gpu0:1GiB", "1:-3GiB", "1:lots"):
        with pytest.raises(ValueError, match=r"0:0GiB|positive|size"):
            parse_map(bad)


def test_summary_folds_blocks_per_device() -> None:
    placement: dict[str, int | str] = {
        "transformer.word_embeddings": 1,
        "transformer.h.0": 1,
        "transformer.h.1": 1,
        "transformer.h.2": 2,
        "transformer.ln_f": 2,
    }
    assert summarise(placement) == {
        "1": ["transformer.word_embeddings", "transformer.h.0-1"],
        "2": ["transformer.ln_f", "transformer.h.2"],
    }


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("accelerate.utils.modeling").setLevel(logging.ERROR)


def test_a_meta_model_refuses_to_build_when_the_meta_device_is_not_in_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch caches the factories a device context redirects, once per process; a cache filled
    while they were wrapped (a test's patch, a profiler) redirects nothing afterwards. The
    planner then refuses at once instead of building bloom-176b's weights in memory."""
    import torch
    from torch.utils._device import _device_constructors

    monkeypatch.setattr(torch, "empty", lambda *a, **k: torch.zeros(*a, **k))
    _device_constructors.cache_clear()
    _device_constructors()  # filled with the wrapper
    monkeypatch.undo()
    try:
        with pytest.raises(RuntimeError, match=r"^meta_model: torch.device\('meta'\) is not in"):
            # bloom-560m, one layer: without the refusal, 0.5 GB built for real, not 350 GB
            meta_model(MODEL_SHAPES["bloom-560m"], 1, "bf16")
    finally:
        _device_constructors.cache_clear()
    model, _ = meta_model(MODEL_SHAPES["bloom-176b"], 1, "bf16")  # the cache refilled: meta again
    assert {p.device.type for p in model.parameters()} == {"meta"}


# Caps as fractions of the weights, a zero or a single byte among them: the even share, the
# buffer and "every usable GPU but the last" are each reached.
CAP_SHARES = st.one_of(st.just(0.0), st.just(-1.0), st.floats(0.01, 1.5))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    # tiny-serving: a block outweighs the embedding, whose size is the buffer in the others.
    name=st.sampled_from(["tiny", "tiny-serving", "bloom-560m", "bloom-7b1"]),
    layers=st.integers(1, 5),
    dtype=st.sampled_from(["fp32", "bf16", "fp16", "int8"]),
    shares=st.lists(CAP_SHARES, min_size=1, max_size=5),
)
def test_the_balanced_caps_are_get_balanced_memorys(
    name: str, layers: int, dtype: str, shares: list[float]
) -> None:
    """accelerate's ``get_balanced_memory`` (then the quantizer's factor) on the meta model is
    the oracle: each GPU's cap, a 1-byte cap (share -1) and a zero one included."""
    shape = MODEL_SHAPES[name]
    total = model_weight_bytes(shape, layers, dtype)
    caps = {g: 1 if share < 0 else int(total * share) for g, share in enumerate(shares)}
    planned = infer_device_map(shape, layers, dtype, dict(caps)).planned_max_memory
    factor = QUANTIZER_MAX_MEMORY_FACTOR.get(dtype, 1.0)
    ours = balanced_caps(shape, layers, dtype, caps)
    assert set(ours) == set(caps)
    for gpu, cap in ours.items():
        assert isinstance(cap, int)
        assert abs(cap * factor - planned[str(gpu)]) <= 1, (gpu, caps, planned)


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("short", [1, 2, 3])
def test_room_kept_for_a_block_is_released_once_the_blocks_are_placed(
    layers: int, short: int
) -> None:
    """A GPU a block plus up to a final norm short of the model and one more block: placing the
    model's children in turn, the room kept for the largest layer (a block) is released once
    the blocks are placed, and the final norm fits. A stale largest layer would send it to
    the disk. accelerate's planner is the oracle."""
    shape = MODEL_SHAPES["tiny"]
    total = model_weight_bytes(shape, layers, "fp32")
    norm = final_norm_bytes(shape, "fp32")
    cap = total + layer_bytes(shape, "fp32") - short * norm // 3
    plan = infer_device_map(shape, layers, "fp32", {0: cap})
    assert not (plan.offloaded or plan.refused)
    split = split_model(shape, layers, "fp32", {0: cap})
    assert split is not None and split.weights == (total,)


@pytest.mark.parametrize("first", [0, 1])
@pytest.mark.parametrize("short", [1, 2])
def test_a_module_that_does_not_fit_is_the_first_placed_on_the_next_gpu(
    first: int, short: int
) -> None:
    """GPU 1 holds the word embeddings but not them and their norm: the embeddings, turned away
    by GPU 0, go first onto GPU 1 and the norm moves on to GPU 2 (the other way round the
    embeddings would land on GPU 2). accelerate's planner is the oracle."""
    shape, layers = MODEL_SHAPES["tiny"], 1
    total = model_weight_bytes(shape, layers, "fp32")
    norm = final_norm_bytes(shape, "fp32")
    word = embedding_bytes(shape, "fp32") - norm
    caps: dict[int | str, int] = {0: first, 1: word + norm - short * norm // 2, 2: 10 * total}
    plan = infer_device_map(shape, layers, "fp32", dict(caps))
    split = split_model(shape, layers, "fp32", dict(caps))
    assert split is not None and not plan.offloaded
    assert split.embedding_gpu == embedding_gpu(plan.placement) == 1
    assert split.weights[1] == plan.bytes_per_device["1"] == word
    assert split.weights[2] == plan.bytes_per_device["2"] == total - word


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_the_last_usable_gpu_keeps_its_cap_where_the_share_is_lower(dtype: str) -> None:
    """The small models' embedding makes the share exceed any cap the property above draws:
    bloom-7b1's 30 blocks do not, so the share lowers every usable GPU but the last."""
    shape, layers = MODEL_SHAPES["bloom-7b1"], 30
    total = model_weight_bytes(shape, layers, dtype)
    caps = {0: 0, 1: total, 2: total, 3: total}
    ours = balanced_caps(shape, layers, dtype, caps)
    share = ours[1]
    assert share < total and ours[2] == share  # lowered to the even share and its buffer
    assert (ours[0], ours[3]) == (0, total)  # an unusable GPU and the last one as given
    planned = infer_device_map(shape, layers, dtype, dict(caps)).planned_max_memory
    factor = QUANTIZER_MAX_MEMORY_FACTOR.get(dtype, 1.0)
    for gpu, cap in ours.items():
        assert abs(cap * factor - planned[str(gpu)]) <= 1, (gpu, caps, planned)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0:1GiB", {0: GiB}),
        (" 3 : 2MiB , disk:1KB,cpu:0GiB", {3: 2 * 2**20, "disk": 1000, "cpu": 0}),
        ("10:5B,2:7B", {10: 5, 2: 7}),
    ],
)
def test_a_map_reads_each_device_and_size(text: str, expected: dict[int | str, int]) -> None:
    assert parse_map(text) == expected
    assert parse_choice(text) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0:1GiB:2", "'0:1GiB:2': '1GiB:2' is not a size such as 3GiB or 512MiB"),
        ("gpu0:1GiB", "'gpu0:1GiB' is not DEVICE:SIZE"),
        ("disks:1GiB", "'disks:1GiB' is not DEVICE:SIZE"),
        ("0:", "'0:' is not DEVICE:SIZE"),
        ("0 1GiB", "'0 1GiB' is not DEVICE:SIZE"),
        ("0:1GiB,", "'' is not DEVICE:SIZE"),
        ("1:-3GiB", "'1:-3GiB': must be positive, got -3GiB"),
    ],
)
def test_a_malformed_map_names_its_part(text: str, message: str) -> None:
    for parse in (parse_map, parse_choice):
        with pytest.raises(ValueError) as caught:
            parse(text)
        assert str(caught.value).startswith(message)
    with pytest.raises(ValueError) as caught:
        parse_map("x:1")
    assert str(caught.value).endswith("(e.g. 0:0GiB,1:51GiB), nor one of auto, blog, even")


def test_the_choices_are_not_maps() -> None:
    for choice in ("auto", "blog", "even"):
        assert parse_choice(choice) == choice


def test_the_blogs_node_is_eight_gpus_over_78_gib_holding_all_70_layers() -> None:
    assert resolve_choice("auto", BLOOM, 70, 8, 78 * GiB) == "even"  # not over 78 GiB
    assert resolve_choice("auto", BLOOM, 70, 8, 78 * GiB + 1) == "blog"
    assert resolve_choice("auto", BLOOM, 70, 8, int(78.5 * GiB)) == "blog"
    assert resolve_choice("auto", BLOOM, 70, 7, A100) == "even"
    assert resolve_choice("even", BLOOM, 70, 8, A100) == "even"


@pytest.mark.parametrize("dtype", ["int8", "bf16"])
def test_the_blogs_map_leaves_gpu_0_empty_and_caps_the_others(dtype: str) -> None:
    cap = int({"int8": 26, "bf16": 51}[dtype] * GiB)
    assert blog_caps(dtype, 8) == [0, *[cap] * 7]
    assert blog_caps(dtype, 1) == [cap]
    # weight_caps resolves "auto" with the layers and GPUs it is given, and the dtype's cap
    assert weight_caps("auto", BLOOM, 70, dtype, 8, A100) == dict(enumerate(blog_caps(dtype, 8)))
    even = dict(enumerate(even_caps(BLOOM, 69, dtype, 8)))
    assert weight_caps("auto", BLOOM, 69, dtype, 8, A100) == even
    assert weight_caps("auto", BLOOM, 70, dtype, 4, A100) == dict(
        enumerate(even_caps(BLOOM, 70, dtype, 4))
    )


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(["tiny", "bloom-560m", "bloom-7b1", "bloom-176b"]),
    layers=st.integers(1, 70),
    dtype=st.sampled_from(["fp32", "bf16", "int8"]),
    n_gpus=st.integers(1, 8),
)
def test_even_caps_are_a_share_of_the_weights_plus_two_blocks(
    name: str, layers: int, dtype: str, n_gpus: int
) -> None:
    """Each GPU: its share of the weights (never below the word embedding, which is not split)
    plus two blocks of room; together at least the whole model."""
    shape = MODEL_SHAPES[name]
    caps = even_caps(shape, layers, dtype, n_gpus)
    total = model_weight_bytes(shape, layers, dtype)
    block = model_weight_bytes(shape, layers + 1, dtype) - total  # one more layer's bytes
    # The word embedding stays 16-bit under the 8-bit quantizer.
    embedding = shape.vocab_size * shape.hidden_size * {"fp32": 4, "bf16": 2, "int8": 2}[dtype]
    assert caps == [max(-(-total // n_gpus), embedding) + 2 * block] * n_gpus
    assert sum(caps) >= total + 2 * block * n_gpus


def test_only_gpu_entries_are_lowered_to_free_memory_or_scaled_for_the_quantizer() -> None:
    assert on_machine({0: 10, 1: 3, "cpu": 50, "disk": 70}, 5) == {
        0: 5,
        1: 3,
        "cpu": 50,
        "disk": 70,
    }
    factor = QUANTIZER_MAX_MEMORY_FACTOR["int8"]
    assert max_memory_map({0: 100, "cpu": 100}, "int8") == {0: math.ceil(100 / factor), "cpu": 100}
    assert max_memory_map({0: 100, "cpu": 100}, "bf16") == {0: 100, "cpu": 100}


def smallest_fitting_cap(fits: Callable[[int], bool], high: int) -> int:
    """The smallest cap at which ``fits`` holds (it holds at ``high`` and not at 0)."""
    low = 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


@pytest.mark.parametrize("name", ["tiny", "bloom-560m"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("first_gpu_empty", [False, True])
def test_the_split_and_accelerate_agree_one_byte_either_side_of_the_edge(
    name: str, dtype: str, first_gpu_empty: bool
) -> None:
    """The smallest cap that holds the whole model, found by bloomperf's split (on GPU 0 alone,
    or on GPU 1 beside an empty GPU 0): accelerate's planner offloads one byte below it and keeps
    everything on the GPUs at it."""
    shape, layers = MODEL_SHAPES[name], 3

    def caps(cap: int) -> dict[int | str, int]:
        return {0: 0, 1: cap} if first_gpu_empty else {0: cap}

    total = model_weight_bytes(shape, layers, dtype)
    edge = smallest_fitting_cap(
        lambda cap: split_model(shape, layers, dtype, caps(cap)) is not None, 3 * total
    )
    # All on one GPU, its exact bytes fit: the room kept on the first GPU is for the largest
    # layer still to place, and none is left after the last.
    assert edge == total
    for cap, fits in ((edge - 1, False), (edge, True)):
        plan = infer_device_map(shape, layers, dtype, caps(cap))
        on_gpus = not (plan.offloaded or plan.refused)
        assert on_gpus == fits, (cap, plan.placement)
        split = split_model(shape, layers, dtype, caps(cap))
        assert (split is not None) == fits
        if split is not None:
            gpu = 1 if first_gpu_empty else 0
            assert split.weights[gpu] == plan.bytes_per_device[str(gpu)] == total
