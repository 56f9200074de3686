"""Sampling GPU telemetry from the controller while a cycle runs (``bloomperf.store.telemetry``).

A thread polls NVML every ``interval_s`` between ``start`` and ``stop``; the runner brackets each
cycle request with them and keeps the timed cycles' samples. NVML is read from outside the
worker, so the timed region is not touched.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from bloomperf.store.telemetry import TelemetrySample

POLL_INTERVAL_S = 0.05


class TelemetrySampler:
    def __init__(
        self, nvml: Any, indexes: Sequence[int], interval_s: float = POLL_INTERVAL_S
    ) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in sorted(set(indexes))]
        self.interval_s = interval_s
        self.samples: list[TelemetrySample] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> list[TelemetrySample]:
        nvml = self.nvml
        return [
            TelemetrySample(
                sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                mem_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                power_w=int(nvml.nvmlDeviceGetPowerUsage(h)) / 1000.0,  # mW
                temperature_c=int(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                reasons=int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
            )
            for h in self.handles
        ]

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None

    def _poll(self) -> None:
        while True:  # at least one reading per cycle, however short
            try:
                self.samples.extend(self.read())
            except Exception as exc:  # an NVMLError: keep the reason, stop sampling
                self.error = f"nvml: {exc}"
                return
            if self._stop.wait(self.interval_s):
                return


def create_sampler(
    device: str, gpu_indexes: Sequence[int], nvml: Any = None
) -> TelemetrySampler | str:
    """A sampler for a GPU group, or the reason (a str) there is none."""
    if not (device == "cuda" or device.startswith("cuda:")):
        return "cpu: no GPU telemetry"
    try:
        if nvml is None:
            from bloomperf.catalog.topology import load_nvml

            nvml = load_nvml()
        nvml.nvmlInit()
        sampler = TelemetrySampler(nvml, gpu_indexes)
        sampler.read()
        return sampler
    except ImportError:
        return "nvml: nvidia-ml-py is not installed"
    except Exception as exc:
        return f"nvml: telemetry unavailable: {exc}"
