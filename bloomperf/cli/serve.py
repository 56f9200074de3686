"""`bloomperf serve`: a serving engine under load, judged as DeepSpeed-FastGen judges one.

bloomperf starts vLLM's OpenAI-compatible server on a built BLOOM (or uses ``--endpoint``'s
server), drives it with Poisson arrivals at each of ``--rates`` and refines between the highest
rate that met the SLA and the lowest that did not. Per rate: request and token throughput, TTFT,
TPOT and inter-token latency at p50/p90/p99, the share of requests that met the SLA; per sweep:
the effective throughput. docs/serving.md says what each figure means and why the SLA defaults
are what they are.

Exit status: 0 when every rate ran; 1 when a rate failed (error, timeout) or the lowest rate
already missed the SLA; 2 on bad input (an engine argument vLLM refuses, a port in use).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bloomperf.analysis.serving import effective_throughput
from bloomperf.catalog.checkpoints import PreparedModel, resolve_model
from bloomperf.catalog.fingerprint import environment_fingerprint
from bloomperf.catalog.serving_venv import BUILD_HINT, serving_python_path
from bloomperf.catalog.serving_workload import DEFAULT_SHAPE, SHAPES
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.arguments import checked
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import utc_now
from bloomperf.harness.engine_identity import endpoint_topology, installed_engine, served_engine
from bloomperf.harness.lock import hold_device_lock
from bloomperf.harness.server import Server, ServerSpec
from bloomperf.harness.sweep import Endpoint, Managed, SweepSpec, parse_rates, run_sweeps
from bloomperf.render.serving import render_agreement, render_sweep
from bloomperf.store.results import CellResult, ModelInfo, RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.serving import RateSummary, Sla, Sweep, sweep_cell, sweep_workload

DEFAULT_RATES = "0.5,1,2,4"
DEFAULT_REQUESTS = 30
DEFAULT_CONTEXT = 512


def serving_python(given: Path | None) -> Path:
    """The serving venv's interpreter: --python, $BLOOMPERF_SERVING_PYTHON, or .venv-serving/."""
    python = serving_python_path(given)
    if not python.exists():
        raise BloomperfError(f"--python: {python} does not exist; {BUILD_HINT}")
    return python


def server_log(output: Path | None, workdir: Path) -> Path:
    """Where the server's log goes: beside the results (kept), else in the temporary folder."""
    return output.with_suffix(".server.log") if output is not None else workdir / "server.log"


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be above 0, got {text}")
    return value


def share(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {text}")
    return value


def count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"must be at least 1, got {text}")
    return value


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="sweep request rates on a server (vLLM): its effective throughput under an SLA",
        description=__doc__.split("\n\n")[0],
    )
    add = parser.add_argument
    add("--model", default="tiny-serving", help="shape or checkpoint folder [tiny-serving]")
    add("--endpoint", metavar="URL", help="an OpenAI-compatible server already running [start one]")
    add("--engine-args", default="", metavar="ARGS", help="more arguments for vLLM's server [none]")
    add("--python", type=Path, help="the serving venv's interpreter [.venv-serving/bin/python]")
    add("--port", type=checked(count), help="the server's port [a free one]")
    add("--repeat", type=checked(count), default=1, metavar="N", help="sweeps, one sample each [1]")
    add_sweep_options(add)
    add("--threads", type=checked(count), help="OMP threads of the engine [vLLM's choice]")
    add("--seed", type=int, default=0, help="the requests' seed [0]")
    add("-o", "--output", type=Path, help="write the sweep's results here (JSON) [none]")
    parser.set_defaults(func=serve_command)


def add_sweep_options(add: Any) -> None:
    """The sweep's options, shared with ``bloomperf ab --serve`` (``add``: add_argument)."""
    add("--max-model-len", type=checked(count), default=DEFAULT_CONTEXT, help="context [512]")
    add("--rates", default=DEFAULT_RATES, help=f"request rates per second [{DEFAULT_RATES}]")
    add("--requests", type=checked(count), default=DEFAULT_REQUESTS, help="requests per rate [30]")
    add("--refine", type=int, default=2, metavar="N", help="bisection steps after the rates [2]")
    add("--burstiness", type=checked(positive), default=1.0, help="1: Poisson; <1 burstier [1]")
    add(
        "--workload",
        default=DEFAULT_SHAPE,
        choices=sorted(SHAPES),
        help=f"length distributions [{DEFAULT_SHAPE}]",
    )
    add("--sla-ttft", type=checked(positive), default=Sla.ttft_s, help="TTFT limit, s [2]")
    add("--sla-token-rate", type=checked(positive), default=Sla.token_rate, help="tokens/s [4]")
    add("--sla-attainment", type=checked(share), default=Sla.attainment, help="share [0.9]")
    add(
        "--ready-timeout",
        type=checked(positive),
        default=900.0,
        help="s to wait for readiness [900]",
    )


def sweep_spec(args: argparse.Namespace, client: Path, model: Path) -> SweepSpec:
    """The sweep that the options describe (``client``: the interpreter of vLLM's client)."""
    return SweepSpec(
        rates=parse_rates(args.rates),
        requests=args.requests,
        sla=Sla(args.sla_ttft, args.sla_token_rate, args.sla_attainment),
        client_python=client,
        tokenizer=model,
        workload=args.workload,
        context=args.max_model_len,
        burstiness=args.burstiness,
        refine_steps=args.refine,
        seed=args.seed,
    )


def serve_command(args: argparse.Namespace) -> int:
    sla = Sla(args.sla_ttft, args.sla_token_rate, args.sla_attainment)
    parse_rates(args.rates)  # bad input refused before a venv or a model is looked for
    python = serving_python(args.python)
    prepared = resolve_model(args.model)
    model = prepared.path
    try:
        engine_args = tuple(shlex.split(args.engine_args))
    except ValueError as exc:
        raise BloomperfError(f"--engine-args: {exc}") from None
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    settings.pop("func", None)
    settings.pop("repeat", None)  # how many samples, not what a sample is: in the figures
    settings["python"] = str(python)  # the interpreter used, whichever way it was chosen
    spec = sweep_spec(args, python, model)
    sweep_cell(settings, sla, [], None)  # a --dtype no results can name: refused before a start
    run = empty_run(prepared, settings, args.endpoint)
    measured: list[list[RateSummary]] = []  # per sweep

    def keep(repeat: int, summary: RateSummary) -> None:  # nothing measured is lost on a crash
        if repeat == len(measured):
            measured.append([])
        measured[repeat].append(summary)
        print(f"bloomperf: rate {summary.rate:g}/s: {summary.outcome}", file=sys.stderr)
        if args.output is not None:
            save_run(replace(run, cells=(partial_cell(settings, sla, measured),)), args.output)

    with tempfile.TemporaryDirectory(prefix="bloomperf-serve-") as tmp:
        workdir = Path(tmp)
        if args.endpoint:
            results = run_sweeps(spec, Endpoint(args.endpoint), workdir, args.repeat, keep)
        else:
            server_spec = ServerSpec(
                python=python,
                model=model,
                log_path=server_log(args.output, workdir),
                port=args.port,
                engine_args=("--max-model-len", str(args.max_model_len), *engine_args),
                ready_timeout_s=args.ready_timeout,
                threads=args.threads,
            )
            with hold_device_lock("cpu"), Server(server_spec) as server:
                results = run_sweeps(spec, Managed(server), workdir, args.repeat, keep)
    sweeps = [(list(r.rates), effective_throughput(r.rates, sla)) for r in results]
    if args.output is not None:
        cell = sweep_cell(settings, sla, *sweeps[0], sweeps[1:])
        save_run(replace(run, cells=(cell,), complete=True, finished_at=utc_now()), args.output)
    for number, result in enumerate(results, start=1):
        if result.ready_s is not None:
            print(f"server ready in {result.ready_s:.1f} s at {result.target}")
        if len(results) > 1:
            print(f"sweep {number} of {len(results)}:")
        print(render_sweep(result.rates, sla, sweeps[number - 1][1]))
        agreement = render_agreement(result.rates)
        if agreement:
            print("mean latencies, bloomperf's client against the server's /metrics:")
            print(agreement)
    failed = [s for r in results for s in r.rates if s.outcome != "ok"]
    return 1 if failed or any(effective == 0.0 for _, effective in sweeps) else 0


def partial_cell(
    settings: dict[str, Any], sla: Sla, measured: list[list[RateSummary]]
) -> CellResult:
    """The cell of the sweeps so far: the last one's effective throughput is not known yet."""
    done: list[Sweep] = [(rates, effective_throughput(rates, sla)) for rates in measured[:-1]]
    done.append((measured[-1], None))
    return sweep_cell(settings, sla, list(done[0][0]), done[0][1], done[1:])


def empty_run(model: PreparedModel, settings: dict[str, Any], endpoint: str | None) -> RunResult:
    """The results document the sweep's cell goes in: the served model, the workload's mean
    generation length as its new tokens, the server's engine and version, and the machine: this
    one, or ``remote-HOST`` for an ``--endpoint`` elsewhere (the environment stays this one's,
    the client's)."""
    topology = detect_topology()
    server = {"serving_python": settings["python"]}
    if endpoint:
        server |= {"serving_endpoint": endpoint, "serving_engine": served_engine(endpoint)}
    else:
        server["serving_engine"] = installed_engine(Path(settings["python"]))
    return RunResult(
        model=ModelInfo(model.name, str(model.path), model.layers, model.parameters),
        workload=sweep_workload(settings),
        topology=(endpoint_topology(endpoint) if endpoint else None) or topology.id,
        environment={**environment_fingerprint(topology), **server},
        started_at=utc_now(),
    )
