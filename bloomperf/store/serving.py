"""A serving sweep as results: ``bloomperf serve`` writes an ordinary results document
(``bloomperf-results``) holding one cell per server and workload (row ``serve-<workload>``), so
that baselines, ``diff``, history and the report treat it like any cell.

One truth per figure: the cell's ``figures`` hold what the gate judges (the registered
``serving_*`` metrics of ``core.metrics``, one sample per sweep), derived once from the rates;
its ``details["serving"]`` hold the SLA, the sweep's settings and every rate's row (the
latency–throughput curve). The sweep's former document of its own (kind ``bloomperf-serving``,
version 1) is read as such a run (``run_from_sweep_v1``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bloomperf.backends import serving_row
from bloomperf.catalog.serving_workload import DEFAULT_SHAPE, SHAPES, scaled_means
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import unknown_name
from bloomperf.store.results import CellResult, ModelInfo, Outcome, RunResult, WorkloadInfo

KIND = "bloomperf-serving"  # the sweep's own document, version 1: read, no longer written
EFFECTIVE = "serving_effective_rps"
TTFT_P99 = "serving_ttft_p99_ms"
ITL_P99 = "serving_itl_p99_ms"
# vLLM's --dtype values, as the results' dtypes name them (the server's default: float32).
ENGINE_DTYPES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
}


@dataclass(frozen=True)
class Sla:
    ttft_s: float = 2.0  # prompt latency limit
    token_rate: float = 4.0  # tokens/s each user must see after the first (FastGen's middle tier)
    attainment: float = 0.9  # share of requests that must meet both

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.token_rate > 0 and 0 < self.attainment <= 1):
            raise BloomperfError(
                f"--sla: ttft {self.ttft_s} s and token rate {self.token_rate}/s must be > 0 and"
                f" attainment {self.attainment} in (0, 1]"
            )

    @property
    def tpot_s(self) -> float:
        return 1.0 / self.token_rate


@dataclass(frozen=True)
class RequestTiming:
    """One request as the client saw it (seconds; ``itls`` the gaps between streamed tokens)."""

    success: bool
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    latency_s: float
    itls_s: tuple[float, ...] = ()

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; None for a one-token or failed request."""
        if not self.success or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class RateSummary:
    """One rate of a sweep: what was offered, what came back, how the tail looks."""

    rate: float  # offered requests/s (math.inf: all at once)
    outcome: str  # ok | error | timeout
    message: str
    requests: int
    completed: int
    duration_s: float
    request_throughput: float  # completed requests/s
    output_throughput: float  # output tokens/s
    ttft_ms: dict[str, float]  # "p50" … "p99"
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    sla_met: float  # share of the requests sent that met the SLA
    mean_ms: dict[str, float] = field(default_factory=dict)  # client's "ttft", "itl" means
    server_mean_ms: dict[str, float] = field(default_factory=dict)  # the server's /metrics
    issued_rps: float | None = None  # how fast the client sent them (its headroom at inf)

    def meets(self, sla: Sla) -> bool:
        return self.outcome == "ok" and self.sla_met >= sla.attainment


# One sweep: its rates and its effective throughput (None: not known yet).
Sweep = tuple[Sequence[RateSummary], float | None]


def encode_rate(summary: RateSummary) -> dict[str, Any]:
    data = asdict(summary)
    for key in ("rate", "request_throughput", "output_throughput"):
        if not math.isfinite(data[key]):  # JSON has no inf: "inf" is a rate, NaN nothing
            data[key] = "inf" if math.isinf(data[key]) else None
    return data


def decode_rate(data: dict[str, Any]) -> RateSummary:
    values = dict(data)
    for key in ("rate", "request_throughput", "output_throughput"):
        value = values[key]
        values[key] = math.nan if value is None else float(value)  # float() reads "inf"
    return RateSummary(**values)


def repeated_figures(sweeps: Sequence[Sweep]) -> dict[str, tuple[float, ...]]:
    """The figures of several sweeps of the same rates (``serve --repeat``): one sample per
    sweep and metric, so that the gate's bootstrap interval has a spread. A sweep with no
    such figure (no rate met the SLA: no effective throughput) adds no sample of it."""
    figures: dict[str, tuple[float, ...]] = {}
    for rates, effective in sweeps:
        for name, values in sweep_figures(list(rates), effective).items():
            figures[name] = figures.get(name, ()) + values
    return figures


def sweep_figures(
    rates: list[RateSummary], effective_rps: float | None
) -> dict[str, tuple[float, ...]]:
    """What the gate judges of a sweep, one sample each (none where there is no figure).

    The effective throughput; where every rate met the SLA, ``inf`` included, the completed
    requests/s at ``inf`` (the most the server gave while meeting it). The p99 TTFT and ITL at
    the lowest rate that ran: the tail under the sweep's lightest load, comparable between two
    sweeps of the same ``--rates`` (at the effective rate, two sweeps would compare different
    loads).
    """
    ran = sorted((r for r in rates if r.outcome == "ok"), key=lambda r: r.rate)
    effective = effective_rps
    if effective is not None and math.isinf(effective) and ran:
        effective = ran[-1].request_throughput
    figures = {EFFECTIVE: effective, TTFT_P99: None, ITL_P99: None}
    if ran:
        figures[TTFT_P99] = ran[0].ttft_ms.get("p99")
        figures[ITL_P99] = ran[0].itl_ms.get("p99")
    # A figure there is none of is left out: the gate says "not measured" where a baseline has it.
    return {k: (v,) for k, v in figures.items() if v is not None and math.isfinite(v) and v > 0}


def sweep_details(
    settings: dict[str, Any],
    sla: Sla,
    rates: list[RateSummary],
    effective_rps: float | None,
    repeats: Sequence[Sweep] = (),
) -> dict[str, Any]:
    """The cell's ``details["serving"]``: every rate's row, the SLA and the settings; the
    first sweep's rows are the curve, a repeated sweep's are under ``repeats`` (absent when
    there is one sweep, so a single sweep's file is what it always was)."""
    details = {
        "settings": settings,
        "sla": asdict(sla),
        **encode_sweep(rates, effective_rps),
    }
    if repeats:
        details["repeats"] = [encode_sweep(list(r), e) for r, e in repeats]
    return details


def encode_sweep(rates: list[RateSummary], effective_rps: float | None) -> dict[str, Any]:
    return {
        # inf: every rate met the SLA, all requests at once included (JSON has no inf)
        "effective_rps": "inf" if effective_rps == math.inf else effective_rps,
        "rates": [encode_rate(r) for r in sorted(rates, key=lambda r: r.rate)],
    }


def sweep_cell(
    settings: dict[str, Any],
    sla: Sla,
    rates: list[RateSummary],
    effective_rps: float | None,
    repeats: Sequence[Sweep] = (),
) -> CellResult:
    """The sweep's one cell: ok when any rate ran, else the first rate's outcome and message.
    ``repeats``: the sweeps after the first (``serve --repeat``), each adding its samples."""
    ran = any(r.outcome == "ok" for r in rates)
    first = rates[0] if rates else None
    outcome = Outcome.OK if ran or first is None else Outcome(first.outcome)
    return CellResult(
        backend=serving_row(str(settings.get("workload", DEFAULT_SHAPE))),
        dtype=engine_dtype(str(settings.get("engine_args") or "")),
        batch_size=1,
        outcome=outcome,
        message="" if ran or first is None else first.message,
        details={"serving": sweep_details(settings, sla, rates, effective_rps, repeats)},
        figures=repeated_figures([(rates, effective_rps), *repeats]),
    )


def engine_dtype(engine_args: str) -> str:
    """The served dtype from ``--engine-args`` (``--dtype X`` or ``--dtype=X``)."""
    words = engine_args.replace("=", " ").split()
    given = words[words.index("--dtype") + 1] if "--dtype" in words[:-1] else "float32"
    if given not in ENGINE_DTYPES:
        # The aliases (float, half) are read, not offered: the three names fit the line.
        refused = unknown_name(given, ["float32", "bfloat16", "float16"], used=41)
        raise BloomperfError(f"--engine-args: --dtype {refused}")
    return ENGINE_DTYPES[given]


def sweep_workload(settings: dict[str, Any]) -> WorkloadInfo:
    """The run's workload: its new tokens are the mean generation length the sweep drew (so a
    sweep of another workload or context is incomparable with a baseline, as a run with other
    ``--new-tokens`` is)."""
    shape = SHAPES.get(str(settings.get("workload")), SHAPES[DEFAULT_SHAPE])
    _, output = scaled_means(shape, int(settings.get("max_model_len") or 512))
    return WorkloadInfo(new_tokens=max(1, round(output)), cycles=1, warmup=0, prompts=())


# What a sweep's figures mean besides the server: its SLA (the effective throughput is the
# highest rate meeting it) and its design (the p99s are taken at the lowest of --rates, over
# --requests requests; --refine and --burstiness move the effective throughput).
DESIGN = ("rates", "requests", "refine", "burstiness")


def sweep_mismatch(details: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """Why a sweep's figures cannot be judged against a baseline cell's (``details`` of
    each): another SLA or another sweep design. None when they agree, or when either side does
    not record it (a file written before the SLA was compared is judged as it was)."""
    ours, theirs = details.get("serving"), expected.get("serving")
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        return None
    sla, their_sla = sla_of(ours), sla_of(theirs)
    if sla is not None and their_sla is not None and sla != their_sla:
        mine_text, theirs_text = describe_sla(sla), describe_sla(their_sla)
        return f"the sweep's SLA ({mine_text}) is not the baseline's ({theirs_text})"
    mine, baseline = ours.get("settings") or {}, theirs.get("settings") or {}
    for key in DESIGN:
        a, b = mine.get(key), baseline.get(key)
        if a is not None and b is not None and design_value(a) != design_value(b):
            return f"the sweep's --{key} {a} is not the baseline's {b}"
    return None


def sla_of(data: dict[str, Any]) -> Sla | None:
    try:
        return Sla(**data["sla"])
    except (KeyError, TypeError, BloomperfError):
        return None


def describe_sla(sla: Sla) -> str:
    return f"TTFT <= {sla.ttft_s:g} s, >= {sla.token_rate:g} tokens/s, {sla.attainment:.0%}"


def design_value(value: Any) -> Any:
    """A setting as compared: ``--rates "4, 2"`` is ``2,4``; 1 is 1.0."""
    try:
        return tuple(sorted({float(part) for part in str(value).split(",") if part.strip()}))
    except ValueError:
        return str(value)


def read_sweep(details: dict[str, Any]) -> tuple[Sla, list[RateSummary], float | None] | None:
    """The SLA, rates and effective throughput in a serving cell's details (a result's or a
    baseline's); None for any other cell."""
    data = details.get("serving")
    if not isinstance(data, dict):
        return None
    effective = data.get("effective_rps")
    try:
        rates = [decode_rate(r) for r in data["rates"]]
        sla = Sla(**data["sla"])
    except (KeyError, TypeError, ValueError):
        return None  # a hand-edited detail: the figures are still judged, no curve is drawn
    return sla, rates, math.inf if effective == "inf" else effective


def run_from_sweep_v1(data: dict[str, Any], where: str) -> RunResult:
    """A version 1 serving document as a run of one cell. It recorded no machine, so its
    topology is ``unrecorded``: readable and reported, incomparable with any baseline."""
    if data.get("version") != 1:
        raise BloomperfError(f"{where}: serving results version {data.get('version')}, want 1")
    try:
        settings = dict(data["settings"])
        sla = Sla(**data["sla"])
        rates = [decode_rate(r) for r in data["rates"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise BloomperfError(f"{where}: malformed serving results ({exc})") from None
    effective = data.get("effective_rps")
    effective = math.inf if effective == "inf" else effective
    model = str(settings.get("model") or "unrecorded")
    return RunResult(
        model=ModelInfo(model, "", 0, 0),
        workload=sweep_workload(settings),
        topology="unrecorded",
        environment={},
        cells=(sweep_cell(settings, sla, rates, effective),),
        complete=bool(data.get("complete")),
    )
