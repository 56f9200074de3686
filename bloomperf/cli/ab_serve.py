"""`bloomperf ab --serve`: two serving environments compared under the same sweep, interleaved.

An arm is what it is for ``ab`` (an interpreter or venv: the serving venv by default;
``KEY=VALUE`` settings; pins in an overlay), plus the engine arguments of its vLLM server
(``--a-engine-args``, ``--b-engine-args``). Both servers start at once and stay up; pairs of
sweeps alternate between them rate by rate (``bloomperf.harness.serve_ab``), and each registered
figure a sweep yields (effective throughput, p99 TTFT and ITL) gets ``ab``'s paired interval and
verdict, in the metric's own direction. The results file is ``ab``'s (kind ``bloomperf-ab``):
one entry per judged metric of the serving cell, both arms' every sweep under ``sweeps``.
One client measures both: arm A's (vLLM's own ``vllm.benchmarks.serve``), so the instrument does
not change with the arm.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shlex
import tempfile
import textwrap
from pathlib import Path
from typing import Any, TextIO

from bloomperf.backends import serving_row
from bloomperf.catalog.checkpoints import default_cache_dir, resolve_model
from bloomperf.catalog.topology import Topology
from bloomperf.cli.ab_report import (
    KIND,
    SCHEMA_VERSION,
    WIDTH,
    comparison_json,
    log_json,
    render_metric_table,
)
from bloomperf.cli.serve import add_sweep_options, serving_python, sweep_spec
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import write_json_atomic
from bloomperf.core.metrics import label_of, metrics
from bloomperf.harness.interleave import ARMS, Comparison, PairLog, Settings
from bloomperf.harness.lock import hold_device_lock
from bloomperf.harness.matrix import Cell
from bloomperf.harness.overlay import (
    Arm,
    PackageSource,
    describe_differences,
    differences,
    parse_settings,
    prepare_arm,
    resolve_python,
)
from bloomperf.harness.serve_ab import ServingArms, compare_servers, start_servers
from bloomperf.harness.server import Server, ServerSpec
from bloomperf.harness.session import lock_key, resolve_device, utc_now
from bloomperf.harness.sweep import Managed, SweepSpec
from bloomperf.store.serving import RateSummary, engine_dtype, sweep_workload

DEFAULT_MODEL = "tiny-serving"


def add_serving_arguments(parser: Any) -> None:
    group = parser.add_argument_group("serving (--serve)")
    group.add_argument(
        "--serve",
        action="store_true",
        help="compare two vLLM servers under a sweep of request rates (effective throughput, "
        "p99 TTFT and ITL) instead of the blog's cells",
    )
    for arm in ("a", "b"):
        group.add_argument(
            f"--{arm}-engine-args",
            default="",
            metavar="ARGS",
            help=f"more arguments for arm {arm.upper()}'s vLLM server [none]",
        )
    add_sweep_options(group.add_argument)


def serving_ab_command(
    args: Any,
    options: RunConfig,
    topology: Topology,
    settings: Settings,
    source: PackageSource,
    streams: tuple[TextIO, TextIO],
) -> list[Comparison]:
    """Both servers compared (``ab`` has read the comparison's options and gives the exit)."""
    out, err = streams
    device = resolve_device(options.device, topology)
    model = resolve_model(options.model or DEFAULT_MODEL)
    engine = {arm: engine_args(args, arm) for arm in ARMS}
    cell = Cell(serving_row(args.workload), engine_dtype(" ".join(engine["a"])), 1)
    cache_dir = options.cache_dir or default_cache_dir()
    arms = [prepare_serving_arm(args, name, source, cache_dir) for name in ARMS]
    spec = sweep_spec(args, Path(arms[0].python), model.path)
    output = options.output or Path("results") / (
        f"bloomperf-ab-serve-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    )
    document = new_document(args, arms, engine, spec, settings, model.name, topology.id)
    tolerances = metric_tolerances(args.tolerance, cpu=device == "cpu")
    for line in difference_lines(document["differences"]):
        print(f"  differs: {line}", file=err)
    save = saver(document, output)
    save()  # an unwritable output fails now, not after the servers' start
    with (
        hold_device_lock(lock_key(topology, device=device), enabled=not options.no_lock),
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="bloomperf-ab-serve-") as tmp,
    ):
        servers = {}
        for arm in arms:
            server_spec = ServerSpec(
                python=Path(arm.python),
                model=model.path,
                log_path=output.with_suffix(f".{arm.name}.server.log"),
                engine_args=("--max-model-len", str(args.max_model_len), *engine[arm.name]),
                ready_timeout_s=args.ready_timeout,
                threads=options.threads,
                env=tuple(sorted(arm.env.items())),
            )
            servers[arm.name] = stack.enter_context(Server(server_spec))
        print(f"bloomperf ab: starting both servers ({model.name})", file=err)
        failed = start_servers(servers, cell)
        serving = ServingArms(
            {name: Managed(server) for name, server in servers.items()},
            {arm.name: document["arms"][arm.name]["sweep"] for arm in arms},
        )
        comparisons = [failed] if failed else []
        if not failed:
            comparisons = compare_servers(
                spec,
                serving,
                cell,
                settings,
                tolerances,
                Path(tmp),
                show_rate(err),
                show_pair(err, document, save),
            )
    finish(document, comparisons, save)
    print(render_metric_table(comparisons, settings), file=out)
    print(f"results: {output}", file=out)
    return comparisons


def engine_args(args: Any, arm: str) -> tuple[str, ...]:
    text = getattr(args, f"{arm}_engine_args") or ""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise BloomperfError(f"--{arm}-engine-args: {exc}") from None


def prepare_serving_arm(args: Any, name: str, source: PackageSource, cache_dir: Path) -> Arm:
    """An arm whose interpreter is a serving venv's (``--a``/``--b``, else the project's)."""
    given = getattr(args, name)
    python = resolve_python(given, f"--{name}") if given else str(serving_python(None))
    return prepare_arm(
        name,
        python,
        parse_settings(getattr(args, f"{name}_env"), f"--{name}-env"),
        tuple(getattr(args, f"{name}_pin") or ()),
        source,
        cache_dir,
    )


def metric_tolerances(given: float | None, cpu: bool) -> dict[str, float]:
    """Each metric's tolerance: ``--tolerance`` for all when given, else the one ``baseline
    accept`` gives it on this kind of machine (the serving figures': 40 % and 90 % on CPU)."""
    found = {m.name: given if given is not None else m.tolerance_for(cpu) for m in metrics()}
    return {name: value for name, value in found.items() if value is not None}


def new_document(
    args: Any,
    arms: list[Arm],
    engine: dict[str, tuple[str, ...]],
    spec: SweepSpec,
    settings: Settings,
    model: str,
    topology: str,
) -> dict[str, Any]:
    described = {}
    for arm in arms:
        sweep = {
            "model": model,
            "workload": spec.workload,
            "max_model_len": spec.context,
            "engine_args": shlex.join(engine[arm.name]),
            "rates": args.rates,
            "requests": spec.requests,
            "refine": spec.refine_steps,
            "burstiness": spec.burstiness,
            "seed": spec.seed,
            "python": arm.python,
            "client_python": str(spec.client_python),
        }
        described[arm.name] = {
            **arm.describe(),
            "engine_args": list(engine[arm.name]),
            "sweep": sweep,
        }
    diff = differences(arms[0], arms[1])
    if engine["a"] != engine["b"]:
        diff["engine_args"] = {"a": shlex.join(engine["a"]), "b": shlex.join(engine["b"])}
    return {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "started_at": utc_now(),
        "finished_at": None,
        "complete": False,
        "model": {"name": model},
        "workload": {"new_tokens": sweep_workload(described["a"]["sweep"]).new_tokens},
        "topology": topology,
        "settings": {
            "serve": True,
            "confidence": settings.confidence,
            "look_confidence": settings.look_confidence,
            "min_pairs": settings.min_pairs,
            "max_pairs": settings.max_pairs,
            "max_time_s": settings.max_time_s,
            "seed": settings.seed,
            "warmup": settings.warmup,
            "sla": {
                "ttft_s": spec.sla.ttft_s,
                "token_rate": spec.sla.token_rate,
                "attainment": spec.sla.attainment,
            },
        },
        "arms": described,
        "differences": diff,
        "cells": [],
    }


def difference_lines(diff: dict[str, Any]) -> list[str]:
    lines = describe_differences(diff)
    if "engine_args" in diff:
        engine = diff["engine_args"]
        lines.append(f"engine args: {engine['a'] or '(none)'} -> {engine['b'] or '(none)'}")
    return lines or ["(no difference)"]


def saver(document: dict[str, Any], output: Path) -> Any:
    def save() -> None:
        write_json_atomic(output, document)

    return save


def show_rate(err: TextIO) -> Any:
    def show(arm: str, summary: RateSummary, phase: str) -> None:
        met = f", SLA met by {summary.sla_met:.0%}" if summary.outcome == "ok" else ""
        name = f"{arm.upper()} ({phase})" if phase else arm.upper()
        print(f"  arm {name}: rate {summary.rate:g}/s: {summary.outcome}{met}", file=err)

    return show


def show_pair(err: TextIO, document: dict[str, Any], save: Any) -> Any:
    """Each pair's intervals so far, printed and kept (an interrupted comparison keeps them)."""

    def show(pair: int, logs: dict[str, PairLog], elapsed: float) -> None:
        parts = [
            f"{label_of(name)} B/A {e.ratio:.3f} [{e.low:.3f}, {e.high:.3f}]"
            for name, log in logs.items()
            if (e := log.estimate) is not None
        ]
        figures = "; ".join(parts) or "no interval yet"
        text = f"pair {pair + 1}: {figures} ({elapsed:.0f} s)"
        print(textwrap.fill(text, WIDTH, initial_indent="  ", subsequent_indent="    "), file=err)
        document["in_progress"] = [{"metric": n, **log_json(log)} for n, log in logs.items()]
        save()

    return show


def finish(document: dict[str, Any], comparisons: list[Comparison], save: Any) -> None:
    document.pop("in_progress", None)
    document["cells"] = [comparison_json(c) for c in comparisons]
    arms = next((c.arms for c in comparisons if c.arms), {})
    document["sweeps"] = {name: cell.details.get("serving") for name, cell in arms.items()}
    document.update(finished_at=utc_now(), complete=True)
    save()
