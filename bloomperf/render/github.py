"""``bloomperf diff --format github``: workflow commands and job outputs for GitHub Actions.

One ``::error`` annotation per failing cell (regressed, unexpected OOM, error, timeout, or a
moved OOM boundary under ``--strict``) and one ``::warning`` per cell whose pass cannot be relied
upon (incomparable, no baseline, a boundary moved up, a figure not measured), each attached to
the results file. When ``$GITHUB_OUTPUT`` is set the verdict and the counts become the step's
outputs (``verdict``, ``cells``, ``failed`` and one per status, e.g. ``regressed``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bloomperf.analysis.verdicts import (
    BOUNDARY_MOVED_UP,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_MEASURED,
    CellVerdict,
    Comparison,
)

WARN_STATUSES = (INCOMPARABLE, NO_BASELINE, BOUNDARY_MOVED_UP)


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF would end or corrupt the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, file: str, title: str, message: str) -> str:
    return f"::{level} file={escape_property(file)},title={escape_property(title)}::" + (
        escape_data(message)
    )


def doubt(cell: CellVerdict) -> str | None:
    """Why a passing cell's verdict cannot be relied upon; None when it can."""
    if cell.fails():
        return None
    if cell.status in WARN_STATUSES:
        return cell.explain()
    missing = [m.metric for m in cell.metrics if m.status == NOT_MEASURED]
    return f"not measured: {', '.join(missing)}" if missing else None


def render_github(comparison: Comparison, results_file: str) -> str:
    """The workflow commands, one per line."""
    lines = []
    if comparison.incomplete:
        lines.append(
            annotation("error", results_file, "bloomperf: incomplete run", comparison.incomplete)
        )
    if comparison.unjudged:
        lines.append(
            annotation("error", results_file, "bloomperf: nothing judged", comparison.unjudged)
        )
    if comparison.incomparable:
        lines.append(
            annotation("warning", results_file, "bloomperf: incomparable", comparison.incomparable)
        )
    for cell in comparison.cells:
        failure = cell.fails()
        if failure:
            title = f"bloomperf {cell.id} {cell.status}"
            lines.append(annotation("error", results_file, title, failure))
            continue
        why = doubt(cell)
        if why:
            title = f"bloomperf {cell.id} {cell.status}"
            lines.append(annotation("warning", results_file, title, f"{cell.id}: {why}"))
    return "".join(line + "\n" for line in lines)


def job_outputs(comparison: Comparison, failed: bool) -> dict[str, str]:
    outputs = {
        "verdict": "fail" if failed else "pass",
        "cells": str(len(comparison.cells)),
        "failed": str(sum(1 for c in comparison.cells if c.fails())),
    }
    outputs.update({status: str(n) for status, n in comparison.counts.items()})
    return outputs


def write_job_outputs(outputs: Mapping[str, str], environ: Mapping[str, str] | None = None) -> None:
    """Append ``name=value`` lines to ``$GITHUB_OUTPUT``; nothing outside Actions."""
    target = (os.environ if environ is None else environ).get("GITHUB_OUTPUT")
    if not target:
        return
    with Path(target).open("a", encoding="utf-8") as f:
        f.writelines(f"{name}={value}\n" for name, value in outputs.items())
