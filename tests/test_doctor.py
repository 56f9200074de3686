"""`bloomperf doctor`: its real checks on this machine, its GPU branches on hand-written NVML
answers (tests/nvml_replay.py) and on library facts as a GPU machine would report them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.cli.doctor import DOCTOR_KIND, SCHEMA_VERSION, run_checks
from bloomperf.config.run import RunConfig
from bloomperf.doctor.check import Check
from bloomperf.doctor.host import check_disk, check_ram, check_shm
from bloomperf.doctor.libraries import (
    check_bitsandbytes,
    check_deepspeed_jit,
    check_fused_bloom,
    check_torch_cuda,
    library_facts,
)
from bloomperf.doctor.nvml import check_nvml
from tests.nvml_replay import NvmlReplay, nvml_error_here

ROOT = Path(__file__).resolve().parent.parent
GB = 1_000_000_000


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


# ---- this machine, for real -------------------------------------------------------------------


def test_doctor_json_here_says_why_nvml_is_unavailable(tmp_path: Path) -> None:
    done = doctor("--format", "json", "--cache-dir", str(tmp_path / "cache"))
    report = json.loads(done.stdout)
    assert (report["kind"], report["schema_version"]) == (DOCTOR_KIND, SCHEMA_VERSION)
    assert set(report) == {"kind", "schema_version", "device", "checks", "counts"}
    checks = {c["name"]: c for c in report["checks"]}
    assert {
        "nvml",
        "torch-cuda",
        "bitsandbytes",
        "deepspeed-jit",
        "fused-bloom",
        "shm",
        "disk",
        "ram",
    } <= set(checks)
    for check in report["checks"]:
        assert set(check) == {"name", "status", "reason"}
        assert check["status"] in ("ok", "warn", "fail") and check["reason"]
    fails = sum(c["status"] == "fail" for c in report["checks"])
    assert done.returncode == (1 if fails else 0), done.stderr
    assert f"free in {tmp_path}:" in checks["disk"]["reason"]  # --cache-dir is what is sized
    why = nvml_error_here()
    if why is None:
        pytest.skip("NVML works here: the unavailable branch is tested on the replay below")
    assert checks["nvml"]["status"] == "warn"  # --device auto: a CPU machine is no failure
    assert f"{type(why).__name__}: {why}" in checks["nvml"]["reason"]
    assert "NVMLError_LibraryNotFound: NVML Shared Library Not Found" in checks["nvml"]["reason"]


def test_doctor_for_cuda_fails_here_and_says_so_in_text() -> None:
    if nvml_error_here() is None:
        pytest.skip("this machine has a working NVML")
    done = doctor("--device", "cuda")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("bloomperf doctor: ")
    nvml_line = next(line for line in done.stdout.splitlines() if " nvml " in line)
    assert nvml_line.split()[0] == "fail" and "NVML Shared Library Not Found" in nvml_line


def test_library_facts_here_are_the_real_libraries() -> None:
    """This machine: torch CPU build, bitsandbytes' CPU library, DeepSpeed without nvcc."""
    import torch

    facts = library_facts()
    assert facts["torch"]["version"] == torch.__version__
    assert facts["torch"]["cuda"] == torch.version.cuda
    if torch.version.cuda is None:
        assert check_torch_cuda(facts, None, "auto").status == "ok"
        assert check_torch_cuda(facts, None, "cuda").reason.endswith("is a CPU build")
        bnb = check_bitsandbytes(facts, "auto")
        assert (bnb.status, facts["bitsandbytes"]["backend"]) == ("warn", "CPU")
        assert "int8 runs on CPU" in bnb.reason
    ds = facts["deepspeed"]
    assert ds["version"] == __import__("deepspeed").__version__
    if "nvcc" not in ds:  # DeepSpeed's own MissingCUDAException text, or nvcc failing
        jit = check_deepspeed_jit(facts, "auto")
        assert jit.status == "warn" and ds["nvcc_error"] in jit.reason


def test_fused_bloom_follows_the_installed_transformers() -> None:
    from bloomperf.backends.compat import installed_version, version_tuple

    check = check_fused_bloom()
    allowed = version_tuple(installed_version("transformers") or "0") <= (4, 43, 4)
    assert check.status == ("ok" if allowed else "warn")
    if not allowed:
        assert "transformers<=4.43.4" in check.reason


def test_host_checks_against_real_sizes(tmp_path: Path) -> None:
    assert check_shm(1).status in ("ok", "warn")  # this machine's real /dev/shm
    assert check_shm(1, tmp_path / "nope").status == "fail"
    # A tiny model fits anywhere; the whole bloom-176b (352 GB) does not fit this disk or RAM.
    assert check_disk("tiny", None, tmp_path).status == "ok"
    huge = check_disk("bloom-176b", None, tmp_path)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert huge.status == ("fail" if free < 352 * GB * 1.05 else "ok")
    ram = __import__("psutil").virtual_memory().total
    weights = MODEL_SHAPES["bloom-176b"].parameters() * 2
    # The whole model does not fit this RAM, but accelerate and meta-device loads never hold it.
    assert check_ram("bloom-176b", None, 8, ram).status == "warn" or weights <= ram
    two_layers = MODEL_SHAPES["bloom-176b"].parameters(2) * 2
    expected = "ok" if 8 * two_layers <= ram else "warn"
    assert check_ram("bloom-176b", 2, 8, ram).status == expected


# ---- GPU branches: hand-written NVML answers and library facts ---------------------------------


def tuned_a100s() -> NvmlReplay:
    """Hand-written: an 8×A100 set up for benchmarking (persistence on, clocks locked, ECC on)."""
    nvml = NvmlReplay.load("8xA100-SXM4-80GB")
    for device in nvml.devices:
        device.update(
            persistence_mode=1,
            applications_clock_sm_mhz=1410,
            default_applications_clock_sm_mhz=1275,
            ecc_mode=[1, 1],
            ecc_uncorrected_volatile=0,
        )
    return nvml


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_nvml_checks_on_a_tuned_machine() -> None:
    checks, found = check_nvml(tuned_a100s(), "cuda")
    assert found == {"cuda_driver": "12.2", "gpus": 8}
    got = by_name(checks)
    assert got["nvml"].status == "ok" and "driver 535.104.05 (CUDA 12.2), 8 ×" in got["nvml"].reason
    assert {c.status for c in checks} == {"ok"}
    assert got["clocks"].reason == "application clocks locked: SM 1410 MHz (default 1275)"


def test_nvml_checks_say_what_is_wrong_and_where() -> None:
    nvml = tuned_a100s()
    nvml.devices[3]["persistence_mode"] = 0
    nvml.devices[5]["applications_clock_sm_mhz"] = 1275  # back at the default
    nvml.devices[6]["ecc_uncorrected_volatile"] = 2
    nvml.set_processes(7, [(4_000_000, 10 * GB)])
    got = by_name(check_nvml(nvml, "cuda")[0])
    assert got["persistence"].status == "warn" and "GPUs 3:" in got["persistence"].reason
    assert got["clocks"].status == "warn" and "default on GPUs 5:" in got["clocks"].reason
    assert got["ecc"].status == "fail" and "GPUs 6 (2)" in got["ecc"].reason
    assert got["idle"].status == "warn" and "GPUs 7:" in got["idle"].reason
    # The recordings without these settings: NVML answers NOT_SUPPORTED for each.
    bare = by_name(check_nvml(NvmlReplay.load("4xA100-SXM4-80GB"), "cuda")[0])
    assert bare["clocks"].reason == "application clocks not readable on GPUs 0,1,2,3"
    assert bare["ecc"].reason == "no GPU reports ECC"


def test_nvml_checks_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = tuned_a100s()
    nvml.devices[1]["persistence_mode"] = 0  # not ours
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    checks, found = check_nvml(nvml, "cuda")
    assert found["gpus"] == 2 and by_name(checks)["persistence"].status == "ok"
    assert by_name(checks)["nvml"].reason.endswith("GPUs 4,5")


def test_nvml_missing_library_fails_only_for_cuda() -> None:
    class Missing(NvmlReplay):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)  # pynvml's own subclass

    nvml = Missing.load("8xA100-SXM4-80GB")
    (auto,), _ = check_nvml(nvml, "auto")
    (cuda,), _ = check_nvml(nvml, "cuda")
    assert (auto.status, cuda.status) == ("warn", "fail")
    assert "NVMLError_LibraryNotFound: NVML Shared Library Not Found" in cuda.reason


GPU_FACTS: dict[str, Any] = {  # hand-written: what the probe reports on an H200, torch cu130
    "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "available": True, "devices": 1},
    "bitsandbytes": {
        "backend": "CUDA",
        "cuda_library": True,
        "library": "libbnb_cuda130.so",
        "load": [],
    },
    "deepspeed": {"version": "0.19.8", "ninja": True, "nvcc": "13.0"},
}


@pytest.mark.parametrize(
    ("driver", "status", "words"),
    [
        ("13.0", "ok", "driver supports 13.0; torch sees 1 GPUs"),
        ("13.2", "ok", "driver supports 13.2"),
        ("12.2", "fail", "needs a driver for CUDA 13; this driver supports 12.2"),
    ],
)
def test_torch_cuda_against_the_driver(driver: str, status: str, words: str) -> None:
    check = check_torch_cuda(GPU_FACTS, driver, "cuda")
    assert check.status == status and words in check.reason
    newer_minor = {**GPU_FACTS, "torch": {**GPU_FACTS["torch"], "cuda": "13.2"}}
    assert check_torch_cuda(newer_minor, "13.0", "cuda").status == "warn"


def test_library_checks_on_gpu_facts() -> None:
    assert check_bitsandbytes(GPU_FACTS, "cuda").status == "ok"
    broken = {
        "bitsandbytes": {
            "backend": "CUDA",
            "cuda_library": False,
            "library": "mock",
            "load": ["libcudart.so.13: cannot open shared object file"],
        }
    }
    failed = check_bitsandbytes(broken, "cuda")
    assert failed.status == "fail" and failed.reason.endswith(
        "load: libcudart.so.13: cannot open shared object file"
    )
    assert check_deepspeed_jit(GPU_FACTS, "cuda").status == "ok"
    # DeepSpeed's own CUDAMismatchException text, as deepspeed_facts() records it
    mismatch = {
        **GPU_FACTS["deepspeed"],
        "nvcc": "12.8",
        "mismatch": "CUDAMismatchException: "
        "DeepSpeed Op Builder: Installed CUDA version 12.8 does not match the version "
        "torch was compiled with 13.0, unable to compile cuda/cpp extensions without a "
        "matching cuda version.",
    }
    check = check_deepspeed_jit({"deepspeed": mismatch}, "cuda")
    assert check.status == "fail" and "Installed CUDA version 12.8 does not match" in check.reason
    no_ninja = {"deepspeed": {**GPU_FACTS["deepspeed"], "ninja": False}}
    assert check_deepspeed_jit(no_ninja, "cuda").reason.endswith("no ninja")


def test_run_checks_on_a_gpu_machine_sizes_for_its_ranks(tmp_path: Path) -> None:
    checks = run_checks(
        RunConfig(device="cuda", cache_dir=tmp_path, layers=2), tuned_a100s(), GPU_FACTS
    )
    got = by_name(checks)
    assert got["torch-cuda"].status == "fail"  # the 8×A100 recording's driver is CUDA 12.2
    assert "8 ranks × " in got["ram"].reason  # ranks: the 8 visible GPUs
    assert "bloom-176b" in got["disk"].reason


def test_a_build_lock_with_a_live_builder_is_no_stale_lock(tmp_path: Path) -> None:
    """gpu_check.sh JIT-builds DeepSpeed's kernels in the background, outside bloomperf's own
    lock: torch's baton is there while ninja runs in the op folder. Doctor tells that live
    build (a process working in the folder) from a baton a killed build left."""
    from bloomperf.catalog.caches import BATON_NAME, build_lock
    from bloomperf.doctor.host import check_build_locks

    baton = tmp_path / "transformer_inference" / BATON_NAME
    baton.parent.mkdir()
    baton.touch()
    builder = subprocess.Popen(["sleep", "60"], cwd=baton.parent)  # ninja's stand-in: a process
    try:
        check = check_build_locks(tmp_path)
        assert check.status == "ok" and f"held by PID {builder.pid}" in check.reason, check
        with build_lock(tmp_path, 1.0) as removed:  # nor does a bloomperf group remove it
            assert removed == [] and baton.exists()
    finally:
        builder.kill()
        builder.wait()
    check = check_build_locks(tmp_path)
    assert check.status == "warn" and "left by a killed build" in check.reason, check


def toolkit(root: Path) -> Path:
    """A CUDA toolkit's tree as the fused-kernel build looks into it: every header and library
    it needs, as empty files."""
    from bloomperf.doctor.build import HEADERS, LIBRARIES

    (root / "include").mkdir(parents=True)
    (root / "lib64").mkdir()
    for name in HEADERS:
        (root / "include" / name).touch()
    for name in LIBRARIES:
        (root / "lib64" / name).touch()
    return root


def test_doctor_names_each_header_or_library_the_kernel_build_would_miss(tmp_path: Path) -> None:
    import sysconfig

    from bloomperf.doctor.build import (
        HEADERS,
        LIBRARIES,
        BuildTree,
        check_build_files,
        this_build_tree,
    )

    python_include = tmp_path / "python"
    python_include.mkdir()
    (python_include / "Python.h").touch()
    cuda = toolkit(tmp_path / "cuda")
    whole = BuildTree(cuda, python_include)
    assert check_build_files(whole, "cuda").status == "ok"
    for path in [cuda / "include" / h for h in HEADERS] + [cuda / "lib64" / n for n in LIBRARIES]:
        path.unlink()
        check = check_build_files(whole, "cuda")
        assert check.status == "fail" and path.name in check.reason, check
        assert check_build_files(whole, "cpu").status == "warn"
        path.touch()
    (cuda / "lib64" / "libcurand.so").unlink()
    (cuda / "lib64" / "libcurand.so.10").touch()  # the runtime wheel's file: no link by -lcurand
    assert "libcurand.so (not in" in check_build_files(whole, "cuda").reason
    # Python.h as torch's builder finds it: sysconfig's include folder of this interpreter.
    here = this_build_tree()
    assert here.python_include == Path(sysconfig.get_paths()["include"])
    found = (here.python_include / "Python.h").is_file()
    assert (
        "Python.h" in check_build_files(BuildTree(cuda, here.python_include), "cuda").reason
    ) is not found
