"""A fork server, run by a tool's interpreter as a script (``python forkserver.py MODULE ...``):
it imports nothing of bloomperf. The canaries' pytest runs use it (``tests/forks.py`` is the
controller's side).

Why: a Python tool's imports (torch, transformers, pytest) cost seconds of CPU, paid again at
every run while the run itself may be shorter. Here the MODULEs are imported once; each run is a
fork of this process that runs the job's script as ``__main__`` with the run's arguments, so
every run starts from the same state, as a fresh process would. (vLLM's load client was run this
way once and read its stream in bursts: docs/serving.md.)

Protocol on stdin and stdout, one line each: this process says ``ready`` once its imports are
done; then, for each job read (JSON: ``script``, ``args``, ``log``; if given, ``cwd``, ``env``
and ``path``, the folders put first on ``sys.path``), it says the fork's pid, waits for it, and
says its exit code (negative: the signal that ended it). A fork's stdout and stderr go to the
job's log. The fork dies with this process, and this process with its parent (the controller
sets that) or when its stdin closes.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import runpy
import signal
import sys
import traceback
from typing import Any

PR_SET_PDEATHSIG = 1


def run_job(job: dict[str, Any], server: int) -> None:
    """In the fork: the job's output to its log, then its script with its arguments; never
    returns."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:  # the server died between the fork and the prctl
        os._exit(1)
    log = os.open(job["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # As ``cd CWD && env ENV python SCRIPT ARGS`` would start it (PATH: what PYTHONPATH gives).
    os.chdir(job.get("cwd") or ".")
    os.environ.update(job.get("env") or {})
    sys.path[:0] = job.get("path") or []
    sys.argv = [job["script"], *job["args"]]
    code = 0
    try:
        runpy.run_path(job["script"], run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def serve(modules: list[str]) -> None:
    for name in modules:
        importlib.import_module(name)
    # What the imports made is never collected in a fork: a fork's first full collection would
    # otherwise walk (and so copy, page by page) the whole inherited heap in the middle of its
    # timed run, a pause a fresh process's collection does not have.
    gc.freeze()
    server = os.getpid()
    say("ready")
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_job(job, server)
        say(str(pid))
        _, status = os.waitpid(pid, 0)
        say(str(os.waitstatus_to_exitcode(status)))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1:])
