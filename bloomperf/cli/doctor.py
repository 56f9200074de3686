"""`bloomperf doctor`: what will not work on this machine, and why, before a nightly finds out.

Each check ends ``ok``, ``warn`` or ``fail`` with a one-line reason. ``fail`` means a run of the
chosen device cannot do something it is asked to (``--device cuda`` on a machine without NVML,
torch built for a newer CUDA than the driver, no nvcc for DeepSpeed's fused kernels...); ``warn``
means it runs, but skips cells or measures less reliably. On a CPU machine the GPU checks warn
and say what is missing.

NVML answers in this process (no CUDA context); torch, bitsandbytes and DeepSpeed are imported
in a child process (``probe_libraries``), so a library that crashes on import cannot take the
doctor down, and its findings come back as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bloomperf.catalog.checkpoints import default_cache_dir, resolve_model
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.cli.arguments import add_format_argument, add_run_option, run_option
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.doctor.build import BuildTree, check_build_files, this_build_tree
from bloomperf.doctor.check import STATUSES, Check
from bloomperf.doctor.host import (
    HostFacts,
    check_build_locks,
    check_disk,
    check_host_ram,
    check_leftovers,
    check_shm,
)
from bloomperf.doctor.libraries import (
    check_bitsandbytes,
    check_deepspeed_jit,
    check_fused_bloom,
    check_torch_cuda,
    probe_libraries,
)
from bloomperf.doctor.nvml import check_nvml

DOCTOR_KIND = "bloomperf-doctor"
SCHEMA_VERSION = 1


def run_checks(
    options: RunConfig,
    nvml: Any = None,
    facts: dict[str, Any] | None = None,
    host: HostFacts | None = None,
) -> list[Check]:
    device = options.device
    host = host or HostFacts.here(options.host_ram)
    checks, found = check_nvml(nvml, device)
    facts = facts if facts is not None else probe_libraries()
    model = options.model or ("bloom-176b" if found["gpus"] else "tiny")
    ranks = int(options.tp or found["gpus"] or 1)
    cache = options.cache_dir or default_cache_dir()
    return [
        *checks,
        check_torch_cuda(facts, found["cuda_driver"], device),
        check_bitsandbytes(facts, device),
        check_deepspeed_jit(facts, device),
        check_fused_bloom(),
        check_shm(ranks),
        check_disk(model, options.layers, cache, host.disk_free_bytes),
        check_host_ram(model, options.layers, ranks, host),
        check_build_locks(),
        check_leftovers(),
        build_files_check(facts, device),
    ]


def build_files_check(facts: dict[str, Any], device: str) -> Check:
    """The fused-kernel build's headers and libraries: this machine's, or as ``facts`` give
    them (``build_tree``: a machine's CUDA_HOME and Python include folder)."""
    given = facts.get("build_tree")
    if given is None:
        return check_build_files(this_build_tree(), device)
    if not given.get("cuda_home"):
        return Check("build-files", "warn", f"not judged: {given.get('unknown', 'no facts')}")
    tree = BuildTree(Path(given["cuda_home"]), Path(given["python_include"]))
    return check_build_files(tree, device)


def report_to_dict(checks: list[Check], device: str) -> dict[str, Any]:
    return {
        "kind": DOCTOR_KIND,
        "schema_version": SCHEMA_VERSION,
        "device": device,
        "checks": [asdict(c) for c in checks],
        "counts": {s: sum(c.status == s for c in checks) for s in STATUSES},
    }


def render_text(checks: list[Check]) -> str:
    counts = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in STATUSES)
    width = max(len(c.name) for c in checks)
    lines = [f"bloomperf doctor: {counts}"]
    lines += [f"  {c.status:<4}  {c.name:<{width}}  {c.reason}" for c in checks]
    return "\n".join(lines)


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check this machine: what will not work here (NVML, CUDA, DeepSpeed, disk) and why",
        description="Check the machine; every check ends ok, warn or fail. Exit 1 on a fail.",
    )
    add_format_argument(parser, "json")
    add_run_option(
        parser,
        "device",
        default="auto",
        help="what the runs will use: cuda turns a missing GPU facility into a "
        "fail; auto warns [auto]",
    )
    add_run_option(
        parser,
        "model",
        help="model to size disk and RAM for [bloom-176b with GPUs, tiny without]",
    )
    add_run_option(parser, "layers", help="build the model with this many blocks [all]")
    add_run_option(parser, "tp", help="ranks per DeepSpeed group [GPU count]")
    add_run_option(parser, "host_ram")
    add_run_option(
        parser,
        "cache_dir",
        help="where runs keep built models (its disk is checked) "
        "[$BLOOMPERF_CACHE or ~/.cache/bloomperf]",
    )
    parser.set_defaults(func=run_doctor_command)


def refuse_bad_inputs(args: argparse.Namespace) -> None:
    """What the user named must exist before any check can say "ok" about it."""
    cache = args.cache_dir
    if cache is not None and (cache.exists() or cache.is_symlink()) and not cache.is_dir():
        raise BloomperfError(f"--cache-dir {cache}: is not a folder")
    if args.model is not None and args.model not in MODEL_SHAPES:
        resolve_model(args.model, args.layers)  # a checkpoint folder or cached hub id, checked


def doctor_options(args: argparse.Namespace) -> RunConfig:
    """What a doctor command line asks about (benchmarks/rehearse.py reads it the same way)."""
    return RunConfig(
        device=args.device,
        model=args.model,
        layers=args.layers,
        tp=args.tp,
        cache_dir=args.cache_dir,
        host_ram=given_host_ram(args),
    )


def given_host_ram(args: argparse.Namespace) -> int | None:
    """``--host-ram``, else ``BLOOMPERF_HOST_RAM`` (parsed as a run parses it), else None."""
    if args.host_ram is not None:
        return int(args.host_ram)
    option = run_option("host_ram")
    text = os.environ.get(option.env_var)
    if not text:
        return None
    try:
        return int(option.parse(text))
    except (ValueError, BloomperfError) as exc:
        raise BloomperfError(f"{option.env_var}={text}: {exc}") from None


def run_doctor_command(args: argparse.Namespace) -> int:
    refuse_bad_inputs(args)
    return print_report(run_checks(doctor_options(args)), args.format, args.device)


def print_report(checks: list[Check], form: str, device: str) -> int:
    """Print the checks as text or JSON; the exit status: 1 on a fail."""
    if form == "json":
        print(json.dumps(report_to_dict(checks, device), indent=2, allow_nan=False))
    else:
        print(render_text(checks))
    return 1 if any(c.status == "fail" for c in checks) else 0
