"""Energy over the timed cycles: NVML's counters (replayed), RAPL files, and this host's truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.measure.energy import (
    EnergyMeter,
    Snapshot,
    create_meter,
    create_rapl_meter,
    total_energy,
)
from bloomperf.store.results import CellResult, EnergyReading, Outcome
from bloomperf.store.results.codec import cell_from_dict, cell_to_dict
from tests.nvml_replay import NvmlReplay


def test_nvml_energy_is_summed_over_the_groups_gpus_in_joules() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    # create_meter probes each counter once (a GPU before Volta has none), then one cycle.
    nvml.script_energy({1: [1_000_000, 2_000_000, 2_450_000], 2: [5_000_000, 6_000_000, 6_050_000]})
    meter = create_meter("cuda", [1, 2, 2], nvml=nvml)  # two MIG slices of GPU 2: counted once
    assert meter.source == "nvml"
    before, after = meter.snapshot(), meter.snapshot()
    reading = meter.between(before, after, tokens=800)
    assert reading.energy_j == pytest.approx(450.0 + 50.0)  # mJ -> J, both GPUs
    assert reading.j_per_token == pytest.approx(500.0 / 800)
    assert reading.reason == ""


def test_an_nvml_counter_that_goes_backwards_invalidates_the_figure_with_the_reason() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    nvml.script_energy({0: [10_000, 20_000, 5_000]})
    meter = create_meter("cuda", [0], nvml=nvml)
    reading = meter.between(meter.snapshot(), meter.snapshot(), tokens=100)
    assert reading.energy_j is None and reading.source == "nvml" and reading.tokens == 100
    assert reading.reason == "nvml: counter 0 went backwards (20000 -> 5000): reset"
    good = EnergyReading("nvml", 3.0, 1.0, 100)
    total = total_energy([good, reading, good])
    assert total is not None and total.energy_j is None and "backwards" in total.reason
    assert total.seconds == reading.seconds + 2.0 and total.tokens == 300


def test_a_gpu_without_the_energy_counter_is_null_with_nvmls_reason() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")  # nothing scripted: NOT_SUPPORTED
    meter = create_meter("cuda", [0], nvml=nvml)
    reading = meter.between(meter.snapshot(), meter.snapshot(), tokens=1)
    assert reading.energy_j is None and reading.source == "unavailable"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) in reading.reason


def write_zone(root: Path, name: str, energy: int, maximum: int) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{maximum}\n")
    return zone


def test_rapl_counts_package_zones_only_and_unwraps_at_the_range(tmp_path: Path) -> None:
    package = write_zone(tmp_path, "intel-rapl:0", 999_000_000, 1_000_000_000)
    write_zone(tmp_path, "intel-rapl:0:0", 5, 1_000_000_000)  # a sub-zone: part of package 0
    meter = create_rapl_meter(tmp_path)
    assert meter.source == "rapl"
    before = meter.snapshot()
    (package / "energy_uj").write_text("2000000\n")  # wrapped past 1e9 µJ
    after = Snapshot(before.at + 2.0, meter.read())
    reading = meter.between(before, after, tokens=10)
    assert reading.energy_j == pytest.approx((1_000_000_000 + 1 - 999_000_000 + 2_000_000) / 1e6)
    assert reading.avg_power_w == pytest.approx(reading.energy_j / 2.0)


def test_unreadable_rapl_is_null_with_the_reason(tmp_path: Path) -> None:
    assert "no package zones" in create_rapl_meter(tmp_path / "absent").reason
    zone = write_zone(tmp_path, "intel-rapl:0", 1, 10)
    (zone / "energy_uj").unlink()
    (zone / "energy_uj").mkdir()  # unreadable as a file, as a root-only file is for a user
    assert "cannot read" in create_rapl_meter(tmp_path).reason


def test_energy_survives_the_results_file() -> None:
    energy = EnergyReading("rapl", 12.0, 3.0, 400)
    cell = CellResult("accelerate", "fp32", 4, Outcome.OK, (1.0,), energy=energy)
    stored = cell_to_dict(cell)
    assert (stored["energy_j"], stored["j_per_token"], stored["avg_power_w"]) == (12.0, 0.03, 4.0)
    assert cell_from_dict(json.loads(json.dumps(stored)), "r.json").energy == energy


def test_a_cpu_run_on_this_host_reports_energy_or_says_why_not(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "bloomperf", "run", "--no-lock", "--new-tokens", "4",
            "--cycles", "2", "--batch-sizes", "1", "--dtypes", "fp32", "--output", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    cell = json.loads(out.read_text())["cells"][0]
    energy = cell["energy"]
    expected = create_rapl_meter()
    if isinstance(expected, EnergyMeter) and expected.source == "unavailable":
        assert cell["energy_j"] is None and energy["reason"] == expected.reason
    else:
        assert cell["energy_j"] > 0 and cell["avg_power_w"] > 0
    assert energy["tokens"] == 1 * 4 * 2  # the two timed cycles only, not the warm-up
    assert cell["flags"] == [] and cell["telemetry"]["reason"] == "cpu: no GPU telemetry"
    assert cell["details"]["mbu_percent"] is None
    assert cell["details"]["utilisation_reason"] == "cpu: no peak bandwidth or FLOP figures"


def test_a_group_with_no_gpu_on_this_node_has_no_energy_figure_with_the_reason() -> None:
    """A multi-node group's GPUs are not this node's (session.group_gpus gives none): its energy
    is unavailable and says why, never a sum over no counters (0.0 J)."""
    from bloomperf.catalog.topology import planned_topology
    from bloomperf.harness.session import group_gpus

    topology = planned_topology("2x8xA100-80GB")
    for backend in ("ds-inference", "ds-zero", "ds-autotp"):
        devices = group_gpus(topology, "cuda", True, backend, 16)
        nvml = NvmlReplay.load("8xA100-SXM4-80GB")
        nvml.script_energy({i: [1_000, 2_000, 3_000] for i in range(8)})
        meter = create_meter("cuda", [d.index for d in devices], nvml=nvml)
        reading = meter.between(meter.snapshot(), meter.snapshot(), tokens=10)
        assert reading.energy_j is None and reading.source == "unavailable", reading
        assert "none of the group's GPUs is on this node" in reading.reason
        total = total_energy([reading, reading])
        assert total is not None and total.energy_j is None and total.reason == reading.reason


@pytest.mark.parametrize(("start", "end"), [(99, 2), (100, 0), (50, 49), (0, 0)])
def test_a_wrapped_rapl_counter_counts_every_microjoule(
    tmp_path: Path, start: int, end: int
) -> None:
    """The counter runs 0 … max_energy_range_uj, then 0 again: from ``start`` up to the range,
    one step to 0, and on to ``end``."""
    zone = write_zone(tmp_path, "intel-rapl:0", start, 100)
    meter = create_rapl_meter(tmp_path)
    before = meter.snapshot()
    (zone / "energy_uj").write_text(f"{end}\n")
    reading = meter.between(before, Snapshot(before.at + 1.0, meter.read()), tokens=1)
    counted = end - start if end >= start else (100 - start) + 1 + end
    assert reading.energy_j is not None and round(reading.energy_j * 1e6) == counted


# ---- the meter's rules in process ---------------------------------------------------------------

READINGS = st.lists(
    st.builds(
        EnergyReading,
        source=st.sampled_from(["nvml", "rapl"]),
        energy_j=st.none() | st.floats(0, 1e4),
        seconds=st.floats(0, 100),
        tokens=st.integers(0, 10**4),
        reason=st.sampled_from(["", "counter 0 went backwards"]),
    ),
    max_size=5,
)


@given(READINGS)
def test_a_cells_energy_is_its_timed_cycles_added_or_the_first_invalid_ones_reason(
    readings: list[EnergyReading],
) -> None:
    total = total_energy(readings)
    if not readings:
        assert total is None
        return
    seconds, tokens = sum(r.seconds for r in readings), sum(r.tokens for r in readings)
    invalid = [r for r in readings if r.energy_j is None]
    if invalid:
        expected = EnergyReading(invalid[0].source, None, seconds, tokens, invalid[0].reason)
    else:
        joules = sum(r.energy_j for r in readings)  # type: ignore[misc]
        expected = EnergyReading(readings[0].source, joules, seconds, tokens)
    assert total == expected


class Counters(EnergyMeter):
    """A meter whose counters the test sets; reading them fails with ``fails`` if set."""

    source = "rapl"
    joules_per_unit = 1e-6

    def __init__(self) -> None:
        super().__init__()
        self.values: tuple[int, ...] = (0, 0)
        self.fails = ""

    def read(self) -> tuple[int, ...]:
        if self.fails:
            raise OSError(self.fails)
        return self.values


def test_a_reading_is_null_if_either_snapshot_is_with_that_snapshots_reason() -> None:
    meter = Counters()
    good = meter.snapshot()
    meter.fails = "Permission denied"
    bad = meter.snapshot()
    assert (bad.values, bad.reason) == (None, "rapl: Permission denied")
    for before, after in ((good, bad), (bad, good)):
        reading = meter.between(before, after, 5)
        assert reading == EnergyReading("rapl", None, after.at - before.at, 5, bad.reason)
    assert EnergyMeter().reason == "" and EnergyMeter().snapshot().reason == "unavailable: "
    unavailable = EnergyMeter("nvml: no counter")
    shot = unavailable.snapshot()
    assert (shot.values, shot.reason) == (None, "nvml: no counter")


def test_counters_that_did_not_move_read_zero_joules() -> None:
    meter = Counters()
    meter.values = (7, 9)
    before = meter.snapshot()
    reading = meter.between(before, Snapshot(before.at + 1.0, (7, 9)), 3)
    assert reading == EnergyReading("rapl", 0.0, 1.0, 3)
    reading = meter.between(before, Snapshot(before.at + 2.0, (10, 29)), 3)
    assert reading == EnergyReading("rapl", pytest.approx(23e-6), 2.0, 3)


def test_rapl_counts_an_unwrapped_counter_as_end_less_start(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", 1_000, 10**9)
    meter = create_rapl_meter(tmp_path)
    before = meter.snapshot()
    (zone / "energy_uj").write_text("3500\n")
    assert meter.between(before, meter.snapshot(), 1).energy_j == pytest.approx(2500e-6)


class FakeNvml:
    def __init__(self, init_fails: bool = False, shutdown_fails: bool = False) -> None:
        self.init_fails, self.shutdown_fails, self.shut = init_fails, shutdown_fails, False

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise RuntimeError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut = True
        if self.shutdown_fails:
            raise RuntimeError("Uninitialized")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return 1000 * (handle + 1)


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_gpu_group_gets_nvmls_meter_loaded_when_not_given(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bloomperf.catalog import topology

    monkeypatch.setattr(topology, "load_nvml", FakeNvml)
    meter = create_meter(device, [1, 0, 1])
    assert meter.source == "nvml" and meter.read() == (1000, 2000)  # each GPU once


def test_an_nvml_that_fails_is_shut_down_and_its_reason_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for shutdown_fails in (False, True):
        nvml = FakeNvml(init_fails=True, shutdown_fails=shutdown_fails)
        meter = create_meter("cuda", [0], nvml)
        assert meter.reason == "nvml: total energy counter unavailable: Driver Not Loaded"
        assert nvml.shut
    from bloomperf.catalog import topology

    def missing() -> None:
        raise ImportError("pynvml")

    monkeypatch.setattr(topology, "load_nvml", missing)
    assert create_meter("cuda", [0]).reason == "nvml: nvidia-ml-py is not installed"
    assert create_meter("cpu", [0]).source in ("rapl", "unavailable")  # never NVML on CPU


def test_rapl_that_cannot_be_read_says_the_zone_and_why(tmp_path: Path) -> None:
    zone = write_zone(tmp_path, "intel-rapl:0", 1, 10)
    (zone / "energy_uj").unlink()
    (zone / "energy_uj").mkdir()
    assert create_rapl_meter(tmp_path).reason == (
        f"rapl: cannot read {zone}/energy_uj: Is a directory"
    )
    (zone / "energy_uj").rmdir()
    (zone / "energy_uj").write_text("many\n")
    assert create_rapl_meter(tmp_path).reason == (
        f"rapl: cannot read {zone}/energy_uj: invalid literal for int() with base 10: 'many\\n'"
    )
