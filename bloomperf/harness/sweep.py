"""The serving sweep: a server (started here, or already running at ``--endpoint``) driven at a
series of request rates, then refined by bisection between the highest rate that met the SLA and
the lowest that did not. Each rate's figures are handed to ``on_rate`` as soon as they exist, so
an interrupted sweep keeps what it measured.

A server that dies during a rate gives that rate ``error`` (with its log's tail) and is started
again for the next one; a server that never answers gives ``timeout``; neither stops the sweep.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bloomperf.analysis.prometheus import server_means_ms
from bloomperf.analysis.serving import (
    RateSummary,
    Sla,
    effective_throughput,
    failed_rate,
    issue_rate,
    next_bisection_rate,
    summarise_rate,
)
from bloomperf.catalog.serving_workload import draw_lengths, find_shape
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.launch import WorkerFailure
from bloomperf.harness.loadgen import (
    RunWatch,
    client_command,
    run_client,
    single_token_words,
    write_dataset,
)
from bloomperf.harness.server import Server, http_get

RateCallback = Callable[[RateSummary], None]


@dataclass(frozen=True)
class SweepSpec:
    rates: tuple[float, ...]
    requests: int  # per rate
    sla: Sla
    client_python: Path  # the serving venv's interpreter: the client is vLLM's
    tokenizer: Path  # a folder with the served model's tokenizer.json
    workload: str = "fastgen-1200-128"
    context: int = 512
    burstiness: float = 1.0
    refine_steps: int = 2
    resolution: float = 0.1  # stop refining when the bracket is narrower than this share
    seed: int = 0
    rate_timeout_s: float = 600.0


@dataclass(frozen=True)
class SweepResult:
    target: str
    model: str
    rates: tuple[RateSummary, ...]
    effective_rps: float
    ready_s: float | None


class Endpoint:
    """A server bloomperf did not start: used as it is, never restarted, never stopped."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def ensure(self) -> float | None:
        if self.models() is None:
            raise WorkerFailure("error", f"--endpoint: {self.url}/v1/models does not answer")
        return None

    def models(self) -> list[str] | None:
        body = http_get(self.url + "/v1/models")
        try:
            return [str(m["id"]) for m in json.loads(body or "")["data"]]
        except (ValueError, KeyError, TypeError):
            return None

    def metrics(self) -> str | None:
        return http_get(self.url + "/metrics")

    def died(self) -> str:
        return "" if self.models() is not None else f"{self.url} stopped answering"


class Managed:
    """A server bloomperf starts, and starts again after it died."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.url = server.url

    def ensure(self) -> float | None:
        if self.server.alive():
            return None
        self.server.stop()
        self.server.start()
        return self.server.wait_ready()

    def models(self) -> list[str] | None:
        return [str(self.server.spec.model)]

    def metrics(self) -> str | None:
        return self.server.get("/metrics")

    def died(self) -> str:
        if self.server.alive():
            return ""
        return f"the server died during this rate; log tail:\n{self.server.log_tail()}"


Target = Endpoint | Managed


def run_sweep(spec: SweepSpec, target: Target, workdir: Path, on_rate: RateCallback) -> SweepResult:
    """Every listed rate, then the bisection steps; each rate's summary goes to ``on_rate``."""
    words = single_token_words(spec.tokenizer / "tokenizer.json")
    ready_s: float | None = None
    try:
        ready_s = target.ensure()
    except WorkerFailure as failure:  # nothing to measure: said once, at the first rate
        first = failed_rate(spec.rates[0], failure.outcome, str(failure))
        on_rate(first)
        return SweepResult(target.url, "", (first,), 0.0, None)
    model = (target.models() or [""])[0]
    done: list[RateSummary] = []

    def measure(rate: float) -> None:
        summary = measure_rate(spec, target, model, words, workdir, rate, len(done))
        done.append(summary)
        on_rate(summary)

    for rate in spec.rates:
        measure(rate)
    for _ in range(spec.refine_steps):
        between = next_bisection_rate(done, spec.sla, spec.resolution)
        if between is None:
            break
        measure(round(between, 3))
    ordered = tuple(sorted(done, key=lambda s: s.rate))
    return SweepResult(target.url, model, ordered, effective_throughput(ordered, spec.sla), ready_s)


# Each repeat's requests get seeds of their own: a server's prefix cache must not serve a
# repeat the prompts it saw before. Above any sweep's count of rates (rates + bisection steps).
REPEAT_SEED_STRIDE = 100_000


def repeat_spec(spec: SweepSpec, repeat: int) -> SweepSpec:
    """The spec of the ``repeat``-th sweep (0: the spec itself, so one sweep is as before)."""
    return replace(spec, seed=spec.seed + REPEAT_SEED_STRIDE * repeat)


def run_sweeps(
    spec: SweepSpec,
    target: Target,
    workdir: Path,
    repeats: int,
    on_rate: Callable[[int, RateSummary], None],
) -> list[SweepResult]:
    """``repeats`` sweeps of the same rates on one server, each with fresh requests; each
    rate's summary goes to ``on_rate`` with its sweep's index."""
    results: list[SweepResult] = []
    for repeat in range(repeats):
        folder = workdir / f"repeat-{repeat}" if repeat else workdir

        def keep(summary: RateSummary, repeat: int = repeat) -> None:
            on_rate(repeat, summary)

        results.append(run_sweep(repeat_spec(spec, repeat), target, folder, keep))
    return results


def measure_rate(
    spec: SweepSpec,
    target: Target,
    model: str,
    words: Sequence[str],
    workdir: Path,
    rate: float,
    index: int,
    watch: RunWatch | None = None,
) -> RateSummary:
    """One rate: fresh requests (a seed of their own: no prefix the server cached at an earlier
    rate), the client's run, the server's /metrics around it; ``watch`` hears of the client's
    timed run's start and end."""
    try:
        target.ensure()
    except WorkerFailure as failure:
        return failed_rate(rate, failure.outcome, str(failure))
    seed = spec.seed + 1000 * index
    lengths = draw_lengths(find_shape(spec.workload), spec.context, spec.requests, seed)
    folder = workdir / f"rate-{index}"
    folder.mkdir(parents=True, exist_ok=True)
    dataset = folder / "requests.json"
    write_dataset(dataset, lengths, list(words), seed)
    command = client_command(
        spec.client_python,
        target.url,
        model,
        spec.tokenizer,
        dataset,
        spec.requests,
        rate,
        spec.burstiness,
        folder,
        seed,
    )
    before = target.metrics() or ""
    try:
        run = run_client(command, folder, folder / "client.log", spec.rate_timeout_s, watch)
    except TimeoutError as exc:
        return failed_rate(rate, "timeout", f"{exc}. {target.died()}".strip())
    except RuntimeError as exc:
        return failed_rate(rate, "error", f"{target.died() or exc}")
    died = target.died()
    if died:
        return failed_rate(rate, "error", died)
    summary = summarise_rate(rate, run.requests, run.duration_s, spec.sla)
    after = target.metrics() or ""
    means = server_means_ms(before, after)
    return replace(summary, server_mean_ms=means, issued_rps=issue_rate(run.start_times))


def parse_rates(text: str) -> tuple[float, ...]:
    """``--rates 0.5,1,2,inf`` → ascending request rates (``inf``: all requests at once)."""
    try:
        rates = tuple(sorted({float(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise BloomperfError(f"--rates: '{text}' is not a comma-separated list") from None
    if not rates or any(r <= 0 or math.isnan(r) for r in rates):
        raise BloomperfError(f"--rates: '{text}' must list rates above 0 (requests/s, or inf)")
    return rates
