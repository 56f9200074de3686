"""GPU telemetry of one cell (clocks, power, temperature, NVML's clock-event reasons) and the
rule that flags a cell measured on a GPU that was not running at steady clocks.

A flagged cell's figures say more about the GPU's cooling or power budget than about the
software: ``bloomperf diff`` reports it as *untrustworthy* rather than regressed or same.
Pure data and arithmetic: the sampler is ``bloomperf.measure.telemetry``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import (
    entries,
    get_float,
    get_int,
    get_list,
    get_str,
    get_strings,
    json_fields,
)

# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*).
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
THERMAL = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
POWER = SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN
# SM clock spread (max - min) / max over a cell's samples beyond which its clocks "moved": a
# boosting GPU settles within a few percent; unlocked clocks wander by far more.
CLOCK_MOVE_LIMIT = 0.10


@dataclass(frozen=True)
class TelemetrySample:
    """One reading of one GPU."""

    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float
    temperature_c: int
    reasons: int  # NVML's clocks-event reason bitmask


@dataclass(frozen=True)
class Telemetry:
    samples: int
    sm_clock_mhz: tuple[int, int] | None = None  # (min, max) over every GPU and sample
    mem_clock_mhz: tuple[int, int] | None = None
    max_power_w: float | None = None
    max_temperature_c: int | None = None
    reasons: int = 0  # every reason bit seen during the cell
    flags: tuple[str, ...] = ()
    reason: str = ""  # why there is no telemetry (CPU, NVML error)


def summarize(samples: Sequence[TelemetrySample], reason: str = "") -> Telemetry:
    if not samples:
        return Telemetry(0, reason=reason or "no telemetry samples")
    sm = [s.sm_clock_mhz for s in samples]
    mem = [s.mem_clock_mhz for s in samples]
    reasons = 0
    for s in samples:
        reasons |= s.reasons
    return Telemetry(
        samples=len(samples),
        sm_clock_mhz=(min(sm), max(sm)),
        mem_clock_mhz=(min(mem), max(mem)),
        max_power_w=max(s.power_w for s in samples),
        max_temperature_c=max(s.temperature_c for s in samples),
        reasons=reasons,
        flags=flags_for(reasons, min(sm), max(sm)),
        reason=reason,
    )


def flags_for(reasons: int, sm_min: int, sm_max: int) -> tuple[str, ...]:
    flags = []
    if reasons & THERMAL:
        flags.append("thermal-throttled")
    if reasons & POWER:
        flags.append("power-throttled")
    if reasons & HW_SLOWDOWN:
        flags.append("hw-slowdown")
    if sm_max > 0 and (sm_max - sm_min) / sm_max > CLOCK_MOVE_LIMIT:
        flags.append(f"sm-clock-moved {sm_min}-{sm_max} MHz")
    return tuple(flags)


def telemetry_to_dict(t: Telemetry | None) -> dict[str, Any] | None:
    return None if t is None else json_fields(t)


def telemetry_from_dict(data: Any, where: str) -> Telemetry | None:
    """Strict like every reader: its flags decide whether a cell is judged at all, so a flag
    list that is a string, or a count that is text, is a broken file, not "no telemetry"."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: telemetry must be an object")

    def pair(key: str) -> tuple[int, int] | None:
        value = data.get(key)
        if value is None:
            return None
        if not (isinstance(value, list) and len(value) == 2):
            raise BloomperfError(f"{where}: field {key!r} must be [min, max]")
        low, high = (get_int(entry, name, where) for entry, name in entries(value, key))
        return (low, high)

    return Telemetry(
        samples=get_int(data, "samples", where),
        sm_clock_mhz=pair("sm_clock_mhz"),
        mem_clock_mhz=pair("mem_clock_mhz"),
        max_power_w=get_float(data, "max_power_w", where, optional=True),
        max_temperature_c=get_int(data, "max_temperature_c", where, optional=True),
        reasons=int(get_int(data, "reasons", where, optional=True) or 0),
        flags=get_strings(get_list(data, "flags", where, []), "flags", where),
        reason=get_str(data, "reason", where, default=""),
    )
