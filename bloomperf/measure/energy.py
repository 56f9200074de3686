"""Energy over the timed cycles: NVML's total-energy counters on GPUs, RAPL on CPUs.

The controller reads the counters just before and just after each cycle request (outside the
worker's timed region, so nothing is added to what is timed); the runner keeps the timed cycles'
readings and adds them up, so the load and the warm-up never count.

- NVML's ``nvmlDeviceGetTotalEnergyConsumption`` counts mJ since the driver loaded (Volta and
  newer), one counter per GPU, summed over the group's GPUs. It never wraps: a counter that goes
  backwards was reset (driver reload, GPU reset) and the figure is invalid.
- RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``, one top-level zone per package; the
  ``:N:M`` sub-zones are parts of it and would count twice) wraps at ``max_energy_range_uj``: a
  decrease is that wrap. It measures the whole package, other processes included. Since Linux
  5.10 ``energy_uj`` is readable by root only (CVE-2020-8694); unreadable means null, with why.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.store.results import EnergyReading

POWERCAP = Path("/sys/class/powercap")
NO_LOCAL_GPU = (
    "nvml: none of the group's GPUs is on this node (a multi-node group's ranks run where "
    "DeepSpeed's launcher puts them): their energy counters cannot be read from here"
)


@dataclass(frozen=True)
class Snapshot:
    """Every counter of the meter at one instant, in its own unit; None when unreadable."""

    at: float  # time.perf_counter()
    values: tuple[int, ...] | None
    reason: str = ""


class EnergyMeter:
    """Counters read as snapshots; ``between`` turns two snapshots into an ``EnergyReading``."""

    source = "unavailable"
    joules_per_unit = 0.0

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def read(self) -> tuple[int, ...]:
        raise OSError(self.reason)

    def snapshot(self) -> Snapshot:
        at = time.perf_counter()
        try:
            return Snapshot(at, self.read())
        except Exception as exc:  # NVMLError or OSError: the figure is lost, the run goes on
            return Snapshot(at, None, self.reason or f"{self.source}: {exc}")

    def between(self, before: Snapshot, after: Snapshot, tokens: int) -> EnergyReading:
        seconds = after.at - before.at
        if before.values is None or after.values is None:
            why = before.reason or after.reason
            return EnergyReading(self.source, None, seconds, tokens, why)
        units = 0
        for index, (start, end) in enumerate(zip(before.values, after.values, strict=True)):
            delta = self.delta(start, end, index)
            if delta is None:
                why = f"{self.source}: counter {index} went backwards ({start} -> {end}): reset"
                return EnergyReading(self.source, None, seconds, tokens, why)
            units += delta
        return EnergyReading(self.source, units * self.joules_per_unit, seconds, tokens)

    def delta(self, start: int, end: int, index: int) -> int | None:
        """The counted units from ``start`` to ``end``; None when the counter was reset."""
        return end - start if end >= start else None


class NvmlEnergy(EnergyMeter):
    source = "nvml"
    joules_per_unit = 1e-3  # mJ

    def __init__(self, nvml: Any, indexes: Sequence[int]) -> None:
        super().__init__()
        self.nvml = nvml
        # MIG instances share their GPU's counter: count each whole GPU once.
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in sorted(set(indexes))]

    def read(self) -> tuple[int, ...]:
        return tuple(int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles)


class RaplEnergy(EnergyMeter):
    source = "rapl"
    joules_per_unit = 1e-6  # µJ

    def __init__(self, zones: Sequence[Path]) -> None:
        super().__init__()
        self.zones = list(zones)
        self.ranges = [int((z / "max_energy_range_uj").read_text()) for z in self.zones]

    def read(self) -> tuple[int, ...]:
        return tuple(int((z / "energy_uj").read_text()) for z in self.zones)

    def delta(self, start: int, end: int, index: int) -> int | None:
        if end >= start:
            return end - start
        return end + self.ranges[index] + 1 - start  # the counter wrapped past its range


def create_meter(device: str, gpu_indexes: Sequence[int], nvml: Any = None) -> EnergyMeter:
    """The meter for a group: NVML on GPUs, RAPL on CPU; unavailable (with why) otherwise."""
    if device == "cuda" or device.startswith("cuda:"):
        if not gpu_indexes:  # counting no GPU would read 0 J: a figure, and a false one
            return EnergyMeter(NO_LOCAL_GPU)
        try:
            if nvml is None:
                from bloomperf.catalog.topology import load_nvml

                nvml = load_nvml()
            nvml.nvmlInit()
            meter = NvmlEnergy(nvml, gpu_indexes)
            meter.read()  # NOT_SUPPORTED before Volta: say so now, not once per cycle
            return meter
        except ImportError:
            return EnergyMeter("nvml: nvidia-ml-py is not installed")
        except Exception as exc:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            return EnergyMeter(f"nvml: total energy counter unavailable: {exc}")
    return create_rapl_meter()


def create_rapl_meter(root: Path = POWERCAP) -> EnergyMeter:
    zones = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not zones:
        return EnergyMeter(f"rapl: no package zones in {root} (not exposed on this host)")
    try:
        meter = RaplEnergy(zones)
        meter.read()
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        return EnergyMeter(f"rapl: cannot read {zones[0]}/energy_uj: {why}")
    return meter


def total_energy(readings: Sequence[EnergyReading]) -> EnergyReading | None:
    """The readings of the timed cycles added up; invalid if any one is (its reason kept)."""
    if not readings:
        return None
    seconds = sum(r.seconds for r in readings)
    tokens = sum(r.tokens for r in readings)
    invalid = next((r for r in readings if r.energy_j is None), None)
    if invalid is not None:
        return EnergyReading(invalid.source, None, seconds, tokens, invalid.reason)
    joules = sum(r.energy_j for r in readings if r.energy_j is not None)
    return EnergyReading(readings[0].source, joules, seconds, tokens)
