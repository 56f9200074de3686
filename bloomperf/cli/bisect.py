"""`bloomperf bisect PACKAGE GOOD BAD`: find the first version of a package that made things slower.

The versions between GOOD and BAD come from the package index (``pip index versions``, with
``--index-url``/``--find-links``), or from the file names of a local wheelhouse given alone
(offline, and whatever pip is installed), in PEP 440 order,
pre-releases only with ``--pre``. Each tested version is an overlay of the current environment
(``bloomperf.harness.overlay``: ``pip install --no-deps`` into a cached folder) compared with GOOD's
overlay by ``bloomperf ab``'s interleaved measurement. BAD is tested first (if it is not slower
there is nothing to find); then a binary search keeps "last known not slower" and "first known
slower". A version that fails to install or run, or whose comparison stays inconclusive, is
skipped and reported, as ``git bisect skip`` does, and the search tries its neighbours.

Exit status: 0 when one first-slower version was found; 1 when none could be named (BAD is not
slower, or skipped versions leave several candidates); 2 for bad input.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER
from bloomperf.catalog.checkpoints import default_cache_dir
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.ab import add_comparison_arguments, comparison_settings, package_source
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import markdown_table
from bloomperf.core.jsonfile import write_json_atomic
from bloomperf.harness.interleave import Comparison, Settings
from bloomperf.harness.options import resolve_options
from bloomperf.harness.overlay import (
    Arm,
    InstallFailure,
    PackageSource,
    parse_settings,
    prepare_arm,
)
from bloomperf.harness.overlay import resolve_python as resolve_interpreter
from bloomperf.harness.session import Session, lock_key, resolve_device, utc_now
from bloomperf.store.results import Outcome

KIND = "bloomperf-bisect"
SCHEMA_VERSION = 1
SKIPPED = "skipped"


@dataclass(frozen=True)
class Step:
    """One tested version: its verdict against GOOD and the evidence (the worst cell)."""

    version: str
    verdict: str  # slower | same | faster | inconclusive | skipped
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    message: str = ""
    results: str | None = None
    busy: bool = False  # inconclusive because the machine was busy (the message has figures)


@dataclass(frozen=True)
class Finding:
    """Where the search ended: the last version not slower, the first slower, the skipped."""

    last_good: str
    first_bad: str | None
    ambiguous: tuple[str, ...]
    reason: str


FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def list_versions(
    package: str, source: PackageSource, pre: bool, python: str = sys.executable
) -> list[Version]:
    """Every version of ``package`` the index offers, ascending (PEP 440 order)."""
    if source.find_links and not source.index_url:
        texts = versions_in_folders(package, source.find_links)
    else:
        texts = versions_from_pip(package, source, python)
    if not texts:
        raise BloomperfError(f"{package}: the index lists no versions")
    found = []
    for text in texts:
        try:
            version = Version(text)
        except InvalidVersion:
            continue  # not PEP 440: cannot be ordered
        if pre or not version.is_prerelease:
            found.append(version)
    return sorted(set(found))


def versions_in_folders(package: str, folders: tuple[str, ...]) -> list[str]:
    """The versions of ``package`` among the wheels and sdists of local ``--find-links`` folders,
    read from their file names (what pip reads there), whatever pip is installed."""
    wanted = canonicalize_name(package)
    found = []
    for folder in folders:
        path = Path(folder)
        for file in sorted(path.iterdir()) if path.is_dir() else ():
            try:
                if file.name.endswith(".whl"):
                    name, version, _, _ = parse_wheel_filename(file.name)
                elif file.name.endswith((".tar.gz", ".zip")):
                    name, version = parse_sdist_filename(file.name)
                else:
                    continue
            except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
                continue
            if name == wanted:
                found.append(str(version))
    return found


def versions_from_pip(package: str, source: PackageSource, python: str) -> list[str]:
    """The versions the index offers, asked of bloomperf's own pip, for ``python`` (``pip
    --python``, as the overlays are installed), never of the pip ``python``'s venv may or may not
    have: ``pip index`` is experimental and its ``--json`` younger than many venvs' pip. A
    requirement no version can meet makes pip list every version it found, in the message every
    pip release prints ("from versions: ...")."""
    impossible = f"{package}===bloomperf-no-such-version"
    command = [sys.executable, "-m", "pip"]
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        command += ["--python", python]
    command += ["download", "--no-deps", "--pre", "--dest", os.devnull]
    command += ["--disable-pip-version-check", "--no-input", *source.pip_args()]
    done = subprocess.run([*command, impossible], capture_output=True, text=True, check=False)
    listed = FROM_VERSIONS.search(done.stderr + done.stdout)
    texts = [] if listed is None else [t.strip() for t in listed.group(1).split(",")]
    texts = [t for t in texts if t and t != "none"]
    if not texts:
        output = (done.stderr or done.stdout).strip().splitlines()
        reason = next((line for line in output if line.startswith("ERROR:")), output[-1:] or [""])
        raise BloomperfError(f"{package}: the index lists no versions ({str(reason)[:200]})")
    return texts


def versions_between(available: list[Version], good: str, bad: str) -> list[Version]:
    """GOOD, the versions between, and BAD; both ends must be offered by the index."""
    try:
        first, last = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise BloomperfError(f"bisect: {exc}") from None
    for name, version in (("GOOD", first), ("BAD", last)):
        if version not in available:
            raise BloomperfError(
                f"bisect: {name} {version} is not in the index ({nearest(available, version)}; "
                "pip lists no yanked version)"
            )
    if not first < last:
        raise BloomperfError(f"bisect: GOOD {good} must be an earlier version than BAD {bad}")
    return [v for v in available if first <= v <= last]


def nearest(available: list[Version], version: Version) -> str:
    """The versions the index offers next to ``version``, below and above it: what to use
    instead (not the newest ones, which say nothing about the range asked for)."""
    below = [v for v in available if v < version][-3:]
    above = [v for v in available if v > version][:3]
    parts = [
        f"{side}: {', '.join(str(v) for v in found)}"
        for side, found in (("nearest below", below), ("nearest above", above))
        if found
    ]
    return "; ".join(parts) or "it lists none"


def search(versions: list[str], test: Callable[[str], Step]) -> tuple[Finding, list[Step]]:
    """Binary search for the first version slower than ``versions[0]`` (GOOD), BAD first."""
    steps = [test(versions[-1])]
    if steps[0].verdict == SKIPPED:
        # BAD itself cannot be installed or started: the input is wrong, not a finding (2).
        raise BloomperfError(f"bisect: BAD {versions[-1]} cannot be tested: {steps[0].message}")
    if steps[0].verdict != SLOWER:
        why = f"{INCONCLUSIVE}: the machine was busy" if steps[0].busy else steps[0].verdict
        reason = f"BAD {versions[-1]} is not slower than GOOD ({why})"
        return Finding(versions[0], None, (), reason), steps
    good, bad = 0, len(versions) - 1
    skipped: set[int] = set()
    while True:
        candidates = [i for i in range(good + 1, bad) if i not in skipped]
        if not candidates:
            break
        middle = (good + bad) / 2
        index = min(candidates, key=lambda i: (abs(i - middle), i))
        step = test(versions[index])
        steps.append(step)
        if step.verdict == SLOWER:
            bad = index
        elif step.verdict in (SAME, FASTER):
            good = index
        else:
            skipped.add(index)
    ambiguous = tuple(versions[i] for i in sorted(skipped) if good < i < bad)
    reason = "found" if not ambiguous else "skipped versions leave several candidates"
    return Finding(versions[good], versions[bad], ambiguous, reason), steps


def step_from(version: str, comparisons: list[Comparison], results: Path | None) -> Step:
    """A version's verdict: slower if any cell is slower; same/faster only if every cell is."""
    failed = [c for c in comparisons if c.outcome not in (Outcome.OK, Outcome.SKIPPED)]
    judged = [c for c in comparisons if c.outcome is Outcome.OK and c.estimate is not None]
    where = str(results) if results else None
    if failed:
        return Step(version, SKIPPED, message=f"did not run: {failed[0].message}", results=where)
    busy = [c for c in comparisons if c.outcome is Outcome.OK and c.busy_verdict]
    if not judged and busy:
        return Step(version, INCONCLUSIVE, message=busy_reason(busy[0]), results=where, busy=True)
    if not judged:
        return Step(version, SKIPPED, message="no cell was measured", results=where)
    verdicts = {c.verdict for c in judged}
    worst = max(judged, key=lambda c: c.estimate.ratio if c.estimate else 0.0)
    if SLOWER in verdicts:
        verdict = SLOWER
        worst = max(
            (c for c in judged if c.verdict == SLOWER),
            key=lambda c: c.estimate.ratio if c.estimate else 0.0,
        )
    elif INCONCLUSIVE in verdicts:
        verdict = INCONCLUSIVE
    else:
        verdict = FASTER if verdicts == {FASTER} else SAME
    estimate = worst.estimate
    assert estimate is not None
    why = busy_reason(busy[0]) if verdict == INCONCLUSIVE and busy else ""
    return Step(
        version,
        verdict,
        estimate.ratio,
        estimate.low,
        estimate.high,
        estimate.pairs,
        message=why or worst.cell.id,
        results=where,
        busy=bool(why),
    )


def busy_reason(comparison: Comparison) -> str:
    """Why a version's comparison stayed inconclusive on a busy machine, in a few words."""
    busy = comparison.busy
    clean = f"{busy.clean} of {busy.pairs} pairs clean" if busy else "pairs set aside"
    return f"{comparison.cell.id}: machine busy, {clean}"


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bisect",
        help="find the first version of a package that is slower than GOOD",
        description="Bisect the index's versions of PACKAGE between GOOD and BAD with "
        "interleaved A/B comparisons against GOOD (each version a cached overlay).",
    )
    parser.add_argument("package", help="the package to bisect, as pip names it (e.g. torch)")
    parser.add_argument("good", metavar="GOOD", help="a version known to be fast enough")
    parser.add_argument("bad", metavar="BAD", help="a later version known to be slower")
    parser.add_argument("--pre", action="store_true", help="include pre-releases")
    parser.add_argument("--python", help="interpreter or venv under test [this interpreter]")
    parser.add_argument(
        "--env",
        action="append",
        metavar="KEY=VALUE",
        help="setting for both arms, repeatable [none]",
    )
    add_comparison_arguments(parser)
    parser.set_defaults(func=bisect_command)


def bisect_command(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr  # read at call time, not at import
    options = resolve_options(vars(args))
    topology = detect_topology()
    settings = comparison_settings(args, options, resolve_device(options.device, topology))
    source = package_source(args)
    python = resolve_interpreter(args.python, "--python") if args.python else sys.executable
    settings_env = parse_settings(args.env, "--env")
    versions = versions_between(
        list_versions(args.package, source, args.pre, python), args.good, args.bad
    )
    names = [str(v) for v in versions]
    cache_dir = options.cache_dir or default_cache_dir()
    output = options.output or Path("results") / (
        f"bloomperf-bisect-{args.package}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    )
    print(
        f"bloomperf bisect: {args.package} {', '.join(names)} "
        f"({len(names) - 2} between GOOD and BAD)",
        file=err,
    )
    good_arm = prepare_arm(
        "a", python, settings_env, (f"{args.package}=={args.good}",), source, cache_dir
    )
    document: dict[str, Any] = {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "started_at": utc_now(),
        "package": args.package,
        "good": args.good,
        "bad": args.bad,
        "versions": names,
        "steps": [],
        "complete": False,
    }
    write_json_atomic(output, document)
    from bloomperf.harness.lock import hold_device_lock

    with hold_device_lock(lock_key(topology, options), enabled=not options.no_lock):
        session = Session.prepare(replace(options, output=None), topology)

        def test(version: str) -> Step:
            print(f"bloomperf bisect: testing {args.package} {version}", file=err, flush=True)
            step = compare_version(
                args.package, version, good_arm, source, cache_dir, session, settings, output, err
            )
            print(f"  {describe_step(step)}", file=err, flush=True)
            document["steps"].append(asdict(step))
            write_json_atomic(output, document)
            return step

        result, steps = search(names, test)
    document.update(
        finished_at=utc_now(),
        complete=True,
        last_good=result.last_good,
        first_slower=result.first_bad,
        ambiguous=list(result.ambiguous),
    )
    write_json_atomic(output, document)
    print(render_steps(steps, settings), file=out)
    print(conclusion(args.package, result), file=out)
    print(f"results: {output}", file=out)
    return 0 if result.first_bad is not None and not result.ambiguous else 1


def compare_version(
    package: str,
    version: str,
    good: Arm,
    source: PackageSource,
    cache_dir: Path,
    session: Session,
    settings: Settings,
    output: Path,
    err: TextIO,
) -> Step:
    """Compare one version's overlay with GOOD's; an install or run failure is a skip."""
    from bloomperf.cli.ab import compare_arms

    results = output.with_name(f"{output.stem}.{version}.ab.json")
    try:
        arm = prepare_arm(
            "b", good.python, good.settings, (f"{package}=={version}",), source, cache_dir
        )
    except InstallFailure as failure:
        return Step(version, SKIPPED, message=str(failure).splitlines()[0][:300])
    comparisons = compare_arms(session, good, arm, settings, results, err)
    return step_from(version, comparisons, results)


def describe_step(step: Step) -> str:
    if step.ratio is None:
        return f"{step.version}: {step.verdict} ({step.message})"
    return (
        f"{step.version}: {step.verdict}, B/A {step.ratio:.3f} "
        f"[{step.low:.3f}, {step.high:.3f}] over {step.pairs} pairs ({step.message})"
    )


def render_steps(steps: list[Step], settings: Settings) -> str:
    level = f"{settings.look_confidence * 100:.2f} %"
    header = ["version", "verdict vs GOOD", "B/A", f"{level} interval", "pairs", "cell / reason"]
    rows = []
    for step in sorted(steps, key=lambda s: Version(s.version)):
        figures = (
            [f"{step.ratio:.3f}", f"[{step.low:.3f}, {step.high:.3f}]", str(step.pairs)]
            if step.ratio is not None
            else ["–", "–", "–"]
        )
        rows.append([step.version, step.verdict, *figures, step.message])
    return "\n".join(markdown_table(header, rows))


def conclusion(package: str, result: Finding) -> str:
    if result.first_bad is None:
        return f"no culprit: {result.reason}"
    if result.ambiguous:
        candidates = ", ".join([*result.ambiguous, result.first_bad])
        return (
            f"first slower version of {package}: one of {candidates} (after {result.last_good}; "
            f"{result.reason})"
        )
    return (
        f"first slower version of {package}: {result.first_bad} "
        f"(last not slower: {result.last_good})"
    )
