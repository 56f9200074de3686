"""The environments ``bloomperf ab`` compares: an interpreter, settings, and pinned packages.

An arm is a Python interpreter (or a venv folder), ``KEY=VALUE`` environment settings, and
optional pins (``transformers==4.46.0``). Pins are installed with ``pip install --no-deps
--target`` into a cached overlay folder, ``<cache>/overlays/<hash>``, that is put first on the
arm's ``PYTHONPATH``: the arm sees the pinned versions over its own site-packages, nothing else
changes, and the next run with the same pins reuses the folder. A small bootstrap
``sitecustomize`` makes the overlay a site directory, so its ``.pth`` files run as they would in
site-packages, then runs the ``sitecustomize`` it hides (the user's, if any).

The fingerprint of an arm is read by running its interpreter with its environment, so it lists
what the worker processes will really import.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bloomperf
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import write_text_atomic

OVERLAY_ENV = "BLOOMPERF_OVERLAY"
PIP_OUTPUT_TAIL = 1500

BOOTSTRAP = '''"""bloomperf overlay bootstrap (generated): make the overlay a site directory,
so that its .pth files run as in site-packages, then run the sitecustomize this one hides."""
import importlib.machinery
import importlib.util
import os
import site
import sys

_here = os.path.dirname(os.path.abspath(__file__))
for _folder in filter(None, os.environ.get("BLOOMPERF_OVERLAY", "").split(os.pathsep)):
    site.addsitedir(_folder)
for _entry in list(sys.path):
    if os.path.abspath(_entry or ".") == _here:
        continue
    _spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [_entry or "."])
    if _spec is not None and _spec.loader is not None:
        _module = importlib.util.module_from_spec(_spec)
        sys.modules["sitecustomize"] = _module
        _spec.loader.exec_module(_module)
        break
'''

# Runs inside an arm: what it imports. Distributions are listed in sys.path order, so an
# overlay's version of a package is seen before the one in site-packages.
FINGERPRINT_SCRIPT = """
import importlib.metadata as metadata, json, platform, re, sys
packages = {}
for dist in metadata.distributions():
    name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
    if name and name not in packages:
        packages[name] = dist.version
print(json.dumps({"python": platform.python_version(), "executable": sys.executable,
                  "packages": dict(sorted(packages.items()))}))
"""


class InstallFailure(BloomperfError):
    """pip could not install a pin, or an arm's Python does not start (``bloomperf bisect``
    skips such a version): bad input, exit 2, never the regression code 1."""


@dataclass(frozen=True)
class PackageSource:
    """Where pins come from: pip's own index options, and whether dependencies come too."""

    index_url: str | None = None
    find_links: tuple[str, ...] = ()
    with_deps: bool = False

    def pip_args(self) -> list[str]:
        args = ["--index-url", self.index_url] if self.index_url else []
        for link in self.find_links:
            args += ["--find-links", link]
        if self.find_links and not self.index_url:
            args.append("--no-index")  # a local wheelhouse alone must work offline
        return args


@dataclass(frozen=True)
class Arm:
    """One side of a comparison, ready to start workers: ``env`` is complete for them."""

    name: str
    python: str
    settings: dict[str, str]
    pins: tuple[str, ...]
    overlay: str | None
    env: dict[str, str] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "settings": self.settings,
            "pins": list(self.pins),
            "overlay": self.overlay,
            "worker_env": self.env,
            "fingerprint": self.fingerprint,
        }


def resolve_python(text: str, option: str) -> str:
    """An interpreter path, or a venv folder (its ``bin/python``), as an absolute path."""
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "bin" / "python"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BloomperfError(f"{option}: {text} is neither a Python interpreter nor a venv folder")
    return str(path.absolute())


def parse_settings(items: list[str] | None, option: str) -> dict[str, str]:
    """``KEY=VALUE`` items into a dict; one-line errors naming the option."""
    settings: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise BloomperfError(f"{option}: {item!r} is not KEY=VALUE")
        settings[key] = value
    return settings


def prepare_arm(
    name: str,
    python: str,
    settings: dict[str, str],
    pins: tuple[str, ...],
    source: PackageSource,
    cache_dir: Path,
) -> Arm:
    """Install the arm's pins (cached), compose its worker environment, read its fingerprint."""
    overlay = build_overlay(python, pins, source, cache_dir) if pins else None
    env = worker_env(python, settings, overlay, cache_dir)
    return Arm(
        name=name,
        python=python,
        settings=dict(settings),
        pins=pins,
        overlay=str(overlay) if overlay else None,
        env=env,
        fingerprint=read_fingerprint(python, env),
    )


def worker_env(
    python: str, settings: dict[str, str], overlay: Path | None, cache_dir: Path
) -> dict[str, str]:
    """The settings, with ``PYTHONPATH`` led by the overlay (and its bootstrap), and by a link to
    this bloomperf when the arm's interpreter is another one: its workers must speak this
    controller's protocol, whatever bloomperf (if any) that environment has installed."""
    env = dict(settings)
    front: list[str] = []
    if overlay is not None:
        front += [str(overlay), str(write_bootstrap(cache_dir))]
        env[OVERLAY_ENV] = str(overlay)
    # Not resolved: a venv's python is a link to the base interpreter, yet another environment.
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        front.append(str(link_bloomperf(cache_dir)))
    if front:
        rest = settings.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(front + ([rest] if rest else []))
    return env


def overlay_key(python: str, pins: tuple[str, ...], source: PackageSource) -> str:
    described = {
        "python": os.path.realpath(python),
        "pins": sorted(pins),
        "index_url": source.index_url,
        "find_links": [str(Path(link).absolute()) for link in source.find_links],
        "with_deps": source.with_deps,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def build_overlay(
    python: str, pins: tuple[str, ...], source: PackageSource, cache_dir: Path
) -> Path:
    """``pip install --target`` the pins into ``<cache>/overlays/<hash>`` unless already there.

    pip writes into a temporary sibling that is renamed when complete, so an interrupted
    install never leaves a half-filled overlay that a later run would trust.
    """
    overlays = cache_dir / "overlays"
    target = overlays / overlay_key(python, pins, source)
    if target.is_dir():
        return target
    overlays.mkdir(parents=True, exist_ok=True)
    partial = overlays / f".partial-{target.name}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    command = [sys.executable, "-m", "pip"]
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        command += ["--python", python]
    command += ["install", "--target", str(partial), "--disable-pip-version-check", "--no-input"]
    command += [] if source.with_deps else ["--no-deps"]
    command += [*source.pip_args(), *pins]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        output = (done.stderr or done.stdout).strip()
        errors = [line for line in output.splitlines() if line.startswith("ERROR:")]
        reason = " ".join(errors) if errors else output[-PIP_OUTPUT_TAIL:]
        raise InstallFailure(f"pip could not install {' '.join(pins)}: {reason}", exit_code=2)
    try:
        partial.rename(target)
    except OSError:  # another run finished the same overlay first
        shutil.rmtree(partial, ignore_errors=True)
    return target


def write_bootstrap(cache_dir: Path) -> Path:
    folder = cache_dir / "overlays" / "bootstrap"
    script = folder / "sitecustomize.py"
    if not (script.is_file() and script.read_text() == BOOTSTRAP):
        write_text_atomic(script, BOOTSTRAP)
    return folder


def link_bloomperf(cache_dir: Path) -> Path:
    """A folder holding only a link to this bloomperf package, for another interpreter."""
    package = Path(bloomperf.__file__).resolve().parent
    digest = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    folder = cache_dir / "overlays" / f"bloomperf-{digest}"
    link = folder / "bloomperf"
    if not link.exists():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(package, target_is_directory=True)
        except FileExistsError:
            pass
    return folder


def read_fingerprint(python: str, env: dict[str, str]) -> dict[str, Any]:
    """Python version and every installed distribution's version, as the arm's workers see them."""
    done = subprocess.run(
        [python, "-c", FINGERPRINT_SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        tail = done.stderr.strip()[-PIP_OUTPUT_TAIL:]
        raise InstallFailure(f"{python} does not start with this arm's settings: {tail}", 2)
    fingerprint: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return fingerprint


def differences(a: Arm, b: Arm) -> dict[str, Any]:
    """Exactly what differs between two arms: interpreter, package versions, settings."""
    result: dict[str, Any] = {}
    for key in ("python", "executable"):
        if a.fingerprint.get(key) != b.fingerprint.get(key):
            result[key] = {"a": a.fingerprint.get(key), "b": b.fingerprint.get(key)}
    packages_a = a.fingerprint.get("packages", {})
    packages_b = b.fingerprint.get("packages", {})
    result["packages"] = {
        name: {"a": packages_a.get(name), "b": packages_b.get(name)}
        for name in sorted(set(packages_a) | set(packages_b))
        if packages_a.get(name) != packages_b.get(name)
    }
    result["settings"] = {
        key: {"a": a.settings.get(key), "b": b.settings.get(key)}
        for key in sorted(set(a.settings) | set(b.settings))
        if a.settings.get(key) != b.settings.get(key)
    }
    return result


def describe_differences(diff: dict[str, Any]) -> list[str]:
    """One line per difference, for the terminal."""
    lines = [
        f"{key}: {diff[key]['a']} -> {diff[key]['b']}"
        for key in ("python", "executable")
        if key in diff
    ]
    for name, versions in diff.get("packages", {}).items():
        lines.append(f"{name}: {versions['a'] or '(absent)'} -> {versions['b'] or '(absent)'}")
    for key, values in diff.get("settings", {}).items():
        a = "(unset)" if values["a"] is None else f"{key}={values['a']}"
        b = "(unset)" if values["b"] is None else f"{key}={values['b']}"
        lines.append(f"env: {a} -> {b}")
    return lines
