"""What a result says it was measured with: each figure of the fingerprint from its one source.

The CUDA and NCCL that torch uses are read without importing torch (the controller must not) and
from torch once a process has imported it; both ways are checked against the real torch here,
and the fallbacks against a torch package of the test's own on ``sys.path``.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pynvml
import pytest

from bloomperf.catalog import fingerprint
from bloomperf.catalog.fingerprint import (
    FINGERPRINT_PACKAGES,
    environment_fingerprint,
    gpu_limits,
    nccl_version,
    package_versions,
    torch_cuda_version,
)
from bloomperf.catalog.topology import detect_topology
from tests.nvml_replay import RECORDINGS, NvmlReplay, nvml_error_here

NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def torch_with(cuda: Any = None, nccl: Any = None) -> ModuleType:
    """A module standing for an imported torch: ``version.cuda`` and ``cuda.nccl.version()``."""
    module = ModuleType("torch")
    module.version = SimpleNamespace() if cuda is None else SimpleNamespace(cuda=cuda)  # type: ignore[attr-defined]

    def version() -> Any:
        if isinstance(nccl, BaseException):
            raise nccl
        return nccl

    module.cuda = SimpleNamespace(nccl=SimpleNamespace(version=version))  # type: ignore[attr-defined]
    return module


def torch_package(root: Path, version_py: str | None) -> Path:
    """A torch package folder under ``root`` whose version.py says ``version_py``."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    if version_py is not None:
        (package / "version.py").write_text(textwrap.dedent(version_py))
    return root


def without_torch(monkeypatch: pytest.MonkeyPatch, path: Path | None = None) -> None:
    """No torch imported in this process; ``path``'s torch first on the import path."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    if path is not None:
        monkeypatch.syspath_prepend(str(path))


def metadata_with(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]) -> None:
    """importlib.metadata.version knows only ``versions``."""

    def version(name: str) -> str:
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(fingerprint.importlib.metadata, "version", version)


# ---- CUDA and NCCL as torch sees them ---------------------------------------------------------


def test_the_cuda_torch_was_built_with_is_what_torch_itself_says() -> None:
    real = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.version.cuda)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    # Read from version.py here (this test's process may have imported torch or not: both ways).
    assert str(torch_cuda_version()) == real


@pytest.mark.parametrize("cuda", ["12.4", "13.0", None])
def test_an_imported_torch_answers_for_itself(monkeypatch: pytest.MonkeyPatch, cuda: Any) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch_with(cuda=cuda or None))
    assert torch_cuda_version() == cuda


def test_an_imported_torch_without_version_cuda_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    module = torch_with()
    del module.version
    module.version = SimpleNamespace(git_version="abc")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", module)
    assert torch_cuda_version() is None


@pytest.mark.parametrize(
    ("version_py", "expected"),
    [
        ("__version__ = '2.5.1'\ncuda = '12.4'\n", "12.4"),
        ("cuda: Optional[str] = '12.1'\nhip = None\n", "12.1"),
        ("git_version = 'abc'\ncuda: Optional[str] = None\n", None),  # a CPU build
        ("cuda = None\n", None),
        ("hip = '6.0'\n", None),
        ("a = cuda = '12.4'\n", None),  # two targets: not torch's shape, not guessed
        ("cuda = '12.4\n", None),  # not Python
        ("from x import cuda\n", None),
        ("cuda = 12\n", None),  # not a version string
    ],
)
def test_without_torch_imported_its_version_file_says_the_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version_py: str, expected: str | None
) -> None:
    without_torch(monkeypatch, torch_package(tmp_path, version_py))
    assert torch_cuda_version() == expected
    assert "torch" not in sys.modules  # read, not imported


def test_a_torch_without_its_version_file_or_package_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_torch(monkeypatch, torch_package(tmp_path, None))
    assert torch_cuda_version() is None
    # A module torch.py, not a package: no folder to look in.
    other = tmp_path / "flat"
    other.mkdir()
    (other / "torch.py").write_text("cuda = '12.4'\n")
    monkeypatch.syspath_prepend(str(other))
    assert torch_cuda_version() is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [((2, 21, 5), "2.21.5"), ((2, 18), "2.18"), (2215, "2215"), ("2.19.3", "2.19.3")],
)
def test_an_imported_torch_names_its_nccl(
    monkeypatch: pytest.MonkeyPatch, answer: Any, expected: str
) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch_with(nccl=answer))
    metadata_with(monkeypatch, dict.fromkeys(NCCL_WHEELS, "9.9.9"))  # not asked
    assert nccl_version() == expected


def test_a_torch_without_nccl_says_none_whatever_wheel_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch_with(nccl=RuntimeError("no NCCL on CPU")))
    metadata_with(monkeypatch, {"nvidia-nccl-cu12": "2.21.5"})
    assert nccl_version() is None


@pytest.mark.parametrize("installed", [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2), (0, 1, 2), ()])
def test_without_torch_the_newest_cuda_lines_nccl_wheel_is_named(
    monkeypatch: pytest.MonkeyPatch, installed: tuple[int, ...]
) -> None:
    without_torch(monkeypatch)
    versions = {NCCL_WHEELS[i]: f"2.{20 + i}.0" for i in installed}
    metadata_with(monkeypatch, versions)
    expected = versions[NCCL_WHEELS[min(installed)]] if installed else None
    assert nccl_version() == expected


# ---- packages, and the fingerprint's fields -------------------------------------------------


def test_package_versions_name_every_package_and_none_for_a_missing_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = package_versions()
    assert list(real) == list(FINGERPRINT_PACKAGES)
    for name, version in real.items():
        assert version == importlib.metadata.version(name)  # all installed in this venv
    metadata_with(monkeypatch, {"torch": "2.5.1"})
    versions = package_versions()
    assert versions["torch"] == "2.5.1"
    assert all(versions[name] is None for name in FINGERPRINT_PACKAGES if name != "torch")


def test_the_fingerprint_takes_each_field_from_its_source() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    topology = detect_topology(nvml)
    printed = environment_fingerprint(topology, nvml)
    assert printed == {
        "topology": topology.id,
        "hostname": socket.gethostname(),
        "cpu_model": topology.cpu_model,
        "cpu_cores": topology.cpu_cores,
        "ram_bytes": topology.ram_bytes,
        "python": platform.python_version(),
        "packages": package_versions(),
        "gpus": ["NVIDIA A100-SXM4-80GB"] * 4,
        "driver": topology.driver,
        "cuda_driver": topology.cuda,
        "cuda_torch": torch_cuda_version(),
        "nccl": nccl_version(),
        "gpu_limits": gpu_limits(topology, NvmlReplay.load("4xA100-SXM4-80GB")),
        "nvml_reason": topology.nvml_reason,
        "provenance": printed["provenance"],
    }
    assert set(printed["provenance"]) == {"git", "ci_run_url", "command", "cwd"}
    assert len(printed["gpu_limits"]) == 4
    json.dumps(printed)  # written into every results file as it is


# ---- GPU clock and power limits --------------------------------------------------------------


def recording(**errors: str) -> dict[str, Any]:
    """The 4xA100 recording, with GPU 1's named settings failing with NVML's NOT_SUPPORTED."""
    data = json.loads((RECORDINGS / "4xA100-SXM4-80GB.json").read_text())
    device = data["devices"][1]
    for key in errors:
        del device[key]
    return data


def test_each_gpus_limits_are_read_and_nvml_shut_down() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    topology = detect_topology(NvmlReplay.load("4xA100-SXM4-80GB"))
    limits = gpu_limits(topology, nvml)
    devices = nvml.recording["devices"]
    assert limits == [
        {
            "index": i,
            "sm_clock_max_mhz": devices[i]["max_clock_sm_mhz"],
            "mem_clock_max_mhz": devices[i]["max_clock_mem_mhz"],
            "power_limit_w": devices[i]["power_limit_mw"] / 1000,
        }
        for i in range(4)
    ]
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


@pytest.mark.parametrize(
    "hidden", [("power_limit_mw",), ("max_clock_sm_mhz",), ("max_clock_mem_mhz",)]
)
def test_a_gpu_hiding_one_limit_still_tells_the_others(hidden: tuple[str, ...]) -> None:
    nvml = NvmlReplay(recording(**dict.fromkeys(hidden, "")))
    topology = detect_topology(NvmlReplay.load("4xA100-SXM4-80GB"))
    limits = gpu_limits(topology, nvml)
    field = {
        "power_limit_mw": "power_limit_w",
        "max_clock_sm_mhz": "sm_clock_max_mhz",
        "max_clock_mem_mhz": "mem_clock_max_mhz",
    }
    assert limits[1][field[hidden[0]]] is None
    for key, name in field.items():
        if key not in hidden:
            assert limits[1][name] is not None
            assert limits[0][name] is not None
    assert limits[0]["power_limit_w"] == nvml.recording["devices"][0]["power_limit_mw"] / 1000


def test_a_gpu_nvml_cannot_open_keeps_its_index_and_no_limits() -> None:
    class Unreachable(NvmlReplay):
        def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
            if index == 2:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            return super().nvmlDeviceGetHandleByIndex(index)

    nvml = Unreachable.load("4xA100-SXM4-80GB")
    limits = gpu_limits(detect_topology(NvmlReplay.load("4xA100-SXM4-80GB")), nvml)
    assert limits[2] == {
        "index": 2,
        "sm_clock_max_mhz": None,
        "mem_clock_max_mhz": None,
        "power_limit_w": None,
    }
    assert all(limits[i]["power_limit_w"] for i in (0, 1, 3))
    assert nvml.shutdown_calls == 1


def test_no_limits_on_cpu_or_where_nvml_will_not_start() -> None:
    cpu = detect_topology(NvmlReplay({"driver_version": "", "devices": []}))
    assert gpu_limits(cpu, NvmlReplay.load("4xA100-SXM4-80GB")) == []

    class Broken(NvmlReplay):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    gpus = detect_topology(NvmlReplay.load("4xA100-SXM4-80GB"))
    assert gpu_limits(gpus, Broken.load("4xA100-SXM4-80GB")) == []
    # This machine's own NVML when none is given: none here, every GPU's limits where there is.
    limits = gpu_limits(gpus)
    if nvml_error_here() is not None:
        assert limits == []
    else:
        assert [entry["index"] for entry in limits] == [0, 1, 2, 3]
