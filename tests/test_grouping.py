"""Which worker group serves which cell (the session's grouping), on CPU, without starting any.

DeepSpeed-Inference sizes its kernel workspace at a group's first forward, so by default every
ds-inference batch size gets a group (a load) of its own; ``--ds-load-once`` keeps one group per
dtype, as every other backend has: one load serves all its batch sizes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.catalog.topology import planned_topology
from bloomperf.cli.plan import planned_model
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session, all_cells


def groups_started(batches: list[int], backends: str, load_once: bool) -> dict[str, int]:
    """cell id -> the number of the group (in start order) that serves it."""
    settings_ = {
        "model": "bloom-176b",
        "layers": "2",
        "device": "cuda",
        "backends": backends,
        "dtypes": "fp16",
        "batch_sizes": ",".join(map(str, batches)),
        "no_lock": "1",
    }
    if load_once:
        settings_["ds_load_once"] = "1"
    options = resolve_options(settings_, env={})
    session = Session.prepare(
        options, planned_topology("1xH200-141GB"), planned_model(options, "cuda")
    )
    started: list[object] = []
    serving = {}
    for cell in all_cells(session):
        runner = session.runner(cell)
        if not started or runner is not started[-1]:
            started.append(runner)
        serving[cell.id] = len(started)
    session.stop()
    return serving


batch_lists = st.lists(st.integers(1, 4096), min_size=1, max_size=6, unique=True)


@given(batches=batch_lists)
@settings(max_examples=15, deadline=None)
def test_ds_inference_starts_a_fresh_group_for_every_batch_size(batches: list[int]) -> None:
    serving = groups_started(batches, "ds-inference", load_once=False)
    assert sorted(serving.values()) == list(range(1, len(batches) + 1))


@given(batches=batch_lists)
@settings(max_examples=15, deadline=None)
def test_load_once_and_other_backends_serve_every_batch_from_one_group(
    batches: list[int],
) -> None:
    assert set(groups_started(batches, "ds-inference", load_once=True).values()) == {1}
    # accelerate and auto-TP keep one group per dtype whatever --ds-load-once says
    for load_once in (False, True):
        serving = groups_started(batches, "accelerate,ds-autotp", load_once)
        ids = sorted(serving)
        assert {serving[i] for i in ids if i.startswith("accelerate")} == {1}
        assert {serving[i] for i in ids if i.startswith("ds-autotp")} == {2}
