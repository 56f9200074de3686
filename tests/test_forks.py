"""The canaries' fork server (tests/forkserver.py, tests/forks.py): the imports run once per
server, each run is a fork of their state in its own folder, environment and path, a run's
failure or hang is its own, and nothing of it outlives the controller. On stand-in scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.forks import ForkServer, Job
from tests.leftovers import marked_env, marked_processes, wait_gone

ROOT = Path(__file__).resolve().parent.parent

# The stand-in's one import notes each time it runs; its script says a line with its pid (its
# log) and the argument it was given.
NOTING = """
import os
with open(os.environ["PRELUDES"], "a") as note:
    note.write("ran\\n")
"""
SCRIPT = """
import os, sys
import noting_import
print("run", os.getpid(), sys.argv[1], flush=True)
"""


@pytest.fixture(autouse=True)
def preludes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's import (on the fork server's path) and the file it notes its runs in."""
    (tmp_path / "noting_import.py").write_text(NOTING)
    notes = tmp_path / "preludes"
    monkeypatch.setenv("PRELUDES", str(notes))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return notes


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    started = ForkServer(stand_in(tmp_path), tmp_path / "server.log")
    started.wait_ready(60)
    yield started
    started.close()


def stand_in(tmp_path: Path, script: str = SCRIPT, args: tuple[str, ...] = ("x",)) -> Job:
    """The stand-in's job, its script written under ``tmp_path`` (named by its text)."""
    path = tmp_path / f"script-{abs(hash(script))}.py"
    path.write_text(script)
    return Job(sys.executable, args, script=path, imports=("noting_import",))


def test_runs_share_one_import_and_each_is_a_process_of_its_own(
    tmp_path: Path, preludes: Path, server: ForkServer
) -> None:
    pids = []
    for index in range(4):
        log = tmp_path / f"run-{index}.log"
        assert server.start(stand_in(tmp_path, args=(str(index),)), log).wait(60) == 0
        words = log.read_text().split()
        assert words[0] == "run" and words[2] == str(index), log.read_text()
        pids.append(int(words[1]))
    assert len(set(pids)) == 4 and os.getpid() not in pids and server.process.pid not in pids
    assert preludes.read_text().count("ran") == 1


def test_a_run_that_fails_says_how_and_a_hung_one_is_killed_alone(
    tmp_path: Path, preludes: Path, server: ForkServer
) -> None:
    crash = stand_in(tmp_path, "raise ValueError('the script broke')")
    assert server.start(crash, tmp_path / "crash.log").wait(60) == 1
    assert "ValueError: the script broke" in (tmp_path / "crash.log").read_text()
    quits = stand_in(tmp_path, "import sys; sys.exit(3)")
    assert server.start(quits, tmp_path / "quits.log").wait(60) == 3
    hung = server.start(stand_in(tmp_path, "import time; time.sleep(60)"), tmp_path / "h.log")
    with pytest.raises(subprocess.TimeoutExpired):
        hung.wait(1.0)
    hung.kill()
    assert hung.wait(60) == -signal.SIGKILL and server.alive()
    assert server.start(stand_in(tmp_path), tmp_path / "next.log").wait(60) == 0
    assert preludes.read_text().count("ran") == 1


def test_a_dead_fork_server_is_seen_dead_and_its_run_ends_killed(
    tmp_path: Path, server: ForkServer
) -> None:
    run = server.start(stand_in(tmp_path, "import time; time.sleep(60)"), tmp_path / "h.log")
    server.process.kill()
    server.process.wait()
    assert not server.alive() and run.wait(60) == -signal.SIGKILL
    assert wait_gone(run.pid)


def test_a_fork_server_whose_imports_fail_is_one_error_with_its_log(tmp_path: Path) -> None:
    broken = Job(sys.executable, (), tmp_path / "never.py", ("no_such_module_here",))
    server = ForkServer(broken, tmp_path / "server.log")
    with pytest.raises(RuntimeError, match=r"fork server exited(.|\n)*no_such_module_here"):
        server.wait_ready(60)


def test_a_run_starts_in_its_folder_with_its_environment_and_path(
    tmp_path: Path, server: ForkServer
) -> None:
    """A run's ``cwd``, ``env`` and ``path`` hold (the canaries run pytest in a mutated copy
    this way), its module on ``path`` shadows ours, and the server keeps its own."""
    here, first = tmp_path / "here", tmp_path / "first"
    here.mkdir()
    (first / "bloomperf").mkdir(parents=True)
    (first / "bloomperf" / "__init__.py").write_text("WHERE = 'the copy'\n")
    script = tmp_path / "where.py"
    script.write_text(
        "import json, os\nimport bloomperf\n"
        "print(json.dumps([os.getcwd(), os.environ['WHERE_ENV'], bloomperf.WHERE]))\n"
    )
    job = Job(
        sys.executable,
        (),
        script,
        ("noting_import",),
        cwd=str(here),
        env=(("WHERE_ENV", "set"),),
        path=(str(first),),
    )
    for index in range(2):  # the second fork starts from the server's state, not the first's
        log = tmp_path / f"where-{index}.log"
        assert server.start(job, log).wait(60) == 0, log.read_text()
        assert json.loads(log.read_text().splitlines()[-1]) == [str(here), "set", "the copy"]
    assert "WHERE_ENV" not in os.environ and os.getcwd() != str(here)


# A controller that starts a run which outlives it: the run sleeps; the controller says its
# fork server's pid and the run's, then returns (a normal exit) or waits to be killed.
CONTROLLER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from tests.forks import ForkServer, Job
    script = Path(sys.argv[1])
    script.write_text("import time; time.sleep(120)")
    job = Job(sys.executable, (), script=script, imports=("time",))
    log = script.with_suffix(".log")
    server = ForkServer(job, log)
    server.wait_ready(60)
    run = server.start(job, log)
    print(json.dumps([server.process.pid, run.pid]), flush=True)
    if sys.argv[2] == "exit":
        run.kill()
        run.wait()
    else:
        time.sleep(120)
    """
)


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_nothing_of_a_run_outlives_its_controller(tmp_path: Path, ending: str) -> None:
    """A controller that exits leaves no fork server (its stdin closes); one SIGKILLed leaves
    neither the server nor a running fork (the kernel's parent-death signals)."""
    mark = tmp_path / "mark"
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(tmp_path / "sleeps.py"), ending],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=marked_env(mark),
    )
    assert controller.stdout is not None
    server_pid, run_pid = json.loads(controller.stdout.readline())
    if ending == "sigkill":
        os.kill(controller.pid, signal.SIGKILL)
    assert controller.wait(timeout=60) == (0 if ending == "exit" else -signal.SIGKILL)
    assert wait_gone(server_pid) and wait_gone(run_pid)
    assert not marked_processes(mark)
