"""Accelerate's ``max_memory`` map for BLOOM and the split it leads to: the one rule that the
backend (what it passes to ``from_pretrained``), the memory model and ``run --dry-run`` share.

What transformers 5 does with the map before any weight is read (``_get_device_map`` in
``transformers/integrations/accelerate.py``):

1. ``get_balanced_memory`` lowers every GPU but the last to an even share of the weights plus
   1.25 x the largest block or leaf module (a map with one usable GPU is kept as given);
2. the 8-bit quantizer's ``adjust_max_memory`` multiplies every entry by 0.90 ("more space for
   buffers that are created during quantization");
3. ``infer_auto_device_map`` fills the GPUs in order; on the first GPU of the map it keeps room
   for the largest layer still to place, and what is left over goes to ``"disk"`` (there is no
   ``cpu`` entry), after which the quantizer refuses the load: "Some modules are dispatched on
   the CPU or the disk".

Sizes are counted as accelerate counts them: int8 matmul weights at one byte, the word embedding
(its tied ``lm_head`` counted once), biases and norms in fp16 (``bloomperf.catalog.weights``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bloomperf.catalog.hardware import GiB
from bloomperf.catalog.models import MODEL_SHAPES, ModelShape
from bloomperf.catalog.sizes import parse_size
from bloomperf.catalog.weights import (
    activation_bytes,
    embedding_bytes,
    layer_bytes,
    model_weight_bytes,
)

MAP_CHOICES = ("auto", "blog", "even")

# The blog script's hand-made map for BLOOM-176B on 8 x 80 GB (transformers-bloom-inference,
# ``get_max_memory_per_gpu_dict``: "this works with bs=40"): GPU 0 holds no weights, so it has
# room for generate's inputs, outputs and logits; GPUs 1-7 are capped for the weights.
BLOG_MAX_MEMORY_GIB = {"int8": 26.0, "other": 51.0}

# transformers' ``Bnb8BitHfQuantizer.adjust_max_memory`` multiplies the map by 0.90 before the
# device map is inferred. The blog's 26 GiB x 7 then offers 175.9 GB against the 179.9 GB that
# bloom-176b takes in int8 (its embedding stays fp16), and its last layers land on "disk". The
# caps here are what the weights may take, so the map given to accelerate is divided by the
# factor: a 26 GiB cap stays 26 GiB of weights. Loading quantizes one fp16 weight at a time on
# its GPU (at most 4h^2 x 2 bytes, 1.5 GiB for bloom-176b), far below what a cap leaves free.
# Where a cap exceeds a GPU's free memory, transformers first lowers it to that (``on_machine``),
# so the quantizer still keeps its 10 % of what is free.
QUANTIZER_MAX_MEMORY_FACTOR = {"int8": 0.90}

# ``get_balanced_memory``'s buffer over the even share: 1.25 x the largest block or leaf.
BALANCED_BUFFER = 1.25


def blog_setup(shape: ModelShape, layers: int, n_gpus: int, gpu_memory_bytes: int) -> bool:
    """The blog's own setting: all of bloom-176b on one node of eight 80 GB-class GPUs (torch
    sees 79.1-79.4 GiB of an A100-80GB or H100-80GB, the datasheets say 80)."""
    blog = MODEL_SHAPES["bloom-176b"]
    same_model = (shape.hidden_size, shape.vocab_size, layers) == (
        blog.hidden_size,
        blog.vocab_size,
        blog.n_layer,
    )
    return same_model and n_gpus == 8 and gpu_memory_bytes > 78 * GiB


def resolve_choice(
    choice: str, shape: ModelShape, layers: int, n_gpus: int, gpu_memory_bytes: int
) -> str:
    """``auto``: the blog's map where the blog ran (its baselines were measured with it), an even
    split elsewhere. Other choices are returned as they are."""
    if choice != "auto":
        return choice
    return "blog" if blog_setup(shape, layers, n_gpus, gpu_memory_bytes) else "even"


def weight_caps(
    choice: str, shape: ModelShape, layers: int, dtype: str, n_gpus: int, gpu_memory_bytes: int
) -> dict[int | str, int]:
    """Bytes of weights each device may take: ``auto``, ``blog``, ``even`` or an explicit map
    such as ``0:0GiB,1:51GiB,cpu:100GiB``."""
    resolved = resolve_choice(choice, shape, layers, n_gpus, gpu_memory_bytes)
    if resolved == "blog":
        return dict(enumerate(blog_caps(dtype, n_gpus)))
    if resolved == "even":
        return dict(enumerate(even_caps(shape, layers, dtype, n_gpus)))
    return parse_map(choice)


def blog_caps(dtype: str, n_gpus: int) -> list[int]:
    """GPU 0 free and the blog's cap on every other GPU; on a single GPU, the cap on it."""
    cap = int(BLOG_MAX_MEMORY_GIB["int8" if dtype == "int8" else "other"] * GiB)
    return [cap] if n_gpus == 1 else [0, *([cap] * (n_gpus - 1))]


def even_caps(shape: ModelShape, layers: int, dtype: str, n_gpus: int) -> list[int]:
    """An even share of the weights (at least the word embedding, which cannot be split), plus
    one block because the fill moves on to the next GPU as soon as the next block does not fit,
    plus one block that accelerate keeps free on the first GPU (the largest layer still to
    place)."""
    share = math.ceil(model_weight_bytes(shape, layers, dtype) / n_gpus)
    word = shape.vocab_size * shape.hidden_size * activation_bytes(dtype)
    return [max(share, word) + 2 * layer_bytes(shape, dtype)] * n_gpus


def max_memory_map(caps: dict[int | str, int], dtype: str) -> dict[int | str, int]:
    """The ``max_memory`` to give ``from_pretrained`` so that, after the quantizer's factor, each
    GPU may take its cap (rounded up: the factor must not round a byte away)."""
    factor = QUANTIZER_MAX_MEMORY_FACTOR.get(dtype, 1.0)
    return {
        key: math.ceil(value / factor) if isinstance(key, int) else value
        for key, value in caps.items()
    }


def on_machine(max_memory: dict[int | str, int], free_bytes: int) -> dict[int | str, int]:
    """The map as transformers uses it on the machine: ``get_max_memory`` lowers each GPU's
    entry to the memory free on it (here: the same ``free_bytes`` on every GPU)."""
    return {k: min(v, free_bytes) if isinstance(k, int) else v for k, v in max_memory.items()}


def parse_map(text: str) -> dict[int | str, int]:
    """``"0:0GiB,1:51GiB,cpu:100GiB"`` -> {0: 0, 1: 51 GiB, "cpu": 100 GiB} in bytes.
    Raises ValueError with what is wrong (the caller names the option)."""
    result: dict[int | str, int] = {}
    for part in text.split(","):
        key, sep, value = (p.strip() for p in part.partition(":"))
        if not sep or not value or not (key.isdigit() or key in ("cpu", "disk")):
            raise ValueError(
                f"{part.strip()!r} is not DEVICE:SIZE with DEVICE a GPU index, cpu or disk "
                f"(e.g. 0:0GiB,1:51GiB), nor one of {', '.join(MAP_CHOICES)}"
            )
        try:
            size = parse_size(value, allow_zero=True)
        except ValueError as exc:
            raise ValueError(f"{part.strip()!r}: {exc}") from None
        result[int(key) if key.isdigit() else key] = size
    return result


def parse_choice(text: str) -> str:
    """A ``--max-memory`` value checked at parse time: a choice or a well-formed map."""
    if text not in MAP_CHOICES:
        parse_map(text)
    return text


# ---- the split accelerate makes -------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """Where accelerate puts BLOOM: weight bytes and blocks per GPU, the embedding's GPU."""

    weights: tuple[int, ...]
    layers: tuple[int, ...]
    embedding_gpu: int


@dataclass(frozen=True)
class _Module:
    name: str
    size: int
    children: tuple[_Module, ...] = ()  # empty: a leaf or a block accelerate never splits


def split_model(
    shape: ModelShape, layers: int, dtype: str, max_memory: dict[int | str, int]
) -> Split | None:
    """accelerate's placement for ``max_memory`` as given to ``from_pretrained`` (balanced caps,
    the quantizer's factor, the sequential fill with room kept on the first GPU); None when
    something would land on the CPU or the disk. Checked against transformers' own planner in
    ``tests/test_accelerate_map.py``."""
    gpus = sorted(key for key in max_memory if isinstance(key, int))
    if not gpus:
        return None
    caps = balanced_caps(shape, layers, dtype, {g: max_memory[g] for g in gpus})
    factor = QUANTIZER_MAX_MEMORY_FACTOR.get(dtype, 1.0)
    limits = [caps[g] * factor for g in gpus]
    used = [0] * len(gpus)
    placed_layers = [0] * len(gpus)
    embedding_gpu = -1
    queue = list(_bloom_tree(shape, layers, dtype))
    largest, largest_names = _largest_layer(queue)
    device = 0
    while queue:
        module = queue.pop(0)
        largest_names = [
            n for n in largest_names if n != module.name and not n.startswith(module.name + ".")
        ]
        if not largest_names:
            largest, largest_names = _largest_layer(queue)
        if device == len(gpus):
            return None  # the rest goes to "disk"
        reserved = largest if device == 0 else 0
        if used[device] + module.size <= limits[device] - reserved:
            used[device] += module.size
            placed_layers[device] += _count_blocks(module)
            if _holds_embedding(module):
                embedding_gpu = gpus[device]
            continue
        if module.children:
            queue = [*module.children, *queue]
            largest, largest_names = _largest_layer(queue)
            continue
        device += 1
        queue.insert(0, module)
    return Split(tuple(used), tuple(placed_layers), embedding_gpu)


def balanced_caps(
    shape: ModelShape, layers: int, dtype: str, caps: dict[int, int]
) -> dict[int, int]:
    """``get_balanced_memory`` with a map given: with two or more usable GPUs, every one but the
    last is lowered to the even share plus 1.25 x the largest block or leaf module."""
    usable = sorted(g for g, cap in caps.items() if cap > 0)
    if len(usable) < 2:
        return dict(caps)
    # The larger of the biggest block and the biggest leaf module. Every leaf but the embedding
    # (a block's MLP, 4h^2 weights at most) lies inside a block (12h^2), so the embedding stands
    # for the leaves.
    embedding = shape.vocab_size * shape.hidden_size * activation_bytes(dtype)
    largest = max(layer_bytes(shape, dtype), embedding)
    per_gpu = model_weight_bytes(shape, layers, dtype) // len(usable)
    per_gpu += int(BALANCED_BUFFER * largest)
    return {g: min(per_gpu, cap) if g in usable[:-1] else cap for g, cap in caps.items()}


def _bloom_tree(shape: ModelShape, layers: int, dtype: str) -> tuple[_Module, ...]:
    """BloomForCausalLM as accelerate walks it; ``lm_head`` is tied to the embedding (size 0)."""
    norm = 2 * shape.hidden_size * activation_bytes(dtype)
    word = embedding_bytes(shape, dtype) - norm
    blocks = tuple(_Module(f"transformer.h.{i}", layer_bytes(shape, dtype)) for i in range(layers))
    children = (
        _Module("transformer.word_embeddings", word),
        _Module("transformer.word_embeddings_layernorm", norm),
        _Module("transformer.h", sum(b.size for b in blocks), blocks),
        _Module("transformer.ln_f", norm),
    )
    transformer = _Module("transformer", sum(c.size for c in children), children)
    return (transformer, _Module("lm_head", 0))


def _largest_layer(modules: list[_Module]) -> tuple[int, list[str]]:
    """accelerate's ``get_max_layer_size``: the largest unsplittable module still queued."""
    largest, names = 0, []
    pending = list(modules)
    while pending:
        module = pending.pop(0)
        if module.children:
            pending = [*module.children, *pending]
        elif module.size > largest:
            largest, names = module.size, [module.name]
        elif module.size == largest:
            names.append(module.name)
    return largest, names


def _count_blocks(module: _Module) -> int:
    if module.name.startswith("transformer.h."):
        return 1
    return sum(_count_blocks(child) for child in module.children)


def _holds_embedding(module: _Module) -> bool:
    return module.name in ("transformer", "transformer.word_embeddings")
