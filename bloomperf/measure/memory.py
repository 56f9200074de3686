"""Peak memory of a worker's process tree, sampled from the controller process.

The controller holds no CUDA context, so it measures from outside: NVML on GPU (device used
memory, which also sees DeepSpeed's workspace allocated outside torch), the kernel's peak
resident set on CPU. ``mark()`` closes a phase (the model load, then each cell's generation) and
starts the next one, so one cell's peak never leaks into the next cell's reading.
"""

from __future__ import annotations

from collections.abc import Sequence

from bloomperf.catalog.devices import VisibleDevice
from bloomperf.core.errors import BloomperfError
from bloomperf.measure.nvml_sampler import NvmlSampler
from bloomperf.measure.rss_sampler import RssSampler
from bloomperf.measure.sampler import MemorySampler


def create_sampler(
    device: str, root_pid: int, devices: Sequence[VisibleDevice] | None = None
) -> MemorySampler:
    """The sampler for ``device`` ("cuda" or "cpu") watching ``root_pid`` and its descendants.

    ``devices``: exactly the GPUs the group uses (default: every GPU visible to the controller),
    so that idle GPUs are not summed into its peak. Never raises for a missing or broken NVML:
    the sampler's readings say why they are empty.
    """
    if device == "cuda" or device.startswith("cuda:"):
        return NvmlSampler(root_pid, devices=devices)
    if device == "cpu":
        return RssSampler(root_pid)
    raise BloomperfError(f"device: unknown device {device!r} (valid: cuda, cpu)")
