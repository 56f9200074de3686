"""The device map as `run --dry-run` shows it: each device's modules with runs of blocks folded
(any placement, read back by an independent parser), the first sentence of transformers'
refusal, and a plan for GPUs this machine lacks made without accelerate's warnings."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.device_map import fold_ranges, infer_device_map, summarise
from bloomperf.catalog.models import MODEL_SHAPES

DEVICES = st.sampled_from([0, 1, 2, "cpu", "disk"])
OTHERS = ["transformer.word_embeddings", "transformer.word_embeddings_layernorm", "lm_head", ""]
FOLDED = re.compile(r"^transformer\.h\.(\d+)(?:-(\d+))?$")


def unfold(entries: list[str]) -> list[tuple[int, int]]:
    """``transformer.h.3-5`` -> (3, 5), ``transformer.h.7`` -> (7, 7); other names are left out."""
    spans = []
    for entry in entries:
        match = FOLDED.match(entry)
        if match:
            first = int(match.group(1))
            spans.append((first, int(match.group(2) or first)))
    return spans


@given(st.sets(st.integers(0, 80), max_size=30))
def test_folded_runs_cover_the_blocks_once_in_order_and_never_touch(indices):
    entries = fold_ranges(sorted(indices))
    spans = unfold(entries)
    assert len(spans) == len(entries)  # every entry is a block run
    covered = [i for first, last in spans for i in range(first, last + 1)]
    assert covered == sorted(indices)  # each block once, ascending
    # A run of one block is written without a dash, a longer one with its ends.
    assert all((a == b) == ("-" not in e) for e, (a, b) in zip(entries, spans, strict=True))
    # Maximal runs: a gap of at least one block between consecutive runs.
    assert all(after[0] > before[1] + 1 for before, after in pairwise(spans))


@given(
    st.dictionaries(st.integers(0, 40), DEVICES, max_size=20),
    st.dictionaries(st.sampled_from(OTHERS), DEVICES, max_size=4),
)
def test_each_device_lists_its_modules_then_its_blocks(blocks, others):
    placement: dict[str, int | str] = {name: device for name, device in others.items()}
    placement.update({f"transformer.h.{index}": device for index, device in blocks.items()})
    summary = summarise(placement)
    assert set(summary) == {str(device) for device in placement.values()}
    for device, entries in summary.items():
        names = [name or "(whole model)" for name, d in others.items() if str(d) == device]
        held = sorted(index for index, d in blocks.items() if str(d) == device)
        assert entries[: len(names)] == names  # as placed, "" named for what it is
        spans = unfold(entries[len(names) :])
        assert [i for first, last in spans for i in range(first, last + 1)] == held
        assert len(entries) == len(names) + len(spans)


def test_a_whole_model_on_one_device_is_named_so():
    assert summarise({"": "cpu"}) == {"cpu": ["(whole model)"]}
    assert fold_ranges([]) == [] and fold_ranges([4]) == ["transformer.h.4"]


@pytest.fixture
def accelerate_logger() -> Iterator[logging.Logger]:
    """accelerate's planner's logger at its default level (other tests quiet it for the whole
    process), put back as found."""
    logger = logging.getLogger("accelerate.utils.modeling")
    level, root = logger.level, logging.getLogger().level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)
    logging.getLogger().setLevel(root)


def test_a_plan_for_gpus_this_machine_lacks_says_nothing_and_leaves_other_logging_alone(
    accelerate_logger, caplog
):
    """accelerate warns "Device 0 is not available" for every GPU a plan names on a machine
    without it; a plan is for another machine, so that logger alone is quieted."""
    root = logging.getLogger().level
    with caplog.at_level(logging.WARNING):
        plan = infer_device_map(MODEL_SHAPES["tiny"], 4, "fp32", {0: 10**6, 1: 10**6})
    assert plan.placement and not [r for r in caplog.records if r.name == accelerate_logger.name]
    assert logging.getLogger().level == root
    logging.getLogger("bloomperf.elsewhere").warning("still heard")
    assert "still heard" in caplog.text


def test_a_refused_map_gives_the_first_sentence_of_transformers_refusal():
    """int8 with blocks on the disk: the quantizer's ValueError, its first sentence only (the
    rest tells a from_pretrained user about llm_int8_enable_fp32_cpu_offload)."""
    pytest.importorskip("bitsandbytes")
    plan = infer_device_map(MODEL_SHAPES["tiny"], 4, "int8", {0: 10**5})
    assert "disk" in plan.placement.values() or "cpu" in plan.placement.values()
    assert plan.refused == "Some modules are dispatched on the CPU or the disk"
