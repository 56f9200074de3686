"""The server's own view of a rate, from its Prometheus text at ``/metrics``: the mean TTFT and
inter-token latency of the requests between two scrapes (the histograms' sum and count deltas).
bloomperf's client-side figures are checked against these (docs/serving.md says how closely).
No I/O: the text comes from the harness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
# `name_sum{labels} value` or `name_count{labels} value`; labels (model name, engine) summed.
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*$")


@dataclass(frozen=True)
class HistogramTotals:
    total: float  # the histogram's _sum, seconds
    count: float

    def minus(self, before: HistogramTotals) -> HistogramTotals:
        return HistogramTotals(self.total - before.total, self.count - before.count)

    @property
    def mean_ms(self) -> float | None:
        return self.total / self.count * 1000.0 if self.count > 0 else None


def histogram_totals(text: str, name: str) -> HistogramTotals:
    """The sum and count of histogram ``name`` over all its label sets (zero when absent)."""
    total = count = 0.0
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        metric, value = match.group(1), float(match.group(2))
        if metric == f"{name}_sum":
            total += value
        elif metric == f"{name}_count":
            count += value
    return HistogramTotals(total, count)


def server_means_ms(before: str, after: str) -> dict[str, float]:
    """The server's mean TTFT and ITL (ms) over the requests served between two scrapes."""
    means = {}
    for key, name in (("ttft", TTFT), ("itl", ITL)):
        mean = histogram_totals(after, name).minus(histogram_totals(before, name)).mean_ms
        if mean is not None:
            means[key] = mean
    return means
