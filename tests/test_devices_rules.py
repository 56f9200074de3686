"""CUDA_VISIBLE_DEVICES read as CUDA reads it, into NVML indices, entry by entry.

CUDA's rules (the CUDA C Programming Guide, "CUDA Environment Variables"): ordinals, ``GPU-``
UUIDs and ``MIG-`` UUIDs, each possibly a unique prefix, the ``GPU-`` part optional; parsing stops
at the first entry that names no device or repeats one; ``CUDA_DEVICE_ORDER`` is ``PCI_BUS_ID``
or else ``FASTEST_FIRST``.
"""

from __future__ import annotations

from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.devices import (
    VisibleDevice,
    check_same_models,
    cuda_device_order,
    measured_handle,
    mig_handles,
    nvml_text,
    plan_visible,
    resolve_visible,
)
from bloomperf.core.errors import BloomperfError
from tests.nvml_replay import Handle, NvmlReplay

GIB = 1024**3


def machine() -> NvmlReplay:
    return NvmlReplay.load("4xA100-SXM4-80GB")


def uuid(nvml: NvmlReplay, index: int) -> str:
    return str(nvml.devices[index]["uuid"])


@pytest.mark.parametrize(
    ("value", "order"),
    [
        (None, "FASTEST_FIRST"),
        ("PCI_BUS_ID", "PCI_BUS_ID"),
        (" PCI_BUS_ID\n", "PCI_BUS_ID"),
        ("FASTEST_FIRST", "FASTEST_FIRST"),
        ("pci_bus_id", "FASTEST_FIRST"),
        ("", "FASTEST_FIRST"),
    ],
)
def test_the_order_is_pci_bus_only_when_it_says_so(
    monkeypatch: pytest.MonkeyPatch, value: str | None, order: str
) -> None:
    if value is None:
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", value)
    assert cuda_device_order() == order


@pytest.mark.parametrize(
    ("visible", "indices"),
    [
        ("2,0", [2, 0]),
        ("3", [3]),
        ("2,4,1", [2]),  # GPU 4 is past the last one: parsing stops there
        ("4", []),
        ("1,1,2", [1]),  # a repeat stops it too
        ("1,,2", [1]),
        ("-1,0", []),
        ("", []),
        (" 0 , 3 ", [0, 3]),
    ],
)
def test_ordinals_stop_at_the_first_that_names_no_gpu(visible: str, indices: list[int]) -> None:
    chosen = resolve_visible(machine(), visible, "PCI_BUS_ID")
    assert chosen == [VisibleDevice(i) for i in indices]


def test_every_gpu_is_visible_without_the_variable() -> None:
    assert resolve_visible(machine(), None) == [VisibleDevice(i) for i in range(4)]


def test_a_uuid_prefix_with_or_without_gpu_names_its_gpu() -> None:
    nvml = machine()
    full = uuid(nvml, 2)
    for entry in (full, full[:12], full.removeprefix("GPU-")[:6], full.upper(), "gpu-" + full[4:]):
        assert resolve_visible(nvml, f"{entry},0", "FASTEST_FIRST") == [
            VisibleDevice(2),
            VisibleDevice(0),
        ], entry


def test_an_ambiguous_uuid_prefix_names_no_gpu() -> None:
    nvml = machine()
    nvml.devices[3]["uuid"] = uuid(nvml, 1)[:10] + "ffff-0000"  # GPUs 1 and 3 share 10 characters
    assert resolve_visible(nvml, uuid(nvml, 1)[:10], "PCI_BUS_ID") == []
    assert resolve_visible(nvml, "GPU-", "PCI_BUS_ID") == []  # every GPU
    assert resolve_visible(nvml, uuid(nvml, 1)[:11] + ",0", "PCI_BUS_ID") == [
        VisibleDevice(1),
        VisibleDevice(0),
    ]


def with_mig(nvml: NvmlReplay, index: int, uuids: list[str]) -> NvmlReplay:
    nvml.devices[index]["mig"] = [
        {"uuid": u, "memory_total": 10 * GIB, "memory_used": 0} for u in uuids
    ]
    return nvml


def test_a_mig_prefix_names_its_instance_and_an_ambiguous_one_none() -> None:
    nvml = with_mig(machine(), 1, ["MIG-aaaa-1111", "MIG-aaaa-2222"])
    with_mig(nvml, 3, ["MIG-bbbb-3333"])
    assert resolve_visible(nvml, "MIG-aaaa-2", "PCI_BUS_ID") == [VisibleDevice(1, "MIG-aaaa-2222")]
    assert resolve_visible(nvml, "mig-BBBB", "PCI_BUS_ID") == [VisibleDevice(3, "MIG-bbbb-3333")]
    assert resolve_visible(nvml, "MIG-aaaa", "PCI_BUS_ID") == []
    assert resolve_visible(nvml, "MIG-cccc,0", "PCI_BUS_ID") == []


def mixed() -> NvmlReplay:
    nvml = machine()
    nvml.devices[2]["name"] = "NVIDIA A10"
    return nvml


def test_integer_ids_on_mixed_gpus_are_refused_under_the_default_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = (
        "CUDA_VISIBLE_DEVICES=1, 3: integer ids follow CUDA's default FASTEST_FIRST order, which"
        " is not NVML's PCI bus order on mixed GPUs (NVIDIA A10, NVIDIA A100-SXM4-80GB); set"
        " CUDA_DEVICE_ORDER=PCI_BUS_ID or name the GPUs by UUID"
    )
    with pytest.raises(BloomperfError) as refused:
        resolve_visible(mixed(), "1, 3", "FASTEST_FIRST")
    assert str(refused.value) == message
    # The order given is the environment's when none is passed.
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert resolve_visible(mixed(), "1,3") == [VisibleDevice(1), VisibleDevice(3)]
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    with pytest.raises(BloomperfError, match="FASTEST_FIRST"):
        resolve_visible(mixed(), "1,3")
    # UUIDs name a GPU whatever the order, and identical GPUs keep PCI bus order.
    nvml = mixed()
    assert resolve_visible(nvml, uuid(nvml, 3), "FASTEST_FIRST") == [VisibleDevice(3)]
    assert resolve_visible(machine(), "3,1", "FASTEST_FIRST") == [
        VisibleDevice(3),
        VisibleDevice(1),
    ]


def test_two_models_are_mixed_and_one_is_not() -> None:
    nvml = mixed()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    with pytest.raises(BloomperfError, match=r"\(NVIDIA A10, NVIDIA A100-SXM4-80GB\)"):
        check_same_models(nvml, handles, "0")
    check_same_models(nvml, [handles[0], handles[1], handles[3]], "0")


class SparseMig(NvmlReplay):
    """MIG instances in slots 1 and 3 of 4: slot 0 and 2's instances were destroyed."""

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return 4

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, slot: int) -> Handle:
        if slot in (0, 2):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return super().nvmlDeviceGetMigDeviceHandleByIndex(handle, slot // 2)


def test_an_empty_mig_slot_is_skipped_not_the_end() -> None:
    nvml = SparseMig(machine().recording)
    with_mig(nvml, 0, ["MIG-first", "MIG-second"])
    handles = mig_handles(nvml, nvml.nvmlDeviceGetHandleByIndex(0))
    assert [nvml.nvmlDeviceGetUUID(h) for h in handles] == ["MIG-first", "MIG-second"]
    assert resolve_visible(nvml, "MIG-second", "PCI_BUS_ID") == [VisibleDevice(0, "MIG-second")]


def test_the_measured_handle_is_the_instances_or_the_whole_gpus() -> None:
    nvml = with_mig(machine(), 2, ["MIG-x1", "MIG-x2"])
    whole = measured_handle(nvml, 2)
    assert (whole.index, whole.mig) == (2, None)
    instance = measured_handle(nvml, 2, "MIG-x2")
    assert (instance.index, instance.mig) == (2, 1)
    with pytest.raises(pynvml.NVMLError) as missing:
        measured_handle(nvml, 2, "MIG-x")  # a prefix is not the instance's UUID
    assert missing.value.value == pynvml.NVML_ERROR_NOT_FOUND
    with pytest.raises(pynvml.NVMLError):
        measured_handle(nvml, 1, "MIG-x1")  # another GPU's instance


@pytest.mark.parametrize(("value", "text"), [(b"GPU-1a", "GPU-1a"), ("GPU-1a", "GPU-1a"), (7, "7")])
def test_nvml_text_reads_old_bytes_and_new_str(value: Any, text: str) -> None:
    assert nvml_text(value) == text


# ---- plans for another machine ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "visible", "chosen"),
    [
        (8, "7", [7]),
        (8, "8", []),
        (8, "6,8,7", [6]),
        (4, "3,2,1,0", [3, 2, 1, 0]),
        (8, "-1", []),
        (8, "2,-1,3", [2]),
        (8, " 1 ,2", [1, 2]),
        (8, "", []),
    ],
)
def test_a_plan_reads_ordinals_as_cuda_would_there(
    count: int, visible: str, chosen: list[int]
) -> None:
    assert plan_visible(count, visible) == chosen


def test_a_plan_cannot_resolve_a_uuid_and_says_so() -> None:
    with pytest.raises(BloomperfError) as refused:
        plan_visible(8, "0,GPU-94a1")
    assert str(refused.value) == (
        "CUDA_VISIBLE_DEVICES=0,GPU-94a1: a plan for another machine cannot resolve the UUID"
        " 'GPU-94a1'; name its GPUs by index"
    )


@given(st.integers(1, 16), st.lists(st.integers(-1, 20), max_size=6))
def test_a_plan_agrees_with_the_machine_it_plans_for(count: int, ids: list[int]) -> None:
    """On a machine of ``count`` identical GPUs, the plan and NVML's reading pick the same GPUs."""
    recording = machine().recording
    recording = {**recording, "devices": [dict(recording["devices"][0]) for _ in range(count)]}
    for i, device in enumerate(recording["devices"]):
        device["uuid"] = f"GPU-{i:08x}-0000"
    visible = ",".join(map(str, ids))
    resolved = resolve_visible(NvmlReplay(recording), visible, "FASTEST_FIRST")
    assert plan_visible(count, visible) == [d.index for d in resolved]
