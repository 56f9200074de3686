"""Change detection over the nightly history: the nights where a cell's figures changed.

The folder of nights and each cell's series over them are ``bloomperf.store.history.nights``;
showing the changes is ``bloomperf.render.history.changes``, the ``bloomperf history`` command
``bloomperf.cli.history``.

Change detection: a persistent-shift test on log values
---------------------------------------------------------
A night's ms/token carries noise (clocks, neighbours, the file cache) and sometimes one bad
night (+40 % once, then back). What matters is a *level* that moved and stayed. For each cell and
metric the series of nights is scanned in order; a change is declared at night k when

* the median of the nights after k (k and up to ``window``−1 more, at least ``confirm`` of them)
  differs from the median of the up to ``window`` nights before k (since the last change) by more
  than ``max(log(1 + tolerance), c · σ · √(π/2) · √(1/n_before + 1/n_after))`` on log scale.

Why this and not a plain threshold or a CUSUM:

* medians on both sides: one outlier night can move neither median, so it cannot raise an alarm;
  a shift has to hold on most of the following nights (a majority of up to ``window`` nights:
  two bad nights in a row inside six normal ones do not make a change either), which is what
  "persists" means here. A change at the newest nights needs ``confirm`` nights to be seen.
* logs: a 15 % slowdown is the same step at 200 ms/token and at 0.7 ms/token.
* σ, the night-to-night noise, is estimated per series as MAD(differences) · 1.4826 / √2, the
  usual robust noise estimate of change-point methods, over the lag-1 and lag-2 differences: a
  step spoils two of them and an outlier four, so neither inflates σ, and twice the differences
  make σ steadier on a month of nights (a σ that comes out low by chance is what turns a clump
  of noise into a false change). √(π/2) is the standard error of a median relative to a mean;
  with c = 4 a pure-noise series crosses the bar about once in 10⁴ comparisons.
* the ``tolerance`` floor (5 %, the baseline's ms/token tolerance) keeps a real but irrelevant
  drift of 1 % on very quiet GPUs from being reported.
* CUSUM needs the in-control level and σ known in advance, and e-divisive needs permutation
  tests: both heavier and less obvious to a reader of the report than "median after vs median
  before, beyond the noise".

Where the alarm first fires the step lies somewhere in the after-window; the night reported is the
split that fits two constant levels best (least absolute deviations), i.e. the night the new
level started. The outcome of a cell (ok → oom, say) is checked the same way with the most
common outcome in place of the median.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.metrics import better, metrics
from bloomperf.store.history.nights import (
    METRIC_OUTCOME,
    Night,
    cell_ids,
    outcome_series,
    series,
)
from bloomperf.store.results import Outcome

# Defaults of the persistent-shift test (see the module docstring).
DEFAULT_TOLERANCE = 0.05
DEFAULT_WINDOW = 6
DEFAULT_CONFIRM = 3
NOISE_FACTOR = 4.0


@dataclass(frozen=True)
class Change:
    """A level shift in one cell's metric that started at ``nights[night]``."""

    cell: str
    metric: str
    night: int
    night_label: str
    before: float | str
    after: float | str
    nights_after: int  # how many nights confirm it (fewer than the window near the newest night)

    @property
    def relative(self) -> float | None:
        """after / before − 1 for figures; None for outcome changes."""
        if isinstance(self.before, float) and isinstance(self.after, float) and self.before > 0:
            return self.after / self.before - 1.0
        return None

    @property
    def worse(self) -> bool:
        """A figure that moved the wrong way for its metric's direction (slower, larger, a
        throughput that fell), or a cell that stopped running."""
        if self.metric == METRIC_OUTCOME:
            return self.before == Outcome.OK.value and self.after != Outcome.OK.value
        if isinstance(self.before, float) and isinstance(self.after, float):
            return better(self.metric, self.after, self.before)
        return False


# ---- the persistent-shift test ---------------------------------------------------------------


def noise_sigma(logs: Sequence[float]) -> float:
    """Robust night-to-night noise: MAD of the lag-1 and lag-2 differences · 1.4826 / √2."""
    diffs = [logs[i] - logs[i - lag] for lag in (1, 2) for i in range(lag, len(logs))]
    if len(diffs) < 2:
        return 0.0
    centre = statistics.median(diffs)
    mad = statistics.median(abs(d - centre) for d in diffs)
    return 1.4826 * mad / math.sqrt(2.0)


def shift_threshold(sigma: float, n_before: int, n_after: int, tolerance: float) -> float:
    noise = NOISE_FACTOR * sigma * math.sqrt(math.pi / 2) * math.sqrt(1 / n_before + 1 / n_after)
    return max(math.log1p(tolerance), noise)


def split_cost(values: Sequence[float], split: int) -> float:
    """Sum of absolute deviations from each side's median: small where two levels fit best."""
    cost = 0.0
    for part in (values[:split], values[split:]):
        if part:
            centre = statistics.median(part)
            cost += sum(abs(v - centre) for v in part)
    return cost


def locate_split(values: Sequence[float], lo: int, candidates: range, hi: int) -> int:
    """The candidate split of ``values[lo:hi]`` with the lowest two-level cost (first on ties)."""
    return min(candidates, key=lambda k: (split_cost(values[lo:hi], k - lo), k))


def find_shifts(
    logs: Sequence[float],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    window: int = DEFAULT_WINDOW,
    confirm: int = DEFAULT_CONFIRM,
) -> list[int]:
    """Positions in ``logs`` where a persistent level shift starts (see the module docstring)."""
    check_test_settings(tolerance, window, confirm)
    sigma = noise_sigma(logs)
    shifts: list[int] = []
    start = 0
    k = confirm
    while k + confirm <= len(logs):
        before = logs[max(start, k - window) : k]
        after = logs[k : k + window]
        if is_shifted(before, after, sigma, tolerance):
            lo = max(start, k - window)
            hi = k + len(after)
            # The alarm fires once the after-window's median is shifted: the step lies in it, or
            # in the before-window's newest nights when too few nights precede it for the alarm
            # to fire at the step itself (a step at the first detectable night): every split
            # that leaves a night before it is a candidate, else such a step is dated late.
            split = locate_split(logs, lo, range(lo + 1, hi), hi)
            new_level = logs[split : split + window]
            # split > lo >= start: at least one night of the old level precedes the split.
            if len(new_level) >= confirm and is_shifted(
                logs[max(start, split - window) : split], new_level, sigma, tolerance
            ):
                shifts.append(split)
                start = split
                k = split + confirm
                continue
        k += 1
    return shifts


def is_shifted(before: Sequence[float], after: Sequence[float], sigma: float, tol: float) -> bool:
    if not before or not after:
        return False
    step = abs(statistics.median(after) - statistics.median(before))
    return step > shift_threshold(sigma, len(before), len(after), tol)


def find_outcome_shifts(
    outcomes: Sequence[str], *, window: int = DEFAULT_WINDOW, confirm: int = DEFAULT_CONFIRM
) -> list[int]:
    """Where the most common outcome changes and stays changed on most following nights."""
    check_test_settings(DEFAULT_TOLERANCE, window, confirm)
    shifts: list[int] = []
    start = 0
    k = confirm
    while k + confirm <= len(outcomes):
        before = most_common(outcomes[max(start, k - window) : k])
        after_window = outcomes[k : k + window]
        after = most_common(after_window)
        # The new outcome must hold tonight and on a strict majority of the following nights.
        strict = after_window.count(after) * 2 > len(after_window)
        if after != before and outcomes[k] == after and strict:
            shifts.append(k)
            start = k
            k += confirm
            continue
        k += 1
    return shifts


def most_common(values: Sequence[str]) -> str:
    counts = Counter(values)
    # Ties go to the earlier value: the known state wins over a new one.
    return max(values, key=lambda v: (counts[v], -values.index(v)))


def check_test_settings(tolerance: float, window: int, confirm: int) -> None:
    if not 0 <= tolerance < 1:
        raise BloomperfError(f"--change-tolerance: must be a fraction below 1, found {tolerance}")
    if confirm < 2:
        raise BloomperfError(f"--confirm: must be at least 2 nights, found {confirm}")
    if window < confirm:
        raise BloomperfError(f"--window: must be at least --confirm ({confirm}), found {window}")


def tracked_metrics() -> tuple[str, ...]:
    """What the nightly history watches: each registered metric marked ``watched`` (ms/token,
    peak memory, a sweep's figures, and what a package adds; not load time or latency, which
    swing with the file cache and neighbours night to night)."""
    return tuple(m.name for m in metrics() if m.watched)


def detect_changes(
    nights: Sequence[Night],
    *,
    metrics: Sequence[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    window: int = DEFAULT_WINDOW,
    confirm: int = DEFAULT_CONFIRM,
) -> list[Change]:
    """Every persistent change in the history, per cell and metric (``tracked_metrics`` unless
    given), oldest first."""
    metrics = tracked_metrics() if metrics is None else metrics
    changes: list[Change] = []
    for cell in cell_ids(nights):
        for metric in metrics:
            points = series(nights, cell, metric)
            logs = [math.log(v) for _, v in points]
            for pos in find_shifts(logs, tolerance=tolerance, window=window, confirm=confirm):
                changes.append(numeric_change(cell, metric, nights, points, pos, window, len(logs)))
        outcomes = outcome_series(nights, cell)
        values = [o for _, o in outcomes]
        for pos in find_outcome_shifts(values, window=window, confirm=confirm):
            index = outcomes[pos][0]
            changes.append(
                Change(
                    cell=cell,
                    metric=METRIC_OUTCOME,
                    night=index,
                    night_label=nights[index].label,
                    before=most_common(values[max(0, pos - window) : pos]),
                    after=values[pos],
                    nights_after=min(window, len(values) - pos),
                )
            )
    changes.sort(key=lambda c: (c.night, c.cell, c.metric))
    return changes


def numeric_change(
    cell: str,
    metric: str,
    nights: Sequence[Night],
    points: Sequence[tuple[int, float]],
    pos: int,
    window: int,
    length: int,
) -> Change:
    values = [v for _, v in points]
    index = points[pos][0]
    return Change(
        cell=cell,
        metric=metric,
        night=index,
        night_label=nights[index].label,
        before=float(statistics.median(values[max(0, pos - window) : pos])),
        after=float(statistics.median(values[pos : pos + window])),
        nights_after=min(window, length - pos),
    )


def new_changes(nights: Sequence[Night], **settings: Any) -> list[Change]:
    """Changes the newest night brought to light: found now, not found without that night.

    A change stays in the history for good; a nightly job should fail only on the night it is
    first confirmed, not on every night after it.
    """
    if not nights:
        return []
    known = {(c.cell, c.metric, c.night) for c in detect_changes(nights[:-1], **settings)}
    return [
        c for c in detect_changes(nights, **settings) if (c.cell, c.metric, c.night) not in known
    ]
