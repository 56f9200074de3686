"""Apply each mutation canary in a scratch copy of the tree and require the named tests to fail.

A canary is a deliberate one-line bug in the real code (``mutations.py``). For each one this
script copies the tracked files to a temporary folder, replaces the original snippet (it must
occur exactly once, else the canary is *stale*: the code moved and the canary must follow it),
and runs the tests the canary names in one pytest process (no ``-x``), with ``PYTHONPATH``
leading to the copy so that the test process and every worker or rank it starts import the
mutant. The mutant must be *killed* by EACH named test: each of them fails, as read per test from
pytest's JUnit report (an error in a fixture, which pytest also exits 1 for, is no kill: the
canary is *broken*). A mutant that any named test passes *survived*: that test
claims more than it proves. Exit status: 0 every mutant killed; 1 a mutant survived, a canary is
stale, or its tests could not run (the reason is printed); 2 bad usage.

    .venv/bin/python tests/canaries/run.py [--jobs 3] [--timeout 300] [NAME ...]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(ROOT) not in sys.path:  # run as a script: for tests.forks
    sys.path.insert(1, str(ROOT))

from mutations import MUTATIONS, Mutation  # noqa: E402

from tests.forks import ForkServer, Job  # noqa: E402

# Virtual environments are not tracked; tests that run a tool from them find them through links.
LINKED = (".venv", ".venv-ref")


@dataclass(frozen=True)
class Verdict:
    name: str
    status: str  # killed | survived | stale | broken
    seconds: float
    detail: str = ""


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in listing.decode().split("\0") if name]


def copy_tree(scratch: Path) -> None:
    """The files git tracks or would track, as they are in the working tree (edits included)."""
    for name in tracked_files():
        source = ROOT / name
        target = scratch / name
        if source.is_symlink():  # baselines -> bloomperf/baselines: a test reads through it
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(source))
            continue
        if not source.is_file():
            continue  # deleted in the working tree
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for name in LINKED:
        if (ROOT / name).exists():
            (scratch / name).symlink_to(ROOT / name)


def apply(mutation: Mutation, scratch: Path) -> str | None:
    """Patch the copy; the reason it cannot be patched (stale), or None."""
    path = scratch / mutation.file
    if not path.is_file():
        return f"{mutation.file}: no such file"
    text = path.read_text()
    count = text.count(mutation.original)
    if count != 1:
        return f"{mutation.file}: the original snippet occurs {count} times (must be exactly once)"
    path.write_text(text.replace(mutation.original, mutation.replacement))
    return None


def environment(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(scratch) + (os.pathsep + rest if rest else "")
    # Compiled once into the copy (it goes with its folder), not again in every process the
    # canary's tests start: the mutant is written before anything imports it, and a copy has
    # no __pycache__ of the checkout's (git ignores them), so nothing compiled is stale.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Models built once for the checkout serve every mutant (conftest.py honours this).
    env.setdefault("BLOOMPERF_CACHE", str(ROOT / ".bloomperf-cache"))
    return env


def imports_the_copy(scratch: Path, env: dict[str, str]) -> str | None:
    """Why the copy's ``bloomperf`` is not the one Python imports, or None."""
    found = subprocess.run(
        [sys.executable, "-c", "import bloomperf; print(bloomperf.__file__)"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(scratch.resolve()):
        return f"python imports bloomperf from {found or '?'}, not from the mutated copy"
    return None


# What a pytest process of a canary imports before its first test (seconds of CPU each time):
# imported once by a fork server per job thread, whose forks run the canaries' pytest (a fork
# imports bloomperf and the tests afresh, from the mutated copy first on its path).
PRELOADED = ("torch", "transformers", "numpy", "scipy.stats", "hypothesis", "pytest", "psutil")
PYTEST_MAIN = Path(pytest.__file__).with_name("__main__.py")
_THREAD = threading.local()
_SERVERS: list[ForkServer] = []


def run_pytest(
    args: list[str], scratch: Path, env: dict[str, str], log: Path, limit: float
) -> int | None:
    """``python -m pytest ARGS`` in ``scratch`` with ``env`` (output to ``log``), forked by
    this thread's fork server: its exit code, or None past ``limit`` s (then killed)."""
    command = Job(
        sys.executable,
        tuple(args),
        PYTEST_MAIN,
        PRELOADED,
        cwd=str(scratch),
        env=tuple(env.items()),
        path=(str(scratch),),
    )
    server = getattr(_THREAD, "server", None)
    if server is None or not server.alive():
        own_log = Path(tempfile.mkstemp(prefix="canary-forkserver-", suffix=".log")[1])
        server = _THREAD.server = ForkServer(command, own_log)
        _SERVERS.append(server)
        server.wait_ready(600)
    run = server.start(command, log)
    try:
        return run.wait(limit)
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
        return None


def close_pytest_servers() -> None:
    """Stop every job thread's fork server (they would die with this process anyway)."""
    while _SERVERS:
        _SERVERS.pop().close()


def run_one(mutation: Mutation, timeout: float) -> Verdict:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"canary-{mutation.name}-") as folder:
        scratch = Path(folder)
        copy_tree(scratch)
        stale = apply(mutation, scratch)
        if stale:
            return Verdict(mutation.name, "stale", time.monotonic() - start, stale)
        env = environment(scratch)
        wrong = imports_the_copy(scratch, env)
        if wrong:
            return Verdict(mutation.name, "broken", time.monotonic() - start, wrong)
        # One pytest process for the named tests, read back per test from its JUnit report: a
        # canary that names two tests claims that EACH of them kills it (no -x, which would stop
        # at the first failure and prove only that one).
        report = scratch / ".canary-junit.xml"
        args = ["-q", "-p", "no:cacheprovider", "--hypothesis-profile", "canary"]  # conftest.py
        args += [f"--junitxml={report}", *mutation.tests]
        limit = timeout * len(mutation.tests)
        log = scratch / ".canary.log"
        code = run_pytest(args, scratch, env, log, limit)
        if code is None:
            return Verdict(
                mutation.name, "broken", time.monotonic() - start, f"ran over {limit:g} s"
            )
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        outcomes = junit_outcomes(report)
        survivors, killers = [], []
        for test in mutation.tests:
            outcome = outcome_of(outcomes, junit_key(test))
            if outcome == "failed":
                killers.append(test)
            elif outcome in ("passed", "skipped"):
                survivors.append(f"{test} {outcome} against the mutant:\n{tail}")
            else:
                # An error in a fixture is no kill: a test that never ran to its assertions
                # killed nothing (a file missing from the copy looked like a kill).
                detail = f"{test}: {outcome}, no test failed (pytest exit {code}):\n{tail}"
                return Verdict(mutation.name, "broken", time.monotonic() - start, detail)
    seconds = time.monotonic() - start
    if survivors:
        return Verdict(mutation.name, "survived", seconds, "\n".join(survivors))
    return Verdict(mutation.name, "killed", seconds, f"{len(killers)} failed")


def junit_key(node_id: str) -> tuple[str, str]:
    """A node id as pytest's JUnit report names it: (``tests.test_x[.Class]``, ``test[param]``)."""
    path, *rest = node_id.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *rest[:-1]]), rest[-1]


def outcome_of(outcomes: dict[tuple[str, str], str], key: tuple[str, str]) -> str:
    """A named test's outcome; a name without parameters stands for all its parametrized cases
    (as ``pytest NODE`` runs them): failed if any failed, else error if any errored."""
    found = [o for (cls, name), o in outcomes.items() if cls == key[0] and name == key[1]]
    if not found and "[" not in key[1]:
        prefix = key[1] + "["
        found = [
            o for (cls, name), o in outcomes.items() if cls == key[0] and name.startswith(prefix)
        ]
    for outcome in ("failed", "error", "passed", "skipped"):
        if outcome in found:
            return outcome
    return "not run"


def junit_outcomes(report: Path) -> dict[tuple[str, str], str]:
    """Each test case of a JUnit report: failed (a failure, a teardown error beside it is
    fine), error (an error alone: setup or collection), skipped or passed; {} if unreadable."""
    try:
        root = ElementTree.parse(report).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    rank = ("failed", "error", "skipped", "passed")
    outcomes: dict[tuple[str, str], str] = {}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        outcome = next((t for t in ("failure", "error", "skipped") if t in tags), "passed")
        outcome = {"failure": "failed"}.get(outcome, outcome)
        key = (case.get("classname", ""), case.get("name", ""))
        # pytest writes a teardown's error as a second testcase of the same name after the
        # failed call: the failure must not be overwritten by it.
        if key in outcomes:
            outcome = min(outcome, outcomes[key], key=rank.index)
        outcomes[key] = outcome
    return outcomes


def select(names: list[str]) -> list[Mutation]:
    known = {mutation.name: mutation for mutation in MUTATIONS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"canaries: error: unknown canary {unknown[0]!r} (see mutations.py)")
    return [known[name] for name in names] if names else list(MUTATIONS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="canaries to run (default: all)")
    parser.add_argument("--jobs", type=int, default=3, help="mutants tested at once (default 3)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutant")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs: must be at least 1")
    chosen = select(args.names)
    print(f"canaries: {len(chosen)} mutants, {args.jobs} at a time", flush=True)
    start = time.monotonic()
    verdicts = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, mutation, args.timeout) for mutation in chosen]
        try:
            for future in concurrent.futures.as_completed(futures):
                verdict = future.result()
                verdicts.append(verdict)
                print(f"  {verdict.status:8} {verdict.name} ({verdict.seconds:.0f} s)", flush=True)
                # Each one's reason as it comes: not only the last one's.
                if verdict.status != "killed":
                    print("    " + verdict.detail.replace("\n", "\n    "), flush=True)
        finally:
            close_pytest_servers()
    bad = [v for v in verdicts if v.status != "killed"]
    print(
        f"canaries: {len(verdicts) - len(bad)} of {len(verdicts)} killed in "
        f"{time.monotonic() - start:.0f} s"
        + (
            f"; NOT killed: {', '.join(sorted(v.name + ' (' + v.status + ')' for v in bad))}"
            if bad
            else ""
        ),
        flush=True,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
