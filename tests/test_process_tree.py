"""The process tree dies with its controller, promptly: real runs on the tiny model (CPU),
stopped by each signal a CI runner, a closed terminal, ``timeout -k`` or Docker sends.

Every process of a run is found afterwards by an environment marker it inherited
(``tests/leftovers``): one that escaped its group is no longer anybody's child.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from bloomperf.catalog.caches import BATON_NAME, extensions_dir
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.launch import ABORT_GRACE_S
from bloomperf.harness.lock import hold_device_lock
from bloomperf.harness.orphans import CONTROLLER_ENV, HELD_ENV, controller_alive
from bloomperf.store.results import Outcome
from bloomperf.store.results.files import read_results
from tests.leftovers import marked_env, marked_processes, wait_gone
from tests.pace import soon_after

BATCHES = ",".join(str(b) for b in range(1, 41))


def start_run(tmp_path: Path, out: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """``bloomperf run`` with a private TMPDIR and lock folder, every signal at its default
    disposition (as a CI runner's cancel or a closed terminal finds it)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    environment = {
        **marked_env(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),
        "BLOOMPERF_LOCK_DIR": str(tmp_path / "locks"),
        **env,
    }

    def default_signals() -> None:
        for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGINT):
            signal.signal(stop, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "-m", "bloomperf", "run", "--output", str(out), *args],
        env=environment,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_signals,
    )


def read_until(run: subprocess.Popen[str], needle: str, timeout: float) -> str:
    assert run.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        line = run.stderr.readline()
        if not line or time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} never came; got:\n{seen}")
        seen += line
    return seen


def finish(run: subprocess.Popen[str], timeout: float) -> tuple[int, str, float]:
    """The exit status, the rest of stderr, and how long the run took to exit."""
    started = time.monotonic()
    try:
        code = run.wait(timeout=timeout)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    took = time.monotonic() - started
    assert run.stderr is not None
    return code, run.stderr.read(), took


def workers_of(tmp_path: Path, controller: int) -> set[int]:
    return marked_processes(tmp_path, wait_s=0) - {controller}


def maps_torch(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return "libtorch" in maps.read()
    except OSError:
        return False


def wait_inside_the_load(tmp_path: Path, run: subprocess.Popen[str], workers: int) -> None:
    """Until ``workers`` of the run's processes have torch's library mapped: past their start,
    inside the load (imports, DeepSpeed's op build). A process state, not a guessed sleep."""
    deadline = time.monotonic() + 300
    while sum(maps_torch(pid) for pid in workers_of(tmp_path, run.pid)) < workers:
        assert time.monotonic() < deadline, "no worker got as far as importing torch"
        assert run.poll() is None, finish(run, 0)
        time.sleep(0.05)


def leftovers_in_tmpdir(tmp_path: Path) -> list[str]:
    """What the run left in its TMPDIR: worker folders, torch's inductor cache, anything."""
    return sorted(p.name for p in (tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("stop", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_a_hang_up_or_quit_stops_the_run_as_ctrl_c_does(
    tmp_path: Path, stop: signal.Signals
) -> None:
    out = tmp_path / "r.json"
    run = start_run(
        tmp_path,
        out,
        "--no-lock",
        "--new-tokens",
        "100",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        BATCHES,
    )
    read_until(run, "[2/40]", timeout=300)
    run.send_signal(stop)
    code, rest, _ = finish(run, timeout=60)
    assert code == 128 + stop, rest
    assert f"bloomperf: terminated ({stop.name}); " in rest and str(out) in rest, rest
    saved = read_results(out)
    assert not saved.complete and len(saved.cells) >= 2
    assert all(c.outcome is Outcome.OK for c in saved.cells)
    assert marked_processes(tmp_path) == set()
    assert leftovers_in_tmpdir(tmp_path) == []


def test_sigterm_kills_a_busy_worker_within_seconds_and_keeps_the_cells(tmp_path: Path) -> None:
    """A worker that does not answer (stopped here: alive, silent, as one deep in a long
    generate or a JIT build) must not hold the controller past ``timeout -k 10``'s SIGKILL."""
    out = tmp_path / "r.json"
    run = start_run(
        tmp_path,
        out,
        "--no-lock",
        "--new-tokens",
        "100",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        BATCHES,
    )
    read_until(run, "[1/40]", timeout=300)
    workers = workers_of(tmp_path, run.pid)
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    run.send_signal(signal.SIGTERM)
    # Waited for no longer than the bound: a run still going at 10 s has failed already (and a
    # mutant that waits 30 s for the worker fails in 10, not 30).
    try:
        code, rest, took = finish(run, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the run was still going 10 s after SIGTERM")
    assert code == 143, rest
    # At most the 10 s a `timeout -k 10` allows (the promise, docs/what-happens-when.md), and
    # no later than the group's grace plus what stopping costs on this machine now.
    assert took < min(10, soon_after(ABORT_GRACE_S)), f"{took:.1f} s to stop after SIGTERM"
    assert len(read_results(out).cells) >= 1
    assert marked_processes(tmp_path) == set()
    assert leftovers_in_tmpdir(tmp_path) == []


@pytest.mark.parametrize("backend", ["accelerate", "ds-zero"])
def test_no_descendant_survives_a_sigkilled_controller(tmp_path: Path, backend: str) -> None:
    """SIGKILL runs no handler: the group must see to it (parent-death signal, the watch on the
    controller), launcher, ranks and compilers alike, within 10 s."""
    if backend == "ds-zero":
        pytest.importorskip("deepspeed")
    out = tmp_path / "r.json"
    run = start_run(
        tmp_path,
        out,
        "--no-lock",
        "--backends",
        backend,
        "--tp",
        "2" if backend == "ds-zero" else "1",
        "--new-tokens",
        "100",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        BATCHES,
        "--load-timeout",
        "600",
    )
    read_until(run, f"loading {backend}", timeout=300)
    deadline = time.monotonic() + 300  # another group may hold the build lock for a while
    while len(workers_of(tmp_path, run.pid)) < (3 if backend == "ds-zero" else 1):
        assert time.monotonic() < deadline, "the group never started"
        assert run.poll() is None, finish(run, 0)
        time.sleep(0.2)
    wait_inside_the_load(tmp_path, run, 2 if backend == "ds-zero" else 1)
    run.kill()
    run.wait()
    assert marked_processes(tmp_path, wait_s=10) == set()


def test_sigterm_during_a_ds_zero_load_stops_the_group_at_once(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    out = tmp_path / "r.json"
    run = start_run(
        tmp_path,
        out,
        "--no-lock",
        "--backends",
        "ds-zero",
        "--tp",
        "2",  # the launcher, its launch process and two ranks
        "--new-tokens",
        "8",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        "1",
        "--load-timeout",
        "600",
    )
    read_until(run, "loading ds-zero", timeout=300)
    deadline = time.monotonic() + 300  # another group may hold the build lock for a while
    while len(workers_of(tmp_path, run.pid)) < 3:  # the launcher and two ranks at least
        assert time.monotonic() < deadline, "the ranks never started"
        assert run.poll() is None, finish(run, 0)
        time.sleep(0.2)
    wait_inside_the_load(tmp_path, run, 2)  # both ranks
    run.send_signal(signal.SIGTERM)
    # Waited for no longer than the bound: a run still going at 10 s has failed already (and a
    # mutant that waits 30 s for the worker fails in 10, not 30).
    try:
        code, rest, took = finish(run, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the run was still going 10 s after SIGTERM")
    assert code == 143, rest
    # At most the 10 s a `timeout -k 10` allows (the promise, docs/what-happens-when.md), and
    # no later than the group's grace plus what stopping costs on this machine now.
    assert took < min(10, soon_after(ABORT_GRACE_S)), f"{took:.1f} s to stop after SIGTERM"
    assert "terminated (SIGTERM)" in rest
    assert read_results(out).cells == ()  # a valid file: nothing was measured, nothing lost
    assert marked_processes(tmp_path) == set()
    assert leftovers_in_tmpdir(tmp_path) == []


def test_a_stale_build_lock_is_reported_by_doctor_then_removed_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build killed half-way leaves torch's ``lock`` file; DeepSpeed would wait on it until
    the load timeout. The next ds-zero group finds it, removes it, says so, and loads."""
    pytest.importorskip("deepspeed")
    # A private copy of the extensions folder: in the shared one, another worker's ds-zero run
    # would remove this lock first (or wait on it). The copy keeps the built op and its mtimes.
    private = tmp_path / "torch_extensions"
    if extensions_dir().is_dir():
        shutil.copytree(extensions_dir(), private, symlinks=True)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(private))
    baton = extensions_dir() / "deepspeed_shm_comm" / BATON_NAME
    baton.parent.mkdir(parents=True, exist_ok=True)
    baton.touch()
    try:
        doctor = subprocess.run(
            [sys.executable, "-m", "bloomperf", "doctor"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert f"stale build lock {baton}" in doctor.stdout, doctor.stdout
        out = tmp_path / "r.json"
        run = start_run(
            tmp_path,
            out,
            "--no-lock",
            "--backends",
            "ds-zero",
            "--tp",
            "2",  # two ranks: DeepSpeed's shared-memory all-reduce op is built and loaded
            "--new-tokens",
            "8",
            "--cycles",
            "1",
            "--dtypes",
            "fp32",
            "--batch-sizes",
            "1",
            "--load-timeout",
            "400",
        )
        _, rest, _ = finish(run, timeout=600)
    finally:
        baton.unlink(missing_ok=True)
    assert f"removed a stale build lock left by a killed build: {baton}" in rest, rest
    saved = read_results(out)
    assert [c.outcome for c in saved.cells] == [Outcome.OK], saved.cells[0].message[-2000:]
    assert not baton.exists()


def test_a_clean_run_leaves_nothing_in_tmpdir_and_a_failed_one_only_its_log(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.json"
    run = start_run(
        tmp_path,
        out,
        "--no-lock",
        "--new-tokens",
        "4",
        "--cycles",
        "1",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        "1",
    )
    code, rest, _ = finish(run, timeout=600)
    assert code in (0, 1), rest  # no baseline may fail the gate; the run itself ran
    assert [c.outcome for c in read_results(out).cells] == [Outcome.OK]
    assert leftovers_in_tmpdir(tmp_path) == []
    # A load that times out: its log beside the results (named in the cell), no worker folder.
    failed = tmp_path / "failed.json"
    run = start_run(
        tmp_path,
        failed,
        "--no-lock",
        "--new-tokens",
        "4",
        "--cycles",
        "1",
        "--dtypes",
        "fp32",
        "--batch-sizes",
        "1",
        "--load-timeout",
        "0.5",
    )
    finish(run, timeout=600)
    cell = read_results(failed).cells[0]
    assert cell.outcome is Outcome.TIMEOUT
    logs = list(Path(f"{failed}.logs").iterdir())
    assert len(logs) == 1 and str(logs[0]) in cell.message
    assert leftovers_in_tmpdir(tmp_path) == []
    assert marked_processes(tmp_path) == set()


def test_the_device_lock_is_not_free_while_a_killed_runs_group_survives(tmp_path: Path) -> None:
    """The kernel frees a SIGKILLed run's lock at once; a process of its group that is still
    running on the device keeps the next run out (after a grace for it to die), by PID."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    survivor = subprocess.Popen(  # what a group of that dead controller would look like
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        env={**os.environ, CONTROLLER_ENV: f"{dead.pid}:1.000:{dead.pid}", HELD_ENV: "cpu"},
        stdout=subprocess.PIPE,
    )
    try:
        # Running, not just forked: Popen returns once exec began, and until the new program's
        # stack is set up, /proc/PID/environ is empty (on a busy machine, long enough for the
        # lock to look and see no survivor).
        assert survivor.stdout is not None and survivor.stdout.readline() == b"up\n"
        started = time.monotonic()
        with (
            pytest.raises(BloomperfError, match=rf"still use cpu .*PIDs {survivor.pid}\b"),
            hold_device_lock("cpu", folder=tmp_path),
        ):
            pass
        assert time.monotonic() - started >= 5  # it gave the group time to die first
        with hold_device_lock("GPU-aaaa", folder=tmp_path):  # other devices are not held up
            pass
    finally:
        survivor.kill()
        survivor.wait()
    with hold_device_lock("cpu", folder=tmp_path):  # once it is gone, the device is free
        pass


def test_the_build_lock_removes_only_batons_nobody_can_be_holding(tmp_path: Path) -> None:
    """Under the build lock no other bloomperf group is building, so every torch ``lock`` file
    of the folder is stale; while another process holds it, doctor says nothing is stale and a
    second holder waits its turn (then gives up with one line)."""
    from bloomperf.catalog.caches import build_lock
    from bloomperf.doctor.host import check_build_locks

    batons = [tmp_path / op / BATON_NAME for op in ("deepspeed_shm_comm", "cpu_adam")]
    for baton in batons:
        baton.parent.mkdir()
        baton.touch()
    (tmp_path / "built_op").mkdir()  # an op folder without a lock file is left alone
    assert check_build_locks(tmp_path).status == "warn"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from pathlib import Path\n"
            "from bloomperf.catalog.caches import build_lock\n"
            "with build_lock(Path(sys.argv[1]), 10) as removed:\n"
            "    print(len(removed), flush=True)\n"
            "    sys.stdin.readline()\n",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "2"
        assert not any(b.exists() for b in batons)
        batons[0].touch()  # the holder's own build in progress
        assert check_build_locks(tmp_path).status == "ok"
        with (
            pytest.raises(BloomperfError, match="held its lock for over 1 s"),
            build_lock(tmp_path, 1.0),
        ):
            pass
        assert batons[0].exists()  # a waiting group never touches a live build's file
    finally:
        holder.kill()
        holder.wait()
    with build_lock(tmp_path, 10.0) as removed:  # its holder died: the lock died with it
        assert removed == [batons[0]]
    assert (tmp_path / "built_op").is_dir()


def test_stopping_a_runner_whose_request_an_interrupt_left_unanswered_does_not_wait(
    tmp_path: Path,
) -> None:
    """Every caller that stops a runner in a ``finally`` (ab's engine, calibrate, the plugin)
    does so while a signal unwinds: a worker still busy with the request is not waited for."""
    from bloomperf.harness.matrix import Cell
    from bloomperf.harness.options import resolve_options
    from bloomperf.harness.session import Session

    options = resolve_options(
        {"new_tokens": "8", "cycles": "2", "output": str(tmp_path / "s.json")}, env={}
    )
    session = Session.prepare(options)
    cell = Cell("accelerate", "fp32", 1)
    assert session.measure_cell(cell).outcome is Outcome.OK
    runner = session.active
    assert runner is not None and runner.group is not None and runner.group.process is not None
    worker = runner.group.process.pid

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # what a signal handler raises in the middle of a request

    def interrupted_mid_cycle(one_cycle: object, warmup: int, cycles: int) -> list[float]:
        os.kill(worker, signal.SIGSTOP)  # busy: it will not read anything for a long while
        previous = signal.signal(signal.SIGALRM, interrupt)
        signal.alarm(2)
        try:
            return [one_cycle()]  # type: ignore[operator]
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    with pytest.raises(KeyboardInterrupt):
        runner.run_cell(2, interrupted_mid_cycle)
    # Stopped in a thread, waited for 10 s at most: a stop that waits for the worker fails at
    # the bound, not at the end of its wait.
    stopping = threading.Thread(target=runner.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=10)
    if stopping.is_alive():
        os.kill(worker, signal.SIGKILL)
        pytest.fail("stopping the runner waited for its busy worker")
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie"


@pytest.mark.parametrize("ending", ["finish", "abort"])
def test_the_disk_offload_folder_a_session_made_goes_with_it(tmp_path: Path, ending: str) -> None:
    from bloomperf.harness.options import resolve_options
    from bloomperf.harness.session import Session

    made = Session.prepare(resolve_options({"offload": "disk", "backends": "accelerate"}, env={}))
    folder = made.backend_options.offload_folder
    assert folder is not None and Path(folder).is_dir()
    getattr(made, ending)()
    assert not Path(folder).exists()
    given = tmp_path / "offload"
    given.mkdir()  # the user's own folder: never removed
    kept = Session.prepare(
        resolve_options({"offload": "disk", "offload_folder": str(given)}, env={})
    )
    getattr(kept, ending)()
    assert kept.backend_options.offload_folder == str(given) and given.is_dir()


def test_a_child_started_with_the_parent_death_signal_dies_with_its_sigkilled_parent(
    tmp_path: Path,
) -> None:
    """The kernel's part alone (no watch thread: no controller in the environment)."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from bloomperf.harness.orphans import die_with_parent\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
            "                         preexec_fn=die_with_parent, start_new_session=True)\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(120)\n",
        ],
        env={k: v for k, v in os.environ.items() if k != CONTROLLER_ENV},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    try:
        while psutil.pid_exists(child) and psutil.Process(child).status() != "zombie":
            assert time.monotonic() < deadline, "the child outlived its SIGKILLed parent"
            time.sleep(0.05)
    finally:  # a child that outlived it must not outlive the test as well
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def stamp_of(process: psutil.Process) -> str:
    """``CONTROLLER_ENV``'s stamp for ``process``, as ``controller_stamp`` writes its own."""
    start = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[19]
    return f"{process.pid}:{start}:{os.getpgid(process.pid)}"


def test_a_controller_is_alive_only_while_that_very_process_runs() -> None:
    """A controller SIGKILLed under a parent that has not reaped it yet is a zombie: dead, its
    groups must go. A PID reused by another process is not the controller."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stamp = stamp_of(psutil.Process(child.pid))
        assert controller_alive(stamp)
        pid, created, pgid = stamp.split(":")
        assert not controller_alive(f"{pid}:{int(created) - 500}:{pgid}")  # reused PID
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # not reaped yet
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not controller_alive(stamp)
    finally:
        child.kill()
        child.wait()
    assert not controller_alive(stamp)  # reaped: gone
    assert controller_alive("not a stamp")  # a stamp it cannot read is not its to judge


@pytest.mark.parametrize("step_s", [-3600.0, -1.0, 1.0, 86400.0])
def test_a_wall_clock_step_does_not_make_a_live_controller_or_owner_dead(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, step_s: float
) -> None:
    """NTP or a resumed VM moves the kernel's boot time (``btime``, which psutil adds to every
    process's start): a stamp or folder name written before the step still names the same live
    process after it, or the workers of a live controller would kill themselves."""
    from psutil import _pslinux

    from bloomperf.catalog.leftovers import dead_run_folders, owned_temp_folder
    from bloomperf.harness.orphans import controller_stamp

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stamp = controller_stamp()
    folder = owned_temp_folder("worker")
    booted, created = _pslinux.boot_time(), psutil.Process().create_time()
    monkeypatch.setattr(_pslinux, "boot_time", lambda: booted + step_s)
    assert psutil.Process().create_time() == pytest.approx(created + step_s)  # the step is seen
    assert controller_alive(stamp)
    assert dead_run_folders(tmp_path) == [] and folder.is_dir()


# A worker whose controller is gone: it starts a child that leaves its process group (as a JIT
# compiler may), prints the child's PID, then does what its controller watch does.
ORPHANED_WORKER = """
import subprocess, sys, time
from bloomperf.harness.orphans import kill_own_group
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
kill_own_group(sys.argv[1])
"""

# A shell: its own process group, with the worker started by hand inside it.
SHELL = """
import os, subprocess, sys
stamp = f"{sys.argv[2]}:1.000:{os.getpgrp()}"  # the dead controller was this shell's group
worker = subprocess.run([sys.executable, "-c", sys.argv[1], stamp], capture_output=True, text=True)
print(worker.returncode, worker.stdout.strip(), flush=True)
"""


def dead_pid() -> int:
    """The PID of a process that has exited and been reaped."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def test_an_orphaned_worker_kills_what_left_its_group_but_never_the_shells_group() -> None:
    """A worker started by hand from a shell shares the shell's group: when the controller it
    names is gone it kills its children (those that left the group too) and itself, not the
    shell. One started by a controller kills its whole group (the launcher's ranks)."""
    shell = subprocess.run(
        [sys.executable, "-c", SHELL, ORPHANED_WORKER, str(dead_pid())],
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert shell.returncode == 0, (shell.returncode, shell.stderr)  # the shell survived
    code, child = shell.stdout.split()
    assert code == "1"  # the worker ended itself
    assert wait_gone(int(child), 10), "a child that left the worker's group outlived it"


# A launcher: its own group (as bloomperf starts one), two ranks, then a worker in the group
# that finds the controller gone.
LAUNCHER = """
import subprocess, sys, time
ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
         for _ in range(2)]
print(" ".join(str(r.pid) for r in ranks), flush=True)
watch = ("import sys\\nfrom bloomperf.harness.orphans import kill_own_group\\n"
         "kill_own_group(sys.argv[1])")
subprocess.run([sys.executable, "-c", watch, sys.argv[1]])
time.sleep(120)
"""


def test_an_orphaned_worker_in_its_own_group_kills_the_group() -> None:
    stamp = f"{dead_pid()}:1.000:{os.getpgrp()}"  # the controller's group is this one
    group = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, stamp],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert group.stdout is not None
        ranks = [int(pid) for pid in group.stdout.readline().split()]
        assert group.wait(timeout=30) == -signal.SIGKILL  # the launcher went with its group
        assert all(wait_gone(pid, 10) for pid in ranks)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group.pid, signal.SIGKILL)
        group.wait()
