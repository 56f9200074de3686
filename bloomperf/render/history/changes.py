"""The history's changes for people: a text or markdown section, and what ``bloomperf diff
--history`` adds. The changes themselves are ``bloomperf.analysis.changes``'s."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bloomperf.analysis.changes import Change, detect_changes, new_changes
from bloomperf.catalog.provenance import what_changed
from bloomperf.core.formatting import markdown_table, plain
from bloomperf.core.metrics import format_value
from bloomperf.store.history.nights import Night, load_history


def describe_change(c: Change) -> str:
    rel = c.relative
    shift = f" ({rel * 100:+.1f} %)" if rel is not None else ""
    return (
        f"{format_value(c.metric, c.before)} → {format_value(c.metric, c.after)}{shift}"
        f", {c.nights_after} night{'s' if c.nights_after != 1 else ''} since"
    )


def render_changes(
    changes: Sequence[Change], nights: Sequence[Night], fmt: str, new: Sequence[Change] = ()
) -> str:
    """The changes as a text or markdown section; ``new`` ones are flagged."""
    new_keys = {(c.cell, c.metric, c.night) for c in new}
    span = f"{nights[0].label} … {nights[-1].label}" if nights else "no nights"
    count = f"{len(nights)} night{'s' if len(nights) != 1 else ''}"
    title = f"History: {count} ({span}), {len(changes)} change(s)"
    rows = [
        [
            c.night_label,
            c.cell,
            c.metric,
            describe_change(c),
            ("new, " if (c.cell, c.metric, c.night) in new_keys else "")
            + ("worse" if c.worse else "better"),
        ]
        for c in changes
    ]
    for row, c in zip(rows, changes, strict=True):
        row.append("; ".join(changed_at(nights, c.night)) or "nothing recorded")
    header = ["Night", "Cell", "Metric", "Change", "Kind", "What changed that night"]
    if fmt == "markdown":
        lines = [f"### {title}", ""]
        if rows:
            lines += markdown_table(header, rows)
        else:
            lines.append("No persistent change in any cell.")
        return "\n".join(lines) + "\n"
    lines = [title]
    for r in rows:
        # Three lines a change: the longest cell id and change still fit 100 columns.
        lines += [
            f"  {r[0]}  {r[1]}  {r[2]} [{r[4]}]",
            f"      {r[3]}",
            f"      what changed: {plain(r[5])}",
        ]
    return "\n".join(lines) + "\n"


def changed_at(nights: Sequence[Night], night: int) -> list[str]:
    """What differs between the night a step began and the night before it."""
    if night <= 0 or night >= len(nights):
        return []
    return what_changed(nights[night - 1].run.environment, nights[night].run.environment)


def history_section(folder: Path, fmt: str, **settings: Any) -> tuple[str, bool]:
    """What ``bloomperf diff --history DIR`` adds: the section, and whether the newest night
    confirmed a change for the worse (the nightly job fails on that night only)."""
    nights = load_history(folder)
    changes = detect_changes(nights, **settings)
    new = new_changes(nights, **settings)
    return render_changes(changes, nights, fmt, new), any(c.worse for c in new)
