"""GPU telemetry per cell and the trust flags: NVML replayed, verdicts through the real compare."""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.compare import judge
from bloomperf.analysis.verdicts import UNTRUSTWORTHY
from bloomperf.cli.diff import baseline_of_run
from bloomperf.core.errors import BloomperfError
from bloomperf.measure.telemetry import TelemetrySampler, create_sampler
from bloomperf.render.comparison import render_comparison
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import cell_from_dict, cell_to_dict
from bloomperf.store.telemetry import (
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    Telemetry,
    TelemetrySample,
    flags_for,
    summarize,
    telemetry_from_dict,
)
from tests.builders import bloom_run
from tests.nvml_replay import NvmlReplay

STEADY = {"sm_mhz": 1410, "mem_mhz": 1593, "power_mw": 300_000, "temp_c": 60, "reasons": 0}
HOT = {**STEADY, "sm_mhz": 1395, "temp_c": 88, "reasons": HW_THERMAL_SLOWDOWN}


def sample_cycle(nvml: NvmlReplay, indexes: list[int]) -> TelemetrySampler:
    sampler = create_sampler("cuda", indexes, nvml=nvml)
    assert isinstance(sampler, TelemetrySampler), sampler
    sampler.interval_s = 0.001
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    return sampler


def test_a_thermally_throttled_gpu_flags_the_cell() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_telemetry({0: [STEADY], 1: [STEADY, STEADY, HOT, STEADY]})
    sampler = sample_cycle(nvml, [0, 1])
    telemetry = summarize(sampler.samples)
    assert telemetry.flags == ("thermal-throttled",)
    assert telemetry.max_temperature_c == 88 and telemetry.max_power_w == 300.0
    assert telemetry.sm_clock_mhz == (1395, 1410)  # 1 % apart: clocks did not "move"


def test_steady_clocks_give_no_flag_and_moving_clocks_do() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_telemetry({0: [STEADY]})
    assert summarize(sample_cycle(nvml, [0]).samples).flags == ()
    # create_sampler's probe takes the first entry; the cycle then sees 1410, then 1100 MHz.
    nvml.script_telemetry({2: [STEADY, STEADY, {**STEADY, "sm_mhz": 1100}]})
    flags = summarize(sample_cycle(nvml, [2]).samples).flags
    assert flags == ("sm-clock-moved 1100-1410 MHz",)
    nvml.script_telemetry({3: [{**STEADY, "reasons": SW_POWER_CAP}]})
    assert summarize(sample_cycle(nvml, [3]).samples).flags == ("power-throttled",)


def test_no_gpu_or_no_nvml_counter_is_the_reason_not_a_flag() -> None:
    assert create_sampler("cpu", []) == "cpu: no GPU telemetry"
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")  # nothing scripted: NOT_SUPPORTED
    reason = create_sampler("cuda", [0], nvml=nvml)
    assert isinstance(reason, str) and "Not Supported" in reason
    assert summarize([], reason).flags == ()


def test_diff_reports_a_flagged_cell_as_untrustworthy_not_regressed() -> None:
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    nvml.script_telemetry({0: [STEADY, HOT]})
    telemetry = summarize(sample_cycle(nvml, [0]).samples)
    before = CellResult("accelerate", "bf16", 1, Outcome.OK, (100.0, 101.0, 99.0))
    # 50 % slower while throttled: a regression by the figures, untrustworthy by the telemetry.
    after = CellResult("accelerate", "bf16", 1, Outcome.OK, (150.0, 151.0, 149.0))
    baseline = baseline_of_run(bloom_run(before, cycles=3), "before.json", 0.05)
    assert judge(bloom_run(after, cycles=3), baseline).cells[0].status == "regressed"
    flagged = CellResult(
        "accelerate", "bf16", 1, Outcome.OK, (150.0, 151.0, 149.0), telemetry=telemetry
    )
    comparison = judge(bloom_run(flagged, cycles=3), baseline)
    verdict = comparison.cells[0]
    assert verdict.status == UNTRUSTWORTHY and verdict.fails() is None
    text = render_comparison(comparison, "text")
    assert "UNTRUSTWORTHY" in text and "thermal-throttled" in text
    stored = json.loads(json.dumps(cell_to_dict(flagged)))
    assert stored["flags"] == ["thermal-throttled"]
    assert cell_from_dict(stored, "r.json").telemetry == telemetry


# NVML's own reason bits (pynvml), each with the flag it must raise; the rest (idle, sync
# boost, application or user clocks, display) are no sign of heat or power trouble.
FLAGGING = {
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "thermal-throttled",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "thermal-throttled",
    pynvml.nvmlClocksEventReasonSwPowerCap: "power-throttled",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "power-throttled",
    pynvml.nvmlClocksEventReasonHwSlowdown: "hw-slowdown",
}
QUIET_BITS = (
    pynvml.nvmlClocksEventReasonGpuIdle,
    pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    pynvml.nvmlClocksEventReasonSyncBoost,
    pynvml.nvmlClocksEventReasonDisplayClockSetting,
)
BITS = (*FLAGGING, *QUIET_BITS)

samples = st.lists(
    st.builds(
        TelemetrySample,
        sm_clock_mhz=st.integers(1000, 1410),
        mem_clock_mhz=st.integers(1200, 1600),
        power_w=st.floats(50.0, 700.0),
        temperature_c=st.integers(30, 95),
        reasons=st.lists(st.sampled_from(BITS), max_size=3).map(lambda bits: sum(set(bits))),
    ),
    min_size=1,
    max_size=12,
)


@given(samples=samples, order=st.randoms(use_true_random=False))
def test_a_cells_telemetry_is_the_extremes_over_every_sample_in_any_order(
    samples: list[TelemetrySample], order: random.Random
) -> None:
    telemetry = summarize(order.sample(samples, len(samples)))
    assert telemetry.samples == len(samples)
    sm = [s.sm_clock_mhz for s in samples]
    mem = [s.mem_clock_mhz for s in samples]
    assert telemetry.sm_clock_mhz == (min(sm), max(sm))
    assert telemetry.mem_clock_mhz == (min(mem), max(mem))
    assert telemetry.max_power_w == max(s.power_w for s in samples)
    assert telemetry.max_temperature_c == max(s.temperature_c for s in samples)
    # One sample's reason is the cell's: a flag raised once stays raised.
    for bit, flag in FLAGGING.items():
        assert (flag in telemetry.flags) == any(
            s.reasons & b for s in samples for b, f in FLAGGING.items() if f == flag
        ), (bit, flag)
    assert all(s.reasons & telemetry.reasons == s.reasons for s in samples)


@given(low=st.integers(100, 2000), spread=st.floats(0.0, 0.3))
def test_sm_clocks_moved_when_they_spread_over_a_tenth_of_the_highest(
    low: int, spread: float
) -> None:
    """The spread is (max - min) / max: 1410 and 1269 MHz (exactly 10 %) did not move."""
    high = round(low / (1 - spread))
    steady = TelemetrySample(high, 1593, 300.0, 60, 0)
    moved = [f for f in summarize([steady, replace(steady, sm_clock_mhz=low)]).flags if "sm" in f]
    if (high - low) / high > 0.10:
        assert moved == [f"sm-clock-moved {low}-{high} MHz"]
    else:
        assert moved == []
    at_the_limit = [replace(steady, sm_clock_mhz=mhz) for mhz in (1410, 1269, 1300)]
    assert summarize(at_the_limit).flags == ()


def test_a_cycle_shorter_than_the_interval_still_has_a_sample_of_every_gpu() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_telemetry({0: [STEADY], 1: [STEADY]})
    sampler = create_sampler("cuda:1", [0, 1], nvml=nvml)  # a device with an index: a GPU
    assert isinstance(sampler, TelemetrySampler), sampler
    sampler.interval_s = 60.0
    sampler.start()
    sampler.stop()
    assert len(sampler.samples) == 2


@pytest.mark.parametrize(
    ("sm_min", "sm_max", "moved"),
    [(0, 0, False), (0, 1, True), (1, 1, False), (9, 10, False), (8, 10, True)],
)
def test_clocks_move_by_their_spread_and_a_gpu_that_reads_no_clock_is_not_flagged(
    sm_min: int, sm_max: int, moved: bool
) -> None:
    """A 0 MHz reading (a GPU whose NVML reports no SM clock) has no spread to flag."""
    expected = (f"sm-clock-moved {sm_min}-{sm_max} MHz",) if moved else ()
    assert flags_for(0, sm_min, sm_max) == expected


def test_the_reason_there_is_no_telemetry_and_an_error_during_sampling_are_kept() -> None:
    steady = TelemetrySample(1410, 1593, 300.0, 60, 0)
    assert summarize([]) == Telemetry(0, reason="no telemetry samples")
    assert summarize([], "cpu: no GPU telemetry") == Telemetry(0, reason="cpu: no GPU telemetry")
    sampled = summarize([steady, steady])
    assert (sampled.samples, sampled.reasons, sampled.flags, sampled.reason) == (2, 0, (), "")
    assert summarize([steady], "NVML: GPU is lost").reason == "NVML: GPU is lost"


def test_stored_telemetry_needs_only_its_sample_count_and_keeps_a_zero_clock() -> None:
    assert telemetry_from_dict({"samples": 0}, "x") == Telemetry(0)
    read = telemetry_from_dict({"samples": 3, "sm_clock_mhz": [0, 1410]}, "x")
    assert read is not None and read.sm_clock_mhz == (0, 1410)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"samples": 1, "mem_clock_mhz": [1, 2, 3]},
            "cell 2 telemetry: field 'mem_clock_mhz' must be [min, max]",
        ),
        ({"samples": 1, "sm_clock_mhz": [1]}, "cell 2 telemetry: field 'sm_clock_mhz' must be"),
        ({"samples": 1, "flags": ["hw-slowdown", 3]}, "cell 2 telemetry: field 'flags[1]' must"),
        ({"samples": 1, "reasons": "0x8"}, "cell 2 telemetry: field 'reasons' must be"),
        ({"samples": 1, "reason": 5}, "cell 2 telemetry: field 'reason' must be a string"),
    ],
)
def test_broken_stored_telemetry_is_refused_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(BloomperfError) as refused:
        telemetry_from_dict(data, "cell 2 telemetry")
    assert str(refused.value).startswith(message), refused.value


class ConstantsNvml:
    """An NVML whose answers depend on the constant asked with: the SM and memory clocks and
    the GPU's temperature sensor must each be asked for by name."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 2, 0

    def __init__(self) -> None:
        self.reads = 0
        self.fail_after = -1

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        self.reads += 1
        if self.reads == self.fail_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return {0: 1410, 2: 1593}[clock]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_500

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return {0: 61}[sensor]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return 4


def test_a_sample_reads_each_figure_by_its_nvml_name() -> None:
    sampler = TelemetrySampler(ConstantsNvml(), [1, 0, 1])
    assert sampler.read() == [TelemetrySample(1410, 1593, 250.5, 61, 4)] * 2  # each GPU once
    assert sampler.error == "" and sampler.samples == []


def test_the_sampler_polls_at_its_interval_on_a_daemon_thread_until_stopped() -> None:
    """Samples keep coming while it runs (not one and then a wait for ``stop``), from a daemon
    thread named for what it does, which ``stop`` joins and forgets; stopping twice is fine."""
    sampler = TelemetrySampler(ConstantsNvml(), [0], interval_s=0.01)
    sampler.start()
    thread = sampler._thread
    assert thread is not None and thread.daemon and thread.name == "telemetry"
    deadline = time.monotonic() + 30
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert len(sampler.samples) >= 3 and not thread.is_alive() and sampler._thread is None
    sampler.stop()
    assert sampler._thread is None


def test_an_nvml_error_while_sampling_stops_it_and_is_kept() -> None:
    nvml = ConstantsNvml()
    nvml.fail_after = 3  # the second sample's first read
    sampler = TelemetrySampler(nvml, [0], interval_s=0.001)
    sampler.start()
    sampler._thread.join(30)  # type: ignore[union-attr]
    sampler.stop()
    assert sampler.error == f"nvml: {pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)}"
    assert len(sampler.samples) == 1


def test_a_gpu_sampler_loads_nvml_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from bloomperf.catalog import topology

    monkeypatch.setattr(topology, "load_nvml", ConstantsNvml)
    assert isinstance(create_sampler("cuda:0", [0]), TelemetrySampler)

    def missing() -> None:
        raise ImportError("pynvml")

    monkeypatch.setattr(topology, "load_nvml", missing)
    assert create_sampler("cuda", [0]) == "nvml: nvidia-ml-py is not installed"
