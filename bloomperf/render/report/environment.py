"""The report's environment section: the fingerprint a person can read at a glance.

``fingerprint.environment_fingerprint`` and ``provenance.provenance`` record everything, raw: bytes,
one GPU name per GPU, absolute paths of the machine that ran. The report shows the same facts as
rows of (what, value): sizes in GiB, "8 × NVIDIA A100-SXM4-80GB", the commit and the CI run
first, and no path of the runner's disk (they say nothing to a reader elsewhere, and leak user
names into uploaded artifacts).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bloomperf.core.formatting import GIB

# A home folder at the start of a path, or inside a command line: shown as "~".
HOME = re.compile(r"(?<![\w.~-])(?:/home/[^/\s]+|/Users/[^/\s]+|/root)(?=/|\s|$)")
# Keys shown in their own rows, in this order, or deliberately left out (paths of the runner).
SHOWN = {
    "provenance",
    "topology",
    "gpus",
    "gpu_limits",
    "driver",
    "cuda_driver",
    "cuda_torch",
    "nccl",
    "nvml_reason",
    "hostname",
    "cpu_model",
    "cpu_cores",
    "ram_bytes",
    "python",
    "packages",
}


def environment_rows(environment: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(what, value) rows: provenance, GPUs, system, packages, then any other key as recorded."""
    env = dict(environment)
    prov = env.get("provenance") or {}
    rows = provenance_rows(prov)
    rows += [("Topology", text(env.get("topology")))] if env.get("topology") else []
    rows += gpu_rows(env)
    cpu = ", ".join(
        part
        for part in (
            text(env.get("cpu_model")) if env.get("cpu_model") else "",
            f"{env['cpu_cores']} cores" if env.get("cpu_cores") else "",
        )
        if part
    )
    rows += [("CPU", cpu)] if cpu else []
    rows += [("RAM", gib(env["ram_bytes"]))] if isinstance(env.get("ram_bytes"), int) else []
    rows += [("Host", text(env.get("hostname")))] if env.get("hostname") else []
    rows += [("Python", text(env.get("python")))] if env.get("python") else []
    packages = env.get("packages") or {}
    if isinstance(packages, dict):
        rows += [(f"package {name}", text(v)) for name, v in sorted(packages.items())]
    paths = [path for path in (prov.get("cwd"), (prov.get("git") or {}).get("root")) if path]
    for key, value in env.items():
        if key not in SHOWN:
            rows.append((key, other_value(key, value)))
    return [(key, shorten(value, paths)) for key, value in rows]


_URL = re.compile(r"https://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]{1,500}")


def plots_note(environment: Mapping[str, Any]) -> str:
    """Where the plots of ``report.md`` are: its images are PNG files in its own folder, which a
    GitHub step summary cannot show (it renders only images at a URL)."""
    url = (environment.get("provenance") or {}).get("ci_run_url")
    # The link target comes from the results file: only a plain https address becomes a link.
    safe = isinstance(url, str) and _URL.fullmatch(url)
    where = f" of [the CI run]({url})" if safe else ""
    return (
        "Plots: the PNG files in this report's folder, linked by file name, so they show wherever"
        f" the folder travels whole (the report artifact{where}, a checkout). A GitHub step"
        " summary cannot show local images: open the artifact, or its index.html, which embeds"
        " them."
    )


def shown_baseline(baseline: str) -> str:
    """A baseline file by its name (baselines are looked up by name); other text as it is."""
    path = Path(baseline)
    return path.name if path.is_absolute() else baseline


def provenance_rows(prov: Mapping[str, Any]) -> list[tuple[str, str]]:
    git = prov.get("git") or {}
    rows: list[tuple[str, str]] = []
    if git.get("commit"):
        dirty = git.get("dirty")
        state = "" if dirty is None else "dirty: uncommitted edits" if dirty else "clean"
        branch = f"on {git['branch']}" if git.get("branch") and git["branch"] != "HEAD" else ""
        extra = "; ".join(part for part in (branch, state) if part)
        rows.append(("bloomperf commit", git["commit"][:12] + (f" ({extra})" if extra else "")))
    elif prov:
        rows.append(("bloomperf commit", "unknown (not a git checkout)"))
    if prov.get("ci_run_url"):
        rows.append(("CI run", text(prov["ci_run_url"])))
    if prov.get("command"):
        rows.append(("Command", text(prov["command"])))
    return rows


def gpu_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    names = [str(n) for n in env.get("gpus") or []]
    if names:
        counted = Counter(names)
        rows.append(("GPUs", ", ".join(f"{n} × {name}" for name, n in counted.items())))
    limits = [
        {k: v for k, v in limit.items() if k != "index"}
        for limit in env.get("gpu_limits") or []
        if isinstance(limit, dict)
    ]
    if limits:
        if all(limit == limits[0] for limit in limits):
            rows.append((f"GPU limits (all {len(limits)})", limits_text(limits[0])))
        else:
            rows += [(f"GPU {i} limits", limits_text(limit)) for i, limit in enumerate(limits)]
    versions = [
        ("NVIDIA driver", "driver"),
        ("CUDA (driver)", "cuda_driver"),
        ("CUDA (torch)", "cuda_torch"),
        ("NCCL", "nccl"),
    ]
    rows += [(label, text(env[key])) for label, key in versions if env.get(key)]
    if env.get("nvml_reason"):
        rows.append(("No GPU because", text(env["nvml_reason"])))
    return rows


def limits_text(limit: Mapping[str, Any]) -> str:
    units = {
        "sm_clock_max_mhz": ("SM clock ≤", "MHz"),
        "mem_clock_max_mhz": ("memory clock ≤", "MHz"),
        "power_limit_w": ("power limit", "W"),
    }
    parts = [
        f"{units[k][0]} {v:g} {units[k][1]}" if k in units else f"{k} {v}"
        for k, v in limit.items()
        if v is not None
    ]
    return ", ".join(parts) or "not reported"


def other_value(key: str, value: Any) -> str:
    """A key this module does not know: bytes as GiB, lists joined, the rest as JSON."""
    if key.endswith("_bytes") and isinstance(value, int):
        return gib(value)
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(text(v) for v in value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return text(value)


def gib(size: int) -> str:
    return f"{size / GIB:,.0f} GiB" if size >= 10 * GIB else f"{size / GIB:.1f} GiB"


def text(value: Any) -> str:
    return "–" if value is None else str(value)


def shorten(value: str, paths: list[str]) -> str:
    """No absolute path of the machine that ran: its working folder and checkout become
    relative, a home folder becomes "~"."""
    for path in sorted(paths, key=len, reverse=True):
        value = value.replace(path.rstrip("/") + "/", "").replace(path.rstrip("/"), ".")
    return HOME.sub("~", value)
