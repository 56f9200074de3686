"""A cycle's load as stored with each cell and ``ab`` sample: what it is written as, what it reads
back as, and what a broken one is refused with (in-process; the probe itself is
tests/test_contention.py's)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.store.contention import CycleLoad, load_from_dict, load_to_dict

seconds = st.floats(0.0, 1e6, allow_nan=False)
maybe_seconds = st.none() | seconds


@given(
    wall=seconds,
    wait=maybe_seconds,
    other=maybe_seconds,
    width=st.integers(1, 512),
    gpu_others=st.none() | st.integers(0, 64),
)
def test_a_load_is_stored_to_the_microsecond_and_reads_back_as_stored(
    wall: float, wait: float | None, other: float | None, width: int, gpu_others: int | None
) -> None:
    """Wall and wait times keep 6 decimals (1 µs), other processes' CPU time 4 (it counts 10 ms
    ticks); the width and the GPU neighbours are kept as they are, under their own names."""
    stored = load_to_dict(CycleLoad(wall, wait, other, width, gpu_others))
    assert stored == {
        "wall_s": float(f"{wall:.6f}"),
        "wait_s": None if wait is None else float(f"{wait:.6f}"),
        "other_cpu_s": None if other is None else float(f"{other:.4f}"),
        "width": width,
        "gpu_others": gpu_others,
    }
    read = load_from_dict(stored, "x")
    assert read is not None
    assert (read.wall_s, read.wait_s, read.other_cpu_s) == (
        stored["wall_s"],
        stored["wait_s"],
        stored["other_cpu_s"],
    )
    assert (read.width, read.gpu_others) == (width, gpu_others)


def test_a_cycle_of_no_measurable_wall_time_reads_back_as_zero_and_has_no_shares() -> None:
    read = load_from_dict({"wall_s": 0, "wait_s": 0.5, "other_cpu_s": 0.5}, "x")
    assert read == CycleLoad(0.0, 0.5, 0.5)
    assert (read.wait_share, read.other_cores) == (None, None)


def test_only_the_wall_time_is_required_and_the_width_defaults_to_one_cpu() -> None:
    assert load_from_dict({"wall_s": 1.5}, "x") == CycleLoad(1.5, None, None, 1, None)
    assert load_from_dict(None, "x") is None
    assert load_to_dict(None) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1.0], "cell 3: a cycle's load must be an object"),
        ({}, "cell 3: field 'wall_s' must be a number, found"),
        ({"wall_s": -1.0}, "cell 3: field 'wall_s' is out of range (-1)"),
        ({"wall_s": 1, "wait_s": "1"}, "cell 3: field 'wait_s' must be a number, found"),
        ({"wall_s": 1, "other_cpu_s": -2}, "cell 3: field 'other_cpu_s' is out of range (-2)"),
        ({"wall_s": 1, "width": 0}, "cell 3: field 'width' is out of range (0)"),
        ({"wall_s": 1, "width": 1.5}, "cell 3: field 'width' must be an integer, found"),
        ({"wall_s": 1, "gpu_others": -1}, "cell 3: field 'gpu_others' is out of range (-1)"),
        ({"wall_s": 1, "gpu_others": "2"}, "cell 3: field 'gpu_others' must be an integer"),
    ],
)
def test_a_broken_load_is_refused_naming_where_and_the_field(data: object, message: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        load_from_dict(data, "cell 3")
    assert str(refused.value).startswith(message), refused.value


@given(cpus=st.integers(1, 512), wall=st.floats(0.01, 1e4), other=seconds)
def test_a_served_sweeps_cpus_are_stored_only_when_set_and_read_back(
    cpus: int, wall: float, other: float
) -> None:
    """A served sweep's load names the CPUs its processes share (``cpus``); a cycle's load
    without them is written as before, so older readers and files are unchanged."""
    served = load_to_dict(CycleLoad(wall, 0.1, other, 2, None, cpus))
    assert served is not None and served["cpus"] == cpus
    read = load_from_dict(served, "x")
    assert read is not None and read.cpus == cpus
    plain = load_to_dict(CycleLoad(wall, 0.1, other, 2, None))
    assert plain is not None and "cpus" not in plain
    rounded = CycleLoad(float(f"{wall:.6f}"), 0.1, float(f"{other:.4f}"), 2, None)
    assert load_from_dict(plain, "x") == rounded
    with pytest.raises(BloomperfError, match="cpus"):
        load_from_dict({**served, "cpus": 0}, "x")
