"""Faults on the real run path (tiny model, CPU): what bloomperf does when things go wrong.

The spine's own tests (test_run.py) cover a SIGKILLed worker, a single hung worker and a CPU OOM's
outcome; these go further: a hung rank of two, the memory reading after an OOM, NVML missing or
failing mid-run, Ctrl-C, a read-only or full output location, hostile JSON, and two runs at once.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

import bloomperf.harness.launch
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.failures import classify_failure
from bloomperf.cli import main as cli_main
from bloomperf.harness.launch import ABORT_GRACE_S
from bloomperf.harness.matrix import Cell
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session
from bloomperf.harness.worker import LIMITED_RANK_ENV
from bloomperf.measure.memory import create_sampler
from bloomperf.measure.nvml_sampler import NvmlSampler
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import run_to_dict, save_run
from bloomperf.store.results.files import read_results
from tests.builders import TINY, tiny_run
from tests.leftovers import alive, marked_env, marked_processes
from tests.nvml_replay import NvmlReplay
from tests.pace import soon_after

REPO = Path(__file__).resolve().parents[1]
GB = 1024**3


def bloomperf_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bloomperf", *args]


def session(tmp_path: Path, **extra: str) -> Session:
    options = resolve_options(
        {"new_tokens": "8", "cycles": "2", "output": str(tmp_path / "s.json"), **extra}, env={}
    )
    return Session.prepare(options)


def group_pids(sess: Session) -> set[int]:
    assert sess.active is not None and sess.active.group is not None
    process = sess.active.group.process
    assert process is not None
    root = psutil.Process(process.pid)
    return {root.pid, *(c.pid for c in root.children(recursive=True))}


def one_line_error(stderr: str, *fragments: str) -> None:
    """One error line (after at most the run's banner line), no traceback."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("bloomperf: error:")]
    assert len(errors) == 1 and len(lines) <= 2, stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


# ---- one rank of two hangs ------------------------------------------------------------------


def stop_one_rank_then_cycle(sess: Session, stopped: list[int]) -> Any:
    """A measure that freezes rank 1 (SIGSTOP: alive, silent) and then asks for a cycle; rank 0
    waits for it inside generate's all-reduce, as with a hung NCCL collective."""

    def measure(one_cycle: Any, warmup: int, cycles: int) -> list[float]:
        for pid in group_pids(sess):
            try:
                if psutil.Process(pid).environ().get("RANK") == "1":
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            except psutil.NoSuchProcess:
                pass
        assert stopped, "no rank 1 found in the group"
        return [one_cycle()]

    return measure


def test_a_hung_rank_of_two_times_out_and_the_whole_group_is_killed(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    timeout_s = 20.0
    sess = session(
        tmp_path, backends="ds-autotp", tp="2", dtypes="fp32", cell_timeout=str(timeout_s)
    )
    stopped: list[int] = []
    try:
        first = sess.measure_cell(Cell("ds-autotp", "fp32", 2))
        assert first.outcome is Outcome.OK, first.message
        assert first.details.get("tp") == 2
        pids = group_pids(sess)
        assert len(pids) >= 3  # the launcher and two ranks
        started = time.monotonic()
        hung = sess.measure_cell(
            Cell("ds-autotp", "fp32", 4), stop_one_rank_then_cycle(sess, stopped)
        )
        elapsed = time.monotonic() - started
    finally:
        sess.stop()
    assert hung.outcome is Outcome.TIMEOUT
    assert "within 20 s" in hung.message
    # The limit, the group's grace (the frozen rank ignores SIGTERM), and what stopping the
    # group costs on this machine now: measured quiet, 22.0 s of a bound of 23.5.
    assert timeout_s <= elapsed < soon_after(timeout_s + ABORT_GRACE_S)
    assert alive(pids) == set()  # every process of the group, the frozen rank included
    saved = read_results(tmp_path / "s.json")
    assert [c.outcome for c in saved.cells] == [Outcome.OK, Outcome.TIMEOUT]


# ---- which failures are OOMs ---------------------------------------------------------------


def installed_source(package: str, relative: str) -> str:
    """A file of an installed library, read as the library ships it."""
    module = __import__(package)
    return (Path(module.__file__).parent / relative).read_text()


def deepspeed_workspace_errors() -> list[str]:
    """The texts DeepSpeed-Inference throws when its workspace (cudaMalloc'd outside torch)
    does not fit, read from the installed kernel sources."""
    pytest.importorskip("deepspeed")
    header = installed_source(
        "deepspeed", "ops/csrc/transformer/inference/includes/inference_context.h"
    )
    return re.findall(r"throw std::runtime_error\(\"(Workspace[^\"]*)\"\)", header)


def nccl_error(interpretation: str, last_error: str) -> str:
    """A DistBackendError's text as torch's C10D_NCCL_CHECK builds it (NCCLUtils.hpp), with
    getNcclErrorDetailStr's interpretation and NCCL's last error."""
    header = installed_source("torch", "include/torch/csrc/distributed/c10d/NCCLUtils.hpp")
    assert '"NCCL error in: "' in header and "getNcclErrorDetailStr(result" in header
    return (
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\n"
        f"{interpretation}\nLast error:\n{last_error}"
    )


def cpu_allocation_failure() -> RuntimeError:
    import torch

    try:
        torch.empty(2**60, dtype=torch.uint8)  # 1 EiB: torch's CPU allocator refuses it for real
    except RuntimeError as exc:
        return exc
    raise AssertionError("a 1 EiB tensor was allocated")


def test_allocation_failures_of_every_library_read_oom() -> None:
    import torch
    import torch.distributed as dist

    workspace = deepspeed_workspace_errors()
    # "no enough memory.", "not enough memory", and "Workspace is null.": the cudaMalloc of a
    # workspace sized by the group's first forward returned nothing (GenWorkSpace's printf of
    # Requested/Free/Total precedes it).
    assert len(workspace) == 3 and "Workspace is null." in workspace, workspace
    header = installed_source("torch", "include/ATen/cuda/Exceptions.h")
    assert '"CUDA error: ",' in header and "_cublasGetErrorEnum(__err)" in header
    ooms: list[BaseException] = [
        cpu_allocation_failure(),
        MemoryError(),
        torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
            "79.14 GiB of which 1.02 GiB is free."
        ),
        torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be ..."),
        *(RuntimeError(text) for text in workspace),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        dist.DistBackendError(
            nccl_error(
                "ncclUnhandledCudaError: Call to CUDA function failed.",
                "Cuda failure 2 'out of memory'",
            )
        ),
        dist.DistBackendError(
            nccl_error(
                "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                "failed or device error. ",
                "Failed to malloc 1073741824 bytes",
            )
        ),
    ]
    for exc in ooms:
        assert classify_failure(exc) == "oom", repr(exc)
    errors: list[BaseException] = [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        dist.DistBackendError(
            nccl_error(
                "ncclRemoteError: A call failed possibly due to a network error or a remote "
                "process exiting prematurely.",
                "socket recv: Connection reset by peer",
            )
        ),
        RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`"),
        ValueError("generate produced 7 tokens instead of 8"),
    ]
    for exc in errors:
        assert classify_failure(exc) == "error", repr(exc)


# ---- rank 1 of two runs out of memory --------------------------------------------------------


def test_an_oom_on_rank_1_reads_oom_with_rank_1s_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deepspeed")
    # Only rank 1 gets the address-space cap (about 0.6 GB above what a loaded rank maps): its
    # batch-65536 activations fail in torch's CPU allocator while rank 0 waits for it in the
    # all-reduce; DeepSpeed's launcher then sees rank 1 exit and kills rank 0.
    monkeypatch.setenv(LIMITED_RANK_ENV, "1")
    sess = session(tmp_path, backends="ds-autotp", tp="2", dtypes="fp32", memory_limit="2000MiB")
    try:
        first = sess.measure_cell(Cell("ds-autotp", "fp32", 1))
        assert first.outcome is Outcome.OK, first.message
        pids = group_pids(sess)
        oom = sess.measure_cell(Cell("ds-autotp", "fp32", 65536))
    finally:
        sess.stop()
    assert oom.outcome is Outcome.OOM, oom.message
    assert oom.message.startswith("rank 1: RuntimeError: "), oom.message
    assert "DefaultCPUAllocator: can't allocate memory" in oom.message
    assert alive(pids) == set()
    saved = read_results(tmp_path / "s.json")
    assert [c.outcome for c in saved.cells] == [Outcome.OK, Outcome.OOM]


# ---- OOM: the next cell's memory reading is its own --------------------------------------------


def test_after_an_oom_the_next_cells_memory_is_not_polluted(tmp_path: Path) -> None:
    sess = session(tmp_path, memory_limit="1500MiB")
    try:
        clean = sess.measure_cell(Cell("accelerate", "fp32", 1))
        oom = sess.measure_cell(Cell("accelerate", "fp32", 65536))
        after = sess.measure_cell(Cell("accelerate", "bf16", 1))
    finally:
        sess.stop()
    assert (clean.outcome, oom.outcome, after.outcome) == (Outcome.OK, Outcome.OOM, Outcome.OK)
    assert oom.generate_memory is not None and oom.generate_memory.peak_bytes is not None
    assert clean.generate_memory is not None and after.generate_memory is not None
    clean_peak, oom_peak = clean.generate_memory.peak_bytes, oom.generate_memory.peak_bytes
    after_peak = after.generate_memory.peak_bytes
    assert clean_peak is not None and after_peak is not None
    # The OOM cell really climbed (hundreds of MB of activations before the failed allocation) ...
    assert oom_peak > clean_peak + 200 * 2**20
    # ... and the next cell reads like a clean one, nowhere near the OOM cell's peak.
    assert after_peak < clean_peak * 1.25
    assert len(after.samples_ms_per_token) == 2 and after.ms_per_token is not None


# ---- NVML missing or failing mid-run --------------------------------------------------------


def measure_with_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_sampler: Callable[[int], Any]
) -> tuple[CellResult, CellResult]:
    """Two cells of one group, the workers' memory read by ``make_sampler(pid)``: the real
    NVML code, on this machine's missing library or on hand-written NVML answers."""
    monkeypatch.setattr(
        bloomperf.harness.launch,
        "create_sampler",
        lambda device, pid, visible=None: make_sampler(pid),
    )
    sess = session(tmp_path, dtypes="fp32")
    try:
        return (
            sess.measure_cell(Cell("accelerate", "fp32", 1)),
            sess.measure_cell(Cell("accelerate", "fp32", 2)),
        )
    finally:
        sess.stop()


def test_nvml_missing_reports_memory_unavailable_and_keeps_timings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine: the missing-NVML path cannot be observed")
    except pynvml.NVMLError as exc:
        why = f"NVML: {exc}"
    first, second = measure_with_nvml(
        tmp_path, monkeypatch, lambda pid: create_sampler("cuda", pid)
    )
    for cell in (first, second):
        assert cell.outcome is Outcome.OK
        assert len(cell.samples_ms_per_token) == 2 and cell.load_time_s is not None
        for memory in (cell.load_memory, cell.generate_memory):
            assert memory is not None and memory.source == "unavailable"
            assert memory.peak_bytes is None and memory.reason == why
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["cells"][0]["generate_memory"]["reason"] == why


def test_nvml_failing_mid_run_reports_why_and_keeps_timings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml

    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    lost = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    # The sampler's thread never polls (interval of an hour): NVML is queried only at the phase
    # boundaries, twice each (the phase's last sample, then the next phase's first), so the
    # replayed library's n-th memory answer lands in a known phase. Boundaries: end of load
    # (answers 1, 2), cell 1's begin (3, 4), end of cell 1's generation (5: the GPU is lost).
    # Cell 1's generation saw answer 4 before the loss; cell 2 sees nothing.
    nvml.script_used({0: [2 * GB, 1 * GB, 1 * GB, 3 * GB, lost]})

    def sampler(pid: int) -> NvmlSampler:
        return NvmlSampler(pid, nvml=nvml, visible="0", interval_s=3600)

    first, second = measure_with_nvml(tmp_path, monkeypatch, sampler)
    assert first.outcome is Outcome.OK and second.outcome is Outcome.OK
    assert first.load_memory is not None and first.load_memory.source == "nvml"
    assert first.load_memory.peak_bytes == 2 * GB and first.load_memory.reason == ""
    assert first.generate_memory is not None and first.generate_memory.source == "nvml"
    assert first.generate_memory.peak_bytes == 3 * GB
    assert first.generate_memory.reason == "NVML failed mid-run: GPU is lost"
    assert second.generate_memory is not None and second.generate_memory.source == "unavailable"
    assert second.generate_memory.reason == "NVML failed mid-run: GPU is lost"
    for cell in (first, second):
        assert len(cell.samples_ms_per_token) == 2 and all(s > 0 for s in cell.samples_ms_per_token)


# ---- two runs at once, then Ctrl-C ----------------------------------------------------------


def read_until(stream: Any, needle: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        line = stream.readline()
        if not line or time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} never came; got:\n{seen}")
        seen += line
    return seen


def test_second_run_refuses_with_the_first_pid_then_ctrl_c_keeps_finished_cells(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "BLOOMPERF_LOCK_DIR": str(tmp_path / "locks")}
    out = tmp_path / "first.json"
    first = subprocess.Popen(
        bloomperf_cmd(
            "run",
            # 40 cells; the run is held stopped after its second (below), so Ctrl-C lands
            # mid-run however fast the machine.
            "--new-tokens",
            "100",
            "--cycles",
            "5",
            "--dtypes",
            "fp32",
            "--batch-sizes",
            ",".join(str(b) for b in range(1, 41)),
            "--output",
            str(out),
        ),
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        # A shell that started this suite in the background leaves SIGINT ignored, and children
        # inherit that: give the run the default disposition, as a terminal's Ctrl-C would find.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert first.stderr is not None
        read_until(first.stderr, "[2/40]", timeout=300)
        workers = {c.pid for c in psutil.Process(first.pid).children(recursive=True)}
        assert workers
        # Stopped, the first run keeps its lock and starts no further cell while the second
        # one runs: an event, not a guess at how long 38 cells take.
        first.send_signal(signal.SIGSTOP)
        controller = psutil.Process(first.pid)
        while controller.status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)

        second = subprocess.run(
            bloomperf_cmd("run", "--new-tokens", "8", "--output", str(tmp_path / "second.json")),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 2
        one_line_error(second.stderr, f"another bloomperf run (PID {first.pid})", "--no-lock")
        assert not (tmp_path / "second.json").exists()

        # Ctrl-C, pending while stopped: the run meets it first thing when continued.
        first.send_signal(signal.SIGINT)
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=60) == 130
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    run = read_results(out)  # a valid file, complete or not
    assert not run.complete
    assert len(run.cells) >= 2 and all(c.outcome is Outcome.OK for c in run.cells)
    assert [c.batch_size for c in run.cells] == list(range(1, len(run.cells) + 1))
    assert alive(workers) == set()
    assert not list(tmp_path.glob(".first.json.*"))  # no temporary file left behind


def test_sigterm_stops_the_run_as_ctrl_c_does_and_exits_143(tmp_path: Path) -> None:
    out = tmp_path / "terminated.json"
    run = subprocess.Popen(
        bloomperf_cmd(
            "run",
            "--no-lock",
            "--new-tokens",
            "100",
            "--dtypes",
            "fp32",
            "--batch-sizes",
            ",".join(str(b) for b in range(1, 41)),
            "--output",
            str(out),
        ),
        env=marked_env(tmp_path),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        # What a CI runner's cancel finds: SIGTERM at its default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        assert run.stderr is not None
        read_until(run.stderr, "[2/40]", timeout=300)
        assert len(marked_processes(tmp_path, wait_s=0)) >= 2  # the run and its worker
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 143
        rest = run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "bloomperf: terminated (SIGTERM); " in rest and str(out) in rest, rest
    saved = read_results(out)  # a valid file, complete or not
    assert not saved.complete
    assert len(saved.cells) >= 2 and all(c.outcome is Outcome.OK for c in saved.cells)
    assert marked_processes(tmp_path) == set()  # the worker too, though not in our group
    assert not list(tmp_path.glob(".terminated.json.*"))


def test_sigterm_under_pytest_stops_the_worker_groups_and_keeps_the_results(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_matrix.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.cpu\n"
        "def test_cpu(bloomperf_cell, bloomperf, benchmark):\n"
        "    bloomperf.check(bloomperf_cell, benchmark)\n"
    )
    out = tmp_path / "r.json"
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "cpu",
            "-p",
            "no:cacheprovider",
            "--bloomperf-new-tokens=100",
            "--bloomperf-dtypes=fp32",
            f"--bloomperf-batch-sizes={','.join(str(b) for b in range(1, 41))}",
            "--bloomperf-no-lock",
            f"--bloomperf-output={out}",
            "test_matrix.py",
        ],
        cwd=tmp_path,
        env=marked_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and len(read_results(out).cells) >= 2):
            assert run.poll() is None and time.monotonic() < deadline, "no two cells measured"
            time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert "Terminated" in output, output[-3000:]
    saved = read_results(out)
    assert not saved.complete and len(saved.cells) >= 2
    assert all(c.outcome is Outcome.OK for c in saved.cells)
    assert marked_processes(tmp_path) == set()


# ---- unwritable output: read-only folder, full disk ---------------------------------------------


def test_read_only_output_folder_is_one_line_and_leaves_no_worker(tmp_path: Path) -> None:
    done = subprocess.run(
        bloomperf_cmd(
            "run",
            "--no-lock",
            "--new-tokens",
            "4",
            "--cycles",
            "1",
            "--dtypes",
            "fp32",
            "--batch-sizes",
            "1",
            "--output",
            "/sys/bloomperf-results.json",
        ),
        env=marked_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    one_line_error(done.stderr, "/sys/bloomperf-results.json", "cannot write")
    assert marked_processes(tmp_path) == set()


def test_full_disk_leaves_the_old_results_file_whole(tmp_path: Path) -> None:
    resolve_model("tiny", None, None)  # build the model now: the limit below is for the run only
    out = tmp_path / "r.json"
    old = replace(tiny_run(new_tokens=8, cycles=1, environment={}), complete=False)
    save_run(old, out)
    old_bytes = out.read_bytes()
    limit = len(old_bytes) + 200  # the new file, with a cell and the environment, is larger
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    def fill_the_disk_at_limit() -> None:
        # Writing past RLIMIT_FSIZE fails like a full disk does (EFBIG instead of ENOSPC) once
        # SIGXFSZ is ignored.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        bloomperf_cmd(
            "run",
            "--no-lock",
            "--new-tokens",
            "4",
            "--cycles",
            "1",
            "--dtypes",
            "fp32",
            "--batch-sizes",
            "1",
            "--output",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=fill_the_disk_at_limit,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert done.returncode == 2
    assert list(scratch.iterdir()) == []  # the worker's folder too
    # The old file is left in place until the run's first cell, so the refusal comes then:
    # one error line, naming the file, after the progress lines.
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and str(out) in errors[0] and "cannot write" in errors[0], done.stderr
    assert out.read_bytes() == old_bytes
    kept = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert set(kept) <= {"r.json", "r.previous.json"}, kept  # no temporary file left behind
    assert all(data == old_bytes for data in kept.values())


# ---- hostile JSON -------------------------------------------------------------------------------


def valid_results() -> dict[str, Any]:
    cell = CellResult("accelerate", "fp32", 1, Outcome.OK, (1.5, 1.6), 0.5)
    return run_to_dict(tiny_run(cell, new_tokens=8, cycles=2, environment={}))


def hostile(kind: str) -> str:
    text = json.dumps(valid_results())
    cell = '"batch_size": 1'
    cases = {
        "huge float": text.replace('"load_time_s": 0.5', '"load_time_s": 1e400'),
        "huge sample": text.replace("[1.5, 1.6]", "[1e308, 1.6]"),
        "huge int": text.replace(cell, '"batch_size": 1' + "0" * 5000),
        "negative": text.replace(cell, '"batch_size": -3'),
        "bool as int": text.replace(cell, '"batch_size": true'),
        "string as number": text.replace("[1.5, 1.6]", '["1.5", 1.6]'),
        "list as object": text.replace('"model": {', '"model": [{').replace(
            f'"parameters": {TINY.parameters}}}', f'"parameters": {TINY.parameters}}}]'
        ),
        "NaN": text.replace("[1.5, 1.6]", "[NaN, 1.6]"),
        "deep nesting": text.replace('"details": {}', '"details": ' + "[" * 100000 + "]" * 100000),
        "truncated": text[: len(text) // 2],
        "empty": "",
        "binary": "\x00\xff\xfe garbage",
        "wrong version": re.sub(r'"schema_version": \d+', '"schema_version": 7', text),
        "unknown outcome": text.replace('"outcome": "ok"', '"outcome": "rm -rf"'),
    }
    return cases[kind]


HOSTILE_KINDS = [
    "huge float",
    "huge sample",
    "huge int",
    "negative",
    "bool as int",
    "string as number",
    "list as object",
    "NaN",
    "deep nesting",
    "truncated",
    "empty",
    "binary",
    "wrong version",
    "unknown outcome",
]


def test_the_unmodified_fixture_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "good.json"
    path.write_text(json.dumps(valid_results()))
    assert read_results(path).cells[0].batch_size == 1  # so each hostile case fails for its change


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
def test_hostile_json_is_one_line_exit_2_and_overwrites_nothing(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hostile.json"
    path.write_bytes(hostile(kind).encode("utf-8", errors="surrogateescape"))
    baselines = tmp_path / "baselines"
    shutil.copytree(REPO / "baselines", baselines)
    snapshot = {p.name: p.read_bytes() for p in baselines.iterdir()}
    hostile_bytes = path.read_bytes()
    for argv in (
        ["diff", str(path)],
        ["baseline", "accept", str(path), "--baselines", str(baselines)],
    ):
        code = cli_main(argv)
        captured = capsys.readouterr()
        assert code == 2, (argv, captured)
        one_line_error(captured.err, "hostile.json")
    assert {p.name: p.read_bytes() for p in baselines.iterdir()} == snapshot
    assert path.read_bytes() == hostile_bytes
