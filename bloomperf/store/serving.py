"""The serving sweep's results file: one JSON document per sweep (kind ``bloomperf-serving``),
rewritten atomically after every rate so that an interrupted sweep keeps what it measured.

Until the metric registry of issue 29 carries serving figures in the run's results file, the
sweep keeps its own document; ``docs/serving.md`` shows its fields.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import read_document, write_json_atomic

KIND = "bloomperf-serving"
VERSION = 1


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
        values[key] = math.inf if value == "inf" else math.nan if value is None else float(value)
    return RateSummary(**values)


def sweep_document(
    settings: dict[str, Any],
    sla: Sla,
    rates: list[RateSummary],
    effective_rps: float | None,
    complete: bool,
) -> dict[str, Any]:
    return {
        "kind": KIND,
        "version": VERSION,
        "complete": complete,
        "settings": settings,
        "sla": asdict(sla),
        # inf: every rate met the SLA, all requests at once included (JSON has no inf)
        "effective_rps": "inf" if effective_rps == math.inf else effective_rps,
        "rates": [encode_rate(r) for r in sorted(rates, key=lambda r: r.rate)],
    }


def save_sweep(path: Path, document: dict[str, Any]) -> None:
    write_json_atomic(path, document)


def load_sweep(path: Path) -> dict[str, Any]:
    """A sweep document, its rates decoded (``BloomperfError`` naming the file otherwise)."""
    data = read_document(path, "serving results")
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise BloomperfError(f"{path}: not a bloomperf serving results file (kind {KIND})")
    if data.get("version") != VERSION:
        found = data.get("version")
        raise BloomperfError(f"{path}: serving results version {found}, want {VERSION}")
    try:
        data["rates"] = [decode_rate(r) for r in data["rates"]]
        data["sla"] = Sla(**data["sla"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BloomperfError(f"{path}: malformed serving results ({exc})") from None
    return data
