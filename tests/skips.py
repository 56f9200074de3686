"""No silent skip in CI: the one reviewed list of the skips CI may show, and the hooks that hold
every other skip to be a failure under ``CI`` (a pytest plugin, loaded by the root conftest).

A skip hides a test that proves nothing on this run. On a developer's machine that is fine (no
DeepSpeed, no GPU); in CI it is not, except where the machine cannot run the test at all: the
GPU-only tests on the CPU runner. Each entry below says why it may skip and on which machines;
every other skip under ``CI`` is made a failure where it happens (a test's report, or a file's
collection, such as a module-level ``importorskip``), so it shows in the summary as one. At the
end of the session (on the controller, with pytest-xdist too) the skips are counted per entry,
printed, and any skip the list does not name fails the session even if a hook missed it.
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class AllowedSkip:
    """A skip CI may show: its reason (a regular expression searched in the skip's reason) and
    why that is not a hole, for the reviewer."""

    pattern: str
    why: str
    gpu_only: bool = True  # allowed only where no CUDA GPU is visible


ALLOWED = (
    AllowedSkip(r"^no GPU: ", "the GPU matrix cells and the live NVML checks (nightly GPU run)"),
    AllowedSkip(r"^needs a CUDA GPU$", "CUDA synchronisation around a queued kernel (nightly)"),
    # The reference profile pins transformers 4.43.4 (the blog's stack); int8 on CPU runs in the
    # current profile's matrix.
    AllowedSkip(
        r"^int8 on CPU needs transformers >= 4\.45 ", "the reference profile's int8 cells", False
    ),
)


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


@functools.cache
def has_gpu() -> bool:
    import torch  # the suite imports it anyway; only asked when a GPU-only skip is seen

    return bool(torch.cuda.is_available())


def skip_reason(report: Any) -> str:
    """The reason pytest gives for a skipped report: ``(path, line, "Skipped: why")``."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def allowance(reason: str) -> AllowedSkip | None:
    """The entry that allows a skip for ``reason`` on this machine, if any."""
    for entry in ALLOWED:
        if re.search(entry.pattern, reason) and not (entry.gpu_only and has_gpu()):
            return entry
    return None


def refused(reason: str) -> str:
    return f"skipped under CI, and tests/skips.py does not allow it: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if allowance(reason) is None:
            report.outcome = "failed"
            report.longrepr = refused(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:  # a module-level importorskip or skip(allow_module_level)
        reason = skip_reason(report)
        if allowance(reason) is None:
            report.outcome = "failed"
            report.longrepr = refused(reason)


SESSION = pytest.StashKey[pytest.Session]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION] = session


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Count the session's skips per entry (the controller sees every worker's reports)."""
    if not in_ci() or hasattr(config, "workerinput"):
        return
    counts: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = skip_reason(report)
        entry = allowance(reason)
        counts[entry.pattern if entry else f"NOT ALLOWED: {reason}"] += 1
    terminalreporter.write_sep("-", f"skips under CI: {sum(counts.values())} (tests/skips.py)")
    for what, count in sorted(counts.items()):
        terminalreporter.write_line(f"{count:5d}  {what}")
    if any(what.startswith("NOT ALLOWED") for what in counts):
        # Read by pytest as the exit status after this hook (its sessionfinish runs it last).
        config.stash[SESSION].exitstatus = pytest.ExitCode.TESTS_FAILED
