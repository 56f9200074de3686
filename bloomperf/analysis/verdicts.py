"""What a verdict says: the statuses a cell can get, and its per-metric and per-cell verdicts
with the text that explains them. ``compare`` decides them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from bloomperf.analysis.stats import IMPROVED, REGRESSED, SAME, RatioEstimate
from bloomperf.core.metrics import format_value, label_of
from bloomperf.store.results import Outcome, cell_id

EXPECTED_OOM = "expected-oom"
UNEXPECTED_OOM = "unexpected-oom"
BOUNDARY_MOVED_UP = "boundary-moved-up"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
ERROR = "error"
TIMEOUT = "timeout"
SKIPPED = "skipped"
# Measured while the GPU throttled or its clocks moved (telemetry flags): neither same nor
# regressed, because the figure reflects the GPU's cooling or power budget, not the software.
UNTRUSTWORTHY = "untrustworthy"
# Metric states: a figure the run did not measure, or one the baseline keeps unjudged. A cell
# that ran but lacks a figure its baseline judges is ``not-measured`` as a whole (it fails).
NOT_MEASURED = "not-measured"
NOT_JUDGED = "not-judged"

# How a status reads in a table cell, after the measured figure (same, regressed and improved
# are told by the figure's own change); an OOM cell has no figure, so its status is the text.
CELL_LABELS = {
    BOUNDARY_MOVED_UP: " (OOM expected)",
    NO_BASELINE: " (no baseline)",
    INCOMPARABLE: " (incomparable)",
    UNTRUSTWORTHY: " UNTRUSTWORTHY",
}
OOM_LABELS = {EXPECTED_OOM: "OOM (expected)", UNEXPECTED_OOM: "OOM UNEXPECTED"}
# Cells with no figure to show: the status is all there is to say.
NOT_RUN = (ERROR, TIMEOUT, SKIPPED)
# Statuses nobody needs a line about under the table.
QUIET = (SAME, EXPECTED_OOM, SKIPPED, INCOMPARABLE, NO_BASELINE)

CELL_STATUSES = (
    SAME,
    REGRESSED,
    IMPROVED,
    EXPECTED_OOM,
    UNEXPECTED_OOM,
    BOUNDARY_MOVED_UP,
    NO_BASELINE,
    INCOMPARABLE,
    ERROR,
    TIMEOUT,
    SKIPPED,
    UNTRUSTWORTHY,
    NOT_MEASURED,
)
# Statuses that compared nothing: a run whose cells all have one was not judged at all.
UNJUDGED = (NO_BASELINE, INCOMPARABLE, SKIPPED)


@dataclass(frozen=True)
class MetricVerdict:
    metric: str  # a registered metric's name (bloomperf.core.metrics)
    status: str  # same | regressed | improved | no-baseline | not-measured | not-judged
    measured: float | None
    expected: float | None
    tolerance: float | None
    estimate: RatioEstimate | None = None

    def fails(self) -> str | None:
        if self.status != REGRESSED:
            return None
        return f"{label_of(self.metric)} regressed: {self.describe()}"

    def describe(self) -> str:
        """Measured vs expected vs tolerance, and the ratio with its confidence interval."""
        text = f"measured {format_value(self.metric, self.measured)}"
        text += f" vs expected {format_value(self.metric, self.expected)}"
        text += " (not judged)" if self.tolerance is None else f" ±{self.tolerance * 100:g}%"
        if self.estimate is not None:
            e = self.estimate
            text += f", ratio {e.ratio:.3f} (95% CI {e.low:.3f}–{e.high:.3f})"
        return text


@dataclass(frozen=True)
class CellVerdict:
    backend: str
    dtype: str
    batch_size: int
    status: str
    measured_outcome: str
    expected_outcome: str | None = None
    metrics: tuple[MetricVerdict, ...] = ()
    measured_ms_per_token: float | None = None
    expected_ms_per_token: float | None = None
    strict: bool = False
    message: str = ""  # the incomparable reason, or the cell's own error message
    # TTFT, TPOT (p50/p90/p99) and tokens/s as measured, shown beside the verdict (not judged)
    latency: dict[str, float | None] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return cell_id(self.backend, self.dtype, self.batch_size)

    def metric(self, name: str) -> MetricVerdict | None:
        return next((m for m in self.metrics if m.metric == name), None)

    def fails(self) -> str | None:
        """Why this cell fails, with measured vs expected vs tolerance; None when it passes."""
        if self.status == REGRESSED:
            reasons = [m.fails() for m in self.metrics]
            return f"{self.id}: " + "; ".join(r for r in reasons if r)
        if self.status == UNEXPECTED_OOM:
            expected = format_value("ms_per_token", self.expected_ms_per_token)
            return (
                f"{self.id}: unexpected OOM: measured out of memory vs expected to run"
                f" ({expected} in the baseline){self._detail()}"
            )
        if self.status == BOUNDARY_MOVED_UP and self.strict:
            return f"{self.id}: {self.explain()} (fails under --strict)"
        if self.status in (ERROR, TIMEOUT):
            return f"{self.id}: {self.status}{self._detail()}"
        if self.status == NOT_MEASURED:
            missing = [m for m in self.metrics if m.status == NOT_MEASURED and m.tolerance]
            named = "; ".join(f"{label_of(m.metric)} {m.describe()}" for m in missing)
            return f"{self.id}: ran, but the figures its baseline judges are missing: {named}"
        return None

    def explain(self) -> str:
        """One line for every status, failing or not."""
        measured = format_value("ms_per_token", self.measured_ms_per_token)
        if self.status in (SAME, REGRESSED, IMPROVED):
            parts = [f"{label_of(m.metric)} {m.status}: {m.describe()}" for m in self.metrics]
            return "; ".join(parts) if parts else self.status
        if self.status == BOUNDARY_MOVED_UP:
            beyond = " (beyond its OOM boundary)" if self.expected_outcome == "not-run" else ""
            return f"boundary moved up: ran at {measured} where the baseline expects OOM{beyond}"
        if self.status == EXPECTED_OOM:
            return "out of memory, as the baseline expects"
        if self.status == NO_BASELINE:
            figure = "" if self.measured_outcome == Outcome.OOM.value else f" {measured}"
            return f"no baseline cell; measured {self.measured_outcome}{figure}{self._detail()}"
        if self.status == INCOMPARABLE:
            return f"incomparable: {self.message}"
        if self.status == UNTRUSTWORTHY:
            parts = [f"{label_of(m.metric)} {m.status}: {m.describe()}" for m in self.metrics]
            return f"untrustworthy ({self.message}); " + "; ".join(parts)
        return (self.fails() or self.status).removeprefix(f"{self.id}: ")

    def _detail(self) -> str:
        return f": {self.message}" if self.message else ""


@dataclass(frozen=True)
class Comparison:
    cells: tuple[CellVerdict, ...]
    topology: str
    model: str
    baseline: str  # where the expectations came from (a path, or "no baseline")
    incomparable: str = ""
    missing: tuple[str, ...] = ()  # baseline cells (ok or oom) of the run's rows it did not run
    incomplete: str = ""  # why the run as a whole fails: nothing measured, or it did not finish
    unjudged: str = ""  # why it fails for want of a comparison: no cell was judged at all

    @property
    def why_incomparable(self) -> str:
        """The run's reason, else the first of its cells' own (a sweep under another SLA)."""
        own = (c.message for c in self.cells if c.status == INCOMPARABLE and c.message)
        return self.incomparable or next(own, "")

    @property
    def failed(self) -> bool:
        return bool(self.incomplete or self.unjudged) or any(c.fails() for c in self.cells)

    def failures(self) -> list[str]:
        cells = [message for message in (c.fails() for c in self.cells) if message]
        return [m for m in (self.incomplete, self.unjudged) if m] + cells

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(c.status for c in self.cells)
        return {status: counted[status] for status in CELL_STATUSES if counted[status]}

    @property
    def summary(self) -> str:
        parts = [f"{n} {status}" for status, n in self.counts.items()]
        text = f"{len(self.cells)} cells: " + (", ".join(parts) if parts else "none")
        if self.missing:
            text += f"; {len(self.missing)} baseline cells not in the results"
        return text + ("; FAILED" if self.failed else "")
