"""Bounds on time taken from this machine as it is now, not constants tuned on a quiet one.

A test whose point is "this stops soon" (a group after its cell timeout, a run after SIGTERM)
bounds the product's own waits (its limit and grace, imported from it) plus the time the work
around them takes here, now: a few starts of a process that imports the controller's modules,
measured beside the assertion. On a quiet 2-core machine a start takes about 0.5 s and the
work after a group's grace 0.02 s (docs/testing.md); under CI's three workers both grow with
the load, and so does the bound. A product that waits seconds longer than it says still fails
on a quiet machine, and a busy one no longer fails a product that does what it says.
"""

from __future__ import annotations

import subprocess
import sys
import time

# What the controller imports before it measures: the interpreter, bloomperf's session and
# the libraries under it (about 0.5 s on a quiet 2-core machine).
START = "import bloomperf.harness.session"
# How many such starts the work after the product's own waits may take: killing and reaping
# the group, saving the results file.
STARTS = 3


def start_s() -> float:
    """Wall seconds one such process takes to start, import and exit on this machine, now."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", START], check=True, capture_output=True)
    return time.monotonic() - started


def soon_after(wait_s: float) -> float:
    """How long "stops soon after the product's own ``wait_s``" may take here, now."""
    return wait_s + STARTS * start_s()
