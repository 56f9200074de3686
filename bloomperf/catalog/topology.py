"""What the suite runs on: GPUs, their memory and NVLinks, nodes, the CPU and its memory (the
software around them is ``bloomperf.catalog.fingerprint``'s).

The GPUs come from NVML (``nvidia-ml-py``), never from importing torch, so the controller can
describe the machine cheaply and without creating a CUDA context. The NVML module is an argument
so that tests can replay answers recorded on real machines.

Topology ids name what a baseline was measured on: ``8xA100-SXM4-80GB``, ``2x8xA100-SXM4-40GB``,
``8xH200-141GB``; the alias without the form factor (``8xA100-80GB``) matches too.
"""

from __future__ import annotations

import math
import os
import platform
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bloomperf.catalog.devices import (
    VisibleDevice,
    cuda_visible_devices,
    measured_handle,
    nvml_text,
    plan_visible,
    resolve_visible,
)
from bloomperf.catalog.hardware import parse_topology_id
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB as GiB
from bloomperf.core.jsonfile import get_int, get_list, get_str, json_fields

# Vendor words that NVML puts in front of the model name and that say nothing about the chip.
_VENDOR_PREFIX = re.compile(r"^((NVIDIA|Tesla|GeForce|Quadro)\s+)+", re.IGNORECASE)
# Form-factor and memory-kind words: dropped in the alias (A100-SXM4-80GB -> A100-80GB).
_FORM_FACTOR = re.compile(r"^(SXM\d*|PCIE|NVL|HBM\d*E?)$", re.IGNORECASE)
_MEMORY_SIZE = re.compile(r"^\d+GB$", re.IGNORECASE)


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's (physical) index, whatever CUDA_VISIBLE_DEVICES says
    name: str  # as NVML reports it: "NVIDIA A100-SXM4-80GB"
    memory_bytes: int
    nvlinks_up: int
    uuid: str  # the whole GPU's, also for a MIG instance (the lock holds the whole GPU)
    mig_uuid: str = ""  # the MIG instance CUDA_VISIBLE_DEVICES named; "" for a whole GPU

    def visible(self) -> VisibleDevice:
        return VisibleDevice(self.index, self.mig_uuid)


@dataclass(frozen=True)
class Topology:
    id: str
    aliases: tuple[str, ...]
    device: str  # "cuda" | "cpu"
    gpus: tuple[Gpu, ...]
    nodes: int
    driver: str
    cuda: str  # the CUDA version the driver supports, e.g. "12.2"
    cpu_model: str
    cpu_cores: int
    ram_bytes: int
    nvml_reason: str  # why NVML gave no GPUs; "" when it did

    def matches(self, other_id: str) -> bool:
        """Whether ``other_id`` (a baseline's topology, an option) names this topology."""
        wanted = other_id.strip().lower()
        return any(wanted == name.lower() for name in (self.id, *self.aliases))


# ---- detection ----------------------------------------------------------------------------


def detect_topology(nvml: Any = None, nodes: int | None = None) -> Topology:
    """This machine's topology; a ``cpu`` one (with NVML's reason) where there is no GPU."""
    node_count = nodes if nodes is not None else nodes_from_env()
    if node_count < 1:
        raise BloomperfError(f"--nodes: must be at least 1, not {node_count}")
    try:
        nvml = nvml if nvml is not None else load_nvml()
    except ImportError:
        return cpu_topology(node_count, "nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return cpu_topology(node_count, str(exc))
    try:
        visible = cuda_visible_devices()
        gpus = tuple(read_gpu(nvml, d) for d in resolve_visible(nvml, visible))
        if not gpus:
            return cpu_topology(node_count, f"no visible GPU (CUDA_VISIBLE_DEVICES={visible!r})")
        driver = nvml_text(nvml.nvmlSystemGetDriverVersion())
        cuda = cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
    except nvml.NVMLError as exc:
        return cpu_topology(node_count, f"NVML failed: {exc}")
    finally:
        nvml.nvmlShutdown()
    return gpu_topology(gpus, node_count, driver, cuda)


def read_gpu(nvml: Any, device: VisibleDevice) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(device.index)
    memory = measured_handle(nvml, device.index, device.mig_uuid)  # a MIG instance: its share
    return Gpu(
        index=device.index,
        name=nvml_text(nvml.nvmlDeviceGetName(handle)),
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(memory).total),
        nvlinks_up=count_nvlinks_up(nvml, handle),
        uuid=device_uuid(nvml, handle),
        mig_uuid=device.mig_uuid,
    )


def count_nvlinks_up(nvml: Any, handle: Any) -> int:
    up = 0
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            continue  # the GPU has no such link, or no NVLink at all
        up += int(state == nvml.NVML_FEATURE_ENABLED)
    return up


def gpu_topology(gpus: tuple[Gpu, ...], nodes: int, driver: str, cuda: str) -> Topology:
    names = [gpu_id_name(g.name, g.memory_bytes) for g in gpus]
    topology_id = join_groups(names, nodes)
    alias = join_groups([short_gpu_name(n) for n in names], nodes)
    return Topology(
        id=topology_id,
        aliases=(alias,) if alias != topology_id else (),
        device="cuda",
        gpus=gpus,
        nodes=nodes,
        driver=driver,
        cuda=cuda,
        nvml_reason="",
        **cpu_facts(),
    )


def planned_topology(text: str, visible: str | None = None) -> Topology:
    """The topology a machine with id ``text`` would detect under ``CUDA_VISIBLE_DEVICES=visible``
    (default: this process's), for plans made away from it: NVML indices, no UUIDs or versions."""
    nodes, per_node, spec = parse_topology_id(text)
    visible = visible if visible is not None else cuda_visible_devices()
    gpus = tuple(
        Gpu(index=i, name=spec.name, memory_bytes=spec.memory_bytes, nvlinks_up=0, uuid="")
        for i in plan_visible(per_node, visible)
    )
    if not gpus:
        return cpu_topology(nodes, f"no visible GPU (CUDA_VISIBLE_DEVICES={visible!r})")
    return gpu_topology(gpus, nodes, driver="", cuda="")


def cpu_topology(nodes: int, nvml_reason: str) -> Topology:
    return Topology(
        id="cpu" if nodes == 1 else f"{nodes}xcpu",
        aliases=(),
        device="cpu",
        gpus=(),
        nodes=nodes,
        driver="",
        cuda="",
        nvml_reason=nvml_reason,
        **cpu_facts(),
    )


def gpu_id_name(nvml_name: str, memory_bytes: int) -> str:
    """ "NVIDIA A100-SXM4-80GB" -> "A100-SXM4-80GB"; "NVIDIA H200" (141 GiB) -> "H200-141GB"."""
    name = re.sub(r"\s+", "-", _VENDOR_PREFIX.sub("", nvml_name.strip()))
    if any(_MEMORY_SIZE.match(part) for part in name.split("-")):
        return name
    # Drivers report a little less than the marketed size (H200: 140.4 GiB for "141GB"), never
    # more; the small tolerance keeps an exact 80 GiB at 80.
    return f"{name}-{math.ceil(memory_bytes / GiB - 0.05)}GB"


def short_gpu_name(name: str) -> str:
    """The name without form factor or memory kind: "A100-SXM4-80GB" -> "A100-80GB"."""
    kept = [part for part in name.split("-") if not _FORM_FACTOR.match(part)]
    return "-".join(kept) or name


def join_groups(names: list[str], nodes: int) -> str:
    """["A100-80GB"] * 8 -> "8xA100-80GB"; mixed GPUs -> "1xA100-80GB+1xA10-24GB"."""
    per_node = "+".join(f"{count}x{name}" for name, count in Counter(names).items())
    return per_node if nodes == 1 else f"{nodes}x{per_node}"


def nodes_from_env() -> int:
    """Nodes of a multi-node launch: WORLD_SIZE / LOCAL_WORLD_SIZE (torchrun, DeepSpeed); else 1."""
    world = _env_int("WORLD_SIZE")
    local = _env_int("LOCAL_WORLD_SIZE")
    if world is None or local is None:
        return 1
    if world % local:
        raise BloomperfError(
            f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}: "
            "pass the node count explicitly"
        )
    return world // local


def _env_int(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise BloomperfError(f"{name}={text!r}: must be a positive integer")
    return int(text)


def cuda_version_text(version: int) -> str:
    """NVML's 12020 -> "12.2"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def cpu_facts() -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count() or 0,
        "ram_bytes": int(psutil.virtual_memory().total),
    }


def ram_doubt(
    release: str | None = None, balloon: Path = Path("/sys/bus/virtio/drivers/virtio_balloon")
) -> str:
    """Why MemTotal may read far below the machine's RAM, or "": a Firecracker guest (its
    kernel says "-fc-") or a virtio balloon starts small and grows as memory is used."""
    release = release if release is not None else platform.release()
    if "-fc-" in release:
        return f"a Firecracker guest (kernel {release}): MemTotal starts low and grows with use"
    if any(balloon.glob("virtio*")):
        return "a virtio balloon is present: MemTotal can grow as memory is used"
    return ""


HOST_RAM_GIVEN = "--host-ram / BLOOMPERF_HOST_RAM"


@dataclass(frozen=True)
class HostRam:
    """The host RAM figure the skip rules and doctor judge by, and where it came from."""

    bytes: int
    source: str  # HOST_RAM_GIVEN, or "MemTotal"
    doubt: str = ""  # why the figure may read far too low ("" when it is not in doubt)

    def describe(self) -> str:
        said = f"host RAM {self.bytes / GiB:.1f} GiB from {self.source}"
        return said + (f" (may read low: {self.doubt})" if self.doubt else "")


def host_ram(given: int | None = None) -> HostRam:
    """The machine's RAM: ``given`` (the documented size, where MemTotal reads low, e.g. a
    Firecracker guest's), else MemTotal with the reason to doubt it, if any."""
    if given:
        return HostRam(given, HOST_RAM_GIVEN)
    return HostRam(int(psutil.virtual_memory().total), "MemTotal", ram_doubt())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first processor's model name from ``cpuinfo``; else what ``platform`` says (an
    ARM kernel writes no model name, a sandbox may hide the file)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return platform.processor() or platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else (platform.processor() or platform.machine())


def load_nvml() -> Any:
    """The real ``pynvml`` module; ImportError when nvidia-ml-py is not installed."""
    import pynvml

    return pynvml


def device_uuid(nvml: Any, handle: Any) -> str:
    return nvml_text(nvml.nvmlDeviceGetUUID(handle))


# ---- JSON ----------------------------------------------------------------------------------


def topology_to_dict(t: Topology) -> dict[str, Any]:
    return json_fields(t)


def topology_from_dict(d: Any, where: str = "topology") -> Topology:
    if not isinstance(d, dict):
        raise BloomperfError(f"{where}: topology must be an object")
    device = get_str(d, "device", where)
    if device not in ("cuda", "cpu"):
        raise BloomperfError(f"{where}: field 'device' must be cuda or cpu, not {device!r}")
    aliases = get_list(d, "aliases", where, default=[])
    if not all(isinstance(a, str) for a in aliases):
        raise BloomperfError(f"{where}: field 'aliases' must be a list of strings")
    return Topology(
        id=get_str(d, "id", where),
        aliases=tuple(aliases),
        device=device,
        gpus=tuple(
            _gpu_from_dict(g, f"{where} gpu {i}")
            for i, g in enumerate(get_list(d, "gpus", where, default=[]))
        ),
        nodes=get_int(d, "nodes", where, minimum=1),
        driver=get_str(d, "driver", where, default=""),
        cuda=get_str(d, "cuda", where, default=""),
        cpu_model=get_str(d, "cpu_model", where, default=""),
        cpu_cores=int(get_int(d, "cpu_cores", where, optional=True) or 0),
        ram_bytes=int(get_int(d, "ram_bytes", where, optional=True) or 0),
        nvml_reason=get_str(d, "nvml_reason", where, default=""),
    )


def _gpu_from_dict(g: Any, where: str) -> Gpu:
    if not isinstance(g, dict):
        raise BloomperfError(f"{where}: a GPU must be an object")
    return Gpu(
        index=get_int(g, "index", where),
        name=get_str(g, "name", where),
        memory_bytes=get_int(g, "memory_bytes", where),
        nvlinks_up=get_int(g, "nvlinks_up", where),
        uuid=get_str(g, "uuid", where, default=""),
        mig_uuid=get_str(g, "mig_uuid", where, default=""),
    )


def describe(t: Topology, environment: dict[str, Any]) -> str:
    """A readable block: what `bloomperf topology` prints."""
    also = f" (also {', '.join(t.aliases)})" if t.aliases else ""
    lines = [f"topology  {t.id}{also}"]
    lines.append(f"device    {t.device}, {t.nodes} node{'s' if t.nodes > 1 else ''}")
    limits = {entry["index"]: entry for entry in environment.get("gpu_limits", [])}
    for g in t.gpus:
        extra = limits.get(g.index, {})
        clocks = ""
        if extra.get("sm_clock_max_mhz"):
            clocks = (
                f", SM {extra['sm_clock_max_mhz']} MHz, memory {extra['mem_clock_max_mhz']} MHz"
            )
        if extra.get("power_limit_w"):
            clocks += f", {extra['power_limit_w']:g} W"
        lines.append(
            f"gpu {g.index:<5} {g.name}, {g.memory_bytes / GiB:.1f} GiB, "
            f"{g.nvlinks_up} NVLinks up{clocks}, {g.uuid}"
        )
    if t.device == "cuda":
        lines.append(f"driver    {t.driver} (CUDA {t.cuda})")
    else:
        lines.append(f"nvml      {t.nvml_reason}")
    lines.append(f"cpu       {t.cpu_model}, {t.cpu_cores} cores, {t.ram_bytes / GiB:.1f} GiB RAM")
    packages = environment.get("packages", {})
    # A document from elsewhere may lack a field: said as such, never as "None".
    software = [f"python {environment.get('python') or 'not recorded'}"]
    software += [f"{name} {version}" for name, version in packages.items() if version]
    lines.append(f"software  {', '.join(software)}")
    lines.append(
        f"cuda      torch built with {environment.get('cuda_torch') or 'no CUDA'}, "
        f"NCCL {environment.get('nccl') or 'none'}"
    )
    lines.append(f"host      {environment.get('hostname') or 'not recorded'}")
    return "\n".join(lines)
