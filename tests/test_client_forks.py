"""The serving client's fork server (bloomperf/harness/client_forkserver.py): the client's
imports run once per interpreter, each run is a fork of their state, and nothing of it outlives
the controller. On stand-in clients (plain Python): the real client runs through it in
test_serving.py and test_serving_ab.py."""

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

from bloomperf.harness.client_forks import ClientCommand, close_fork_servers, fork_server
from bloomperf.harness.loadgen import RESULT_NAME, run_client
from tests.leftovers import marked_env, marked_processes, wait_gone

ROOT = Path(__file__).resolve().parent.parent

# The stand-in's one import notes each time it runs; its script says a line with its pid (its
# log), then writes the result the real client would.
NOTING = """
import os
with open(os.environ["PRELUDES"], "a") as note:
    note.write("ran\\n")
"""
SCRIPT = """
import json, os, sys
from pathlib import Path
import noting_import
print("run", os.getpid(), flush=True)
Path(sys.argv[1]).write_text(json.dumps({"duration": float(sys.argv[2]), "errors": []}))
"""


@pytest.fixture(autouse=True)
def preludes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in's import (on the fork server's path) and the file it notes its runs in."""
    (tmp_path / "noting_import.py").write_text(NOTING)
    notes = tmp_path / "preludes"
    monkeypatch.setenv("PRELUDES", str(notes))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    yield notes
    close_fork_servers()


def stand_in(tmp_path: Path, duration: float, script: str = SCRIPT) -> ClientCommand:
    """The stand-in client, its script written under ``tmp_path`` (named by its text)."""
    path = tmp_path / f"client-{abs(hash(script))}.py"
    path.write_text(script)
    args = (str(tmp_path / RESULT_NAME), str(duration))
    return ClientCommand(sys.executable, args, script=path, imports=("noting_import",))


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "own-process"])
def test_forked_runs_share_one_import_and_each_is_a_process_of_its_own(
    tmp_path: Path, preludes: Path, fork: bool
) -> None:
    """Runs forked by one fork server pay its imports once (an own process pays them every
    time), and each run is still a fresh process with its own output and result."""
    pids = []
    for index in range(4):
        log = tmp_path / f"client-{index}.log"
        run = run_client(stand_in(tmp_path, 0.25 * index), tmp_path, log, 60.0, fork=fork)
        assert run.duration_s == 0.25 * index
        words = log.read_text().split()
        assert words[0] == "run", log.read_text()
        pids.append(int(words[1]))
    assert len(set(pids)) == 4 and os.getpid() not in pids
    assert preludes.read_text().count("ran") == (1 if fork else 4)


def test_a_fork_that_fails_says_how_and_a_dead_fork_server_is_started_again(
    tmp_path: Path, preludes: Path
) -> None:
    crash = stand_in(tmp_path, 0.0, "raise ValueError('the client broke')")
    with pytest.raises(RuntimeError, match=r"code 1(.|\n)*ValueError: the client broke"):
        run_client(crash, tmp_path, tmp_path / "crash.log", 60.0, fork=True)
    quits = stand_in(tmp_path, 0.0, "import sys; sys.exit(3)")
    with pytest.raises(RuntimeError, match="code 3"):
        run_client(quits, tmp_path, tmp_path / "quits.log", 60.0, fork=True)
    # A run past its time is killed (the fork, not its server), and the next run goes on.
    hangs = stand_in(tmp_path, 0.0, "import time; time.sleep(60)")
    with pytest.raises(TimeoutError, match="client ran over 1 s"):
        run_client(hangs, tmp_path, tmp_path / "hangs.log", 1.0, fork=True)
    assert preludes.read_text().count("ran") == 1
    server = fork_server(stand_in(tmp_path, 0.0), tmp_path / "log", 60.0)
    server.process.kill()
    server.process.wait()
    run = run_client(stand_in(tmp_path, 0.5), tmp_path, tmp_path / "again.log", 60.0, fork=True)
    assert run.duration_s == 0.5 and preludes.read_text().count("ran") == 2


def test_a_fork_server_whose_imports_fail_is_one_error_with_its_log(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text("print('never run')")
    broken = ClientCommand(sys.executable, (), script, ("no_such_module_here",))
    with pytest.raises(RuntimeError, match=r"fork server exited(.|\n)*no_such_module_here"):
        run_client(broken, tmp_path, tmp_path / "client.log", 60.0, fork=True)


# A controller that starts a run which outlives it: the run sleeps; the controller says its
# fork server's pid and the run's, then returns (a normal exit) or waits to be killed.
CONTROLLER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from bloomperf.harness.client_forks import ClientCommand, fork_server
    script = Path(sys.argv[1])
    script.write_text("import time; time.sleep(120)")
    command = ClientCommand(sys.executable, (), script=script, imports=("time",))
    log = script.with_suffix(".log")
    server = fork_server(command, log, 60.0)
    run = server.start(command, log)
    print(json.dumps([server.process.pid, run.pid]), flush=True)
    if sys.argv[2] == "exit":
        run.kill()
        run.wait()
    else:
        time.sleep(120)
    """
)


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_nothing_of_the_client_outlives_its_controller(tmp_path: Path, ending: str) -> None:
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


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "own-process"])
def test_a_run_starts_in_its_folder_with_its_environment_and_path(
    tmp_path: Path, fork: bool
) -> None:
    """A run's ``cwd``, ``env`` and ``path`` hold alike forked and as a process of its own (the
    canaries run pytest in a mutated copy this way), and its module on ``path`` shadows ours."""
    here, first = tmp_path / "here", tmp_path / "first"
    here.mkdir()
    (first / "bloomperf").mkdir(parents=True)
    (first / "bloomperf" / "__init__.py").write_text("WHERE = 'the copy'\n")
    script = tmp_path / "where.py"
    script.write_text(
        "import json, os, sys\nfrom pathlib import Path\nimport bloomperf\n"
        "Path(sys.argv[1]).write_text(json.dumps({'duration': 0.0, 'errors': []}))\n"
        "print(json.dumps([os.getcwd(), os.environ['WHERE_ENV'], bloomperf.WHERE]))\n"
    )
    command = ClientCommand(
        sys.executable,
        (str(tmp_path / RESULT_NAME),),
        script,
        ("json",),
        cwd=str(here),
        env=(("WHERE_ENV", "set"),),
        path=(str(first),),
    )
    log = tmp_path / "client.log"
    run_client(command, tmp_path, log, 60.0, fork=fork)
    assert json.loads(log.read_text().splitlines()[-1]) == [str(here), "set", "the copy"]
    assert "WHERE_ENV" not in os.environ and os.getcwd() != str(here)
