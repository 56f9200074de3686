"""The report's "What changed" section: what differs, between the run compared with and this one,
in what can explain a step: the bloomperf commit and its dirty flag, the driver, CUDA and NCCL,
torch and every other package version.

The run compared with is the previous night of the history when the report has one (the night
before this run's, or the newest when this run is not in it yet); else the baseline, whose
provenance entries record the software its figures were measured with (a baseline accepted from a
run: the versions; the blog's: its package requirements). The lines are
``provenance.what_changed``'s, the same as `bloomperf diff A B` and `history changes` print.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bloomperf.catalog.provenance import NOTHING_CHANGED, what_changed
from bloomperf.core.formatting import markdown_text
from bloomperf.render.report.environment import shown_baseline
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.accept import software_environment
from bloomperf.store.history.nights import Night
from bloomperf.store.results import RunResult


@dataclass(frozen=True)
class WhatChanged:
    """What differs from one earlier run (``against`` names it); ``unrecorded``: what that run
    does not record, so that no difference can be told."""

    against: str
    lines: tuple[str, ...]
    unrecorded: tuple[str, ...] = ()


def what_changed_since(
    run: RunResult, nights: Sequence[Night], baseline: Baseline | None
) -> list[WhatChanged]:
    """Against the previous night where there is one, else against the baseline's provenance."""
    night = previous_night(nights, run)
    if night is not None:
        lines = what_changed(night.run.environment, run.environment)
        return [WhatChanged(f"the previous night, {night.label}", tuple(lines))]
    if baseline is None:
        return []
    # The entries behind the cells this run is judged on (every entry when none matches).
    ids = {c.id for c in run.cells}
    used = {c.provenance for c in baseline.cells if c.id in ids} or {
        p.id for p in baseline.provenance
    }
    found = []
    for entry in baseline.provenance:
        if entry.id in used:
            recorded = software_environment(entry)
            lines = what_changed(
                recorded_part(recorded, run.environment), recorded_part(run.environment, recorded)
            )
            against = f"the baseline {shown_baseline(baseline.path)}, as measured in {entry.id}"
            found.append(WhatChanged(against, tuple(lines), unrecorded(recorded, run.environment)))
    return found


def previous_night(nights: Sequence[Night], run: RunResult) -> Night | None:
    """The night before this run's in the history, or the newest when the run is not in it."""
    mine = [i for i, n in enumerate(nights) if n.run.started_at == run.started_at]
    if mine:
        return nights[mine[0] - 1] if mine[0] > 0 else None
    return nights[-1] if nights else None


def recorded_part(environment: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``environment`` that ``other`` records too: a version a baseline never wrote
    down has not changed, it is unknown (and a baseline's note is no package a run has)."""
    packages = environment.get("packages") or {}
    kept = other.get("packages") or {}
    part = {k: v for k, v in environment.items() if k in other}
    part["packages"] = {k: v for k, v in packages.items() if k in kept}  # only the shared ones
    return part


def unrecorded(recorded: Mapping[str, Any], environment: Mapping[str, Any]) -> tuple[str, ...]:
    """What explains most steps, which the run records and ``recorded`` does not."""
    have, known = key_facts(environment), key_facts(recorded)
    return tuple(name for name, value in have.items() if value and not known[name])


def key_facts(environment: Mapping[str, Any]) -> dict[str, Any]:
    git = (environment.get("provenance") or {}).get("git") or {}
    return {
        "the bloomperf commit": git.get("commit"),
        "driver": environment.get("driver"),
        "CUDA": environment.get("cuda_torch"),
        "NCCL": environment.get("nccl"),
        "torch": (environment.get("packages") or {}).get("torch"),
    }


# ---- rendering ----------------------------------------------------------------------------------

HEADING = "What changed"
NOTHING_TO_COMPARE = "Nothing to compare with: no history and no baseline."


def markdown_lines(found: Sequence[WhatChanged]) -> list[str]:
    lines = [f"## {HEADING}", ""]
    for item in found:
        lines += [f"Since {markdown_text(item.against)}:", ""]
        lines += [f"- {markdown_text(line)}" for line in item.lines or (NOTHING_CHANGED,)]
        lines += ["", markdown_text(unrecorded_note(item)), ""] if item.unrecorded else [""]
    return lines + ([] if found else [NOTHING_TO_COMPARE, ""])


def html_lines(found: Sequence[WhatChanged]) -> list[str]:
    lines = [f"<h2>{HEADING}</h2>"]
    for item in found:
        shown = "".join(f"<li>{html.escape(x)}</li>" for x in item.lines or (NOTHING_CHANGED,))
        lines += [f"<p>Since {html.escape(item.against)}:</p>", f"<ul>{shown}</ul>"]
        if item.unrecorded:
            lines.append(f"<p><small>{html.escape(unrecorded_note(item))}</small></p>")
    return lines + ([] if found else [f"<p>{NOTHING_TO_COMPARE}</p>"])


def unrecorded_note(item: WhatChanged) -> str:
    return f"Not recorded there, so not compared: {', '.join(item.unrecorded)}."
