"""Tearing a worker group down (``bloomperf.harness.teardown``) on real processes and folders:
the signal each step sends, who it reaches, and what of the group's folder stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from bloomperf.harness.orphans import CONTROLLER_ENV, HELD_ENV, survivors
from bloomperf.harness.teardown import kill_tree, remove_folder, terminate_group
from tests.leftovers import wait_gone

# A group leader that says which signal ended it, and a child that left its group.
LEADER = """
import signal, subprocess, sys, time
def said(number, frame):
    open(sys.argv[1], "w").write(signal.Signals(number).name)
    sys.exit(0)
for name in ("SIGTERM", "SIGINT", "SIGHUP"):
    signal.signal(getattr(signal, name), said)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def start_leader(said: Path) -> tuple[subprocess.Popen[bytes], int]:
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(said)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    return leader, int(leader.stdout.readline())


def test_the_grace_step_sends_sigterm_and_waits_for_the_leader(tmp_path: Path) -> None:
    said = tmp_path / "signal"
    leader, child = start_leader(said)
    try:
        terminate_group(leader, grace_s=30)
        assert leader.returncode == 0  # it handled the signal and exited within the grace
        assert said.read_text() == "SIGTERM"
    finally:
        kill_tree(leader)
        os.kill(child, signal.SIGKILL)


def test_the_kill_reaches_the_group_and_what_left_it(tmp_path: Path) -> None:
    leader, child = start_leader(tmp_path / "signal")
    kill_tree(leader)
    assert leader.returncode == -signal.SIGKILL
    assert wait_gone(child), "a child that left the group outlived the kill"
    kill_tree(leader)  # twice is harmless


# A child, in its leader's group, that starts a grandchild which leaves it: found by parentage.
CHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              start_new_session=True)
print(grandchild.pid, flush=True)
time.sleep(120)
"""
GRANDPARENT = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE)
print(child.stdout.readline().decode().strip(), flush=True)
time.sleep(120)
"""


def test_the_kill_reaches_a_grandchild_that_left_the_group_and_no_bystander() -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    leader = subprocess.Popen(
        [sys.executable, "-c", GRANDPARENT], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    try:
        kill_tree(leader)
        assert wait_gone(grandchild), "a grandchild that left the group outlived the kill"
        assert bystander.poll() is None, "the kill reached a process outside the group"
    finally:
        bystander.kill()
        bystander.wait()
        if psutil.pid_exists(grandchild):
            os.kill(grandchild, signal.SIGKILL)


IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
"""


def test_the_grace_step_gives_up_on_a_leader_that_ignores_sigterm() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    leader.stdout.readline()  # its handler is in place
    # Far past the grace: a step that waited on regardless returns only once this kills it.
    watchdog = threading.Timer(30, leader.kill)
    watchdog.start()
    try:
        terminate_group(leader, grace_s=0.2)
        assert leader.poll() is None, "the grace step waited past its grace"
    finally:
        watchdog.cancel()
        kill_tree(leader)


def test_a_folder_already_gone_is_no_error(tmp_path: Path) -> None:
    remove_folder(tmp_path / "gone")
    remove_folder(tmp_path / "gone", keep=tmp_path / "gone" / "worker.log")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("keep", [None, "worker.log", "outside"])
def test_the_groups_folder_goes_but_a_kept_log(tmp_path: Path, keep: str | None) -> None:
    folder = tmp_path / "group"
    (folder / "sub" / "deeper").mkdir(parents=True)
    for name in ("worker.log", "control.sock", "sub/deeper/x.bin"):
        (folder / name).write_text(name)
    outside = tmp_path / "results.json"
    outside.write_text("{}")
    (folder / "link").symlink_to(outside)  # links are removed as links, never followed
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "model.bin").write_text("weights")
    (folder / "cache-link").symlink_to(tmp_path / "cache")
    kept = None if keep is None else (outside if keep == "outside" else folder / keep)
    remove_folder(folder, keep=kept)
    if keep == "worker.log":
        assert [p.name for p in folder.iterdir()] == ["worker.log"]
        assert (folder / "worker.log").read_text() == "worker.log"
    else:
        assert not folder.exists()
    assert outside.read_text() == "{}"
    assert (tmp_path / "cache" / "model.bin").read_text() == "weights"


def test_a_dead_controllers_zombie_is_no_survivor(tmp_path: Path) -> None:
    """A process of a dead controller's group that has exited but not been reaped holds no
    device: the next run must not wait for it or refuse to start."""
    gone_controller = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_controller.wait()
    env = {
        **os.environ,
        CONTROLLER_ENV: f"{gone_controller.pid}:1.000:{os.getpgrp()}",
        HELD_ENV: "cuda:7,cuda:8",
    }
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    try:
        deadline = time.monotonic() + 30
        while worker.pid not in survivors({"cuda:8"}):  # it runs: a survivor
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert worker.pid not in survivors({"cuda:9"})  # not on these devices
        worker.kill()
        while psutil.Process(worker.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert worker.pid not in survivors({"cuda:8"})
    finally:
        worker.kill()
        worker.wait()


# A process that leads a group of its own, as a reused PID's new owner would.
NEW_LEADER = "import os, time; os.setsid(); open(os.sys.argv[1], 'w').close(); time.sleep(60)"


def start_with_pid(pid: int, ready: Path) -> subprocess.Popen[bytes] | None:
    """A new group leader given ``pid`` (the kernel's next PID set through ``ns_last_pid``, which
    needs root); None when another process took that number first."""
    try:
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    except OSError:
        pytest.skip("setting the next PID (ns_last_pid) needs root")
    process = subprocess.Popen([sys.executable, "-c", NEW_LEADER, str(ready)])
    if process.pid == pid:
        return process
    process.kill()
    process.wait()
    return None


def test_a_reaped_groups_id_held_by_another_process_is_left_alone(tmp_path: Path) -> None:
    """Once a group's leader is reaped, its PID (the group's id) can be given to a process that
    leads a group of its own; tearing the old group down again, or late, must not signal that
    one (a second worker's DeepSpeed launcher got SIGTERM this way in CI)."""
    old = subprocess.Popen(["true"], start_new_session=True)
    old.wait()
    ready = tmp_path / "ready"
    for _ in range(20):
        new = start_with_pid(old.pid, ready)
        if new is not None:
            break
    else:
        pytest.fail(f"PID {old.pid} never came round again in 20 tries")
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.getpgid(new.pid) == old.pid  # the old group's id is the new group's now
        terminate_group(old, grace_s=0.5)
        kill_tree(old)
        # A signal lands asynchronously: the new owner must still be running 2 s later.
        with pytest.raises(subprocess.TimeoutExpired):
            new.wait(timeout=2)
    finally:
        new.kill()
        new.wait()
