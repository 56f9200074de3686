"""Test-only: hold a bloomperf worker at its start, so that a test can stop a run while its
group is loading as an event, not a race against the clock.

With ``BLOOMPERF_TEST_HOLD=PATH`` and this folder on ``PYTHONPATH``, a process started as
``python -m bloomperf.harness.worker`` writes ``PATH.reached`` and then waits until someone
opens ``PATH`` (a FIFO) for writing; any other process (the controller) goes on at once.
"""

import os

_hold = os.environ.get("BLOOMPERF_TEST_HOLD")
if _hold:
    with open("/proc/self/cmdline", "rb") as _cmdline:
        _words = _cmdline.read().split(b"\0")
    if b"bloomperf.harness.worker" in _words:
        # Written aside, then renamed: the test never sees the marker without the pid in it.
        with open(_hold + ".reaching", "w") as _reached:
            _reached.write(str(os.getpid()))
        os.replace(_hold + ".reaching", _hold + ".reached")
        with open(_hold, "rb"):  # blocks until a writer opens the FIFO
            pass
