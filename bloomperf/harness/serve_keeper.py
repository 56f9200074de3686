"""The keeper of a serving engine: the one process bloomperf starts for a server.

``python -m bloomperf.harness.serve_keeper -- ARGV`` runs ARGV (the server) as its child in its
own process group and watches the controller named in ``BLOOMPERF_CONTROLLER``. A server is not a
bloomperf worker, so it cannot watch the controller itself, and vLLM's engine core is a child the
kernel's parent-death signal does not reach: when the controller is gone (SIGKILLed: no code of
it runs), the keeper SIGKILLs its whole group (server, engine core, whatever they started) and
itself. The keeper has no parent-death signal of its own for that reason: dying with the
controller, it could not clean up after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from bloomperf.harness.orphans import (
    CONTROLLER_ENV,
    WATCH_INTERVAL_S,
    controller_alive,
    die_with_parent,
)


def kill_group() -> None:
    with contextlib.suppress(OSError):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(1)


def watch(stamp: str) -> None:
    while controller_alive(stamp):
        time.sleep(WATCH_INTERVAL_S)
    kill_group()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("serve_keeper: no server command after --", file=sys.stderr)
        return 2
    stamp = os.environ.get(CONTROLLER_ENV, "")
    if stamp:
        threading.Thread(target=watch, args=(stamp,), daemon=True).start()
    # The server dies with the keeper (SIGKILLed or not), and a SIGTERM to the group reaches it
    # directly; the keeper only waits and reports its exit status.
    server = subprocess.Popen(argv, preexec_fn=die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    code = server.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
