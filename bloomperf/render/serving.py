"""The serving sweep as a table: one row per rate (the latency–throughput curve in numbers),
then the effective throughput under the SLA. Formats only; the judging is in analysis."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bloomperf.core.formatting import format_table
from bloomperf.store.serving import RateSummary, Sla

HEADERS = (
    "rate/s",
    "sent/s",
    "req/s",
    "tok/s",
    "TTFT p50/p99 ms",
    "TPOT p50/p99",
    "ITL p50/p99",
    "SLA",
)


def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


def pair(figures: dict[str, float]) -> str:
    if not figures:
        return "-"
    return f"{figures['p50']:.0f}/{figures['p99']:.0f}"


def rate_row(summary: RateSummary) -> list[str]:
    if summary.outcome != "ok":
        return [rate_label(summary.rate), summary.outcome, "", "", "", "", "", ""]
    sent = summary.issued_rps
    return [
        rate_label(summary.rate),
        f"{sent:.1f}" if sent is not None else "-",
        f"{summary.request_throughput:.2f}",
        f"{summary.output_throughput:.1f}",
        pair(summary.ttft_ms),
        pair(summary.tpot_ms),
        pair(summary.itl_ms),
        f"{summary.sla_met:.0%}",
    ]


def sla_line(sla: Sla) -> str:
    return (
        f"SLA: TTFT <= {sla.ttft_s:g} s and >= {sla.token_rate:g} tokens/s per user, "
        f"for {sla.attainment:.0%} of requests"
    )


def render_sweep(rates: Sequence[RateSummary], sla: Sla, effective_rps: float) -> str:
    ordered = sorted(rates, key=lambda s: s.rate)
    lines = [format_table(list(HEADERS), [rate_row(s) for s in ordered]), sla_line(sla)]
    if ordered and effective_rps == ordered[-1].rate and effective_rps > 0:
        lines.append(
            f"effective throughput: at least {effective_rps:g} requests/s "
            "(every rate met the SLA: add higher --rates)"
        )
    else:
        lines.append(f"effective throughput: {effective_rps:g} requests/s")
    for summary in ordered:
        if summary.outcome != "ok" or summary.message:
            first = summary.message.splitlines()[0] if summary.message else ""
            lines.append(f"  rate {rate_label(summary.rate)}: {summary.outcome}: {first}"[:100])
    return "\n".join(lines)


def render_agreement(rates: Sequence[RateSummary]) -> str:
    """bloomperf's mean TTFT and ITL beside the server's own (/metrics), per rate."""
    rows = []
    for s in sorted(rates, key=lambda s: s.rate):
        if s.outcome == "ok" and s.server_mean_ms:
            rows.append(
                [rate_label(s.rate)]
                + [f"{s.mean_ms.get(k, math.nan):.1f}" for k in ("ttft", "itl")]
                + [f"{s.server_mean_ms.get(k, math.nan):.1f}" for k in ("ttft", "itl")]
            )
    headers = ["rate/s", "TTFT ms", "ITL ms", "server TTFT", "server ITL"]
    return format_table(headers, rows) if rows else ""
