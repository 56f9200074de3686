"""The report's pages: ``index.html`` (self-contained, the plots embedded, so it can be mailed or
uploaded as one file) and ``report.md`` (the same content for a pull request or a job summary,
linking the PNG files beside it). The verdicts, the plots in page order, the trend and its
changes, the environment.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from bloomperf.analysis.changes import Change
from bloomperf.analysis.verdicts import Comparison
from bloomperf.core.formatting import html_table, markdown_table, markdown_text, plain
from bloomperf.core.jsonfile import write_text_atomic
from bloomperf.render.comparison import table_rows
from bloomperf.render.history.changes import describe_change, render_changes
from bloomperf.render.report.changes import WhatChanged, html_lines, markdown_lines
from bloomperf.render.report.environment import environment_rows, plots_note, shown_baseline
from bloomperf.render.report.latency import LATENCY_HEADINGS, flag_lines
from bloomperf.store.history.nights import Night
from bloomperf.store.results import RunResult

# The plots in page order: the ratio heatmap first, where a regression shows at a glance.
PLOT_HEADINGS = (
    ("heatmap", "Measured ÷ baseline"),
    ("ms", "ms per token"),
    ("memory", "Peak memory"),
    ("load", "Load time"),
)

SERVING_HEADING = "Serving: latency against throughput"


def change_rows(changes: Sequence[Change]) -> list[list[str]]:
    return [
        [c.night_label, c.cell, c.metric, describe_change(c), "worse" if c.worse else "better"]
        for c in changes
    ]


CHANGE_HEADER = ("Night", "Cell", "Metric", "Change", "Kind")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 72em;
       color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em;
        display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.bad { background: #fde2e2; font-weight: bold; }
td.good { background: #e3f5e3; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.verdict { font-size: 1.2em; font-weight: bold; }
.failed { color: #b00020; } .passed { color: #1b7f2a; }
"""


def embedded(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'


def write_pages(
    out: Path,
    run: RunResult,
    comparison: Comparison,
    plots: dict[str, Path],
    nights: Sequence[Night],
    changes: Sequence[Change],
    notes: dict[str, str] | None = None,
    changed: Sequence[WhatChanged] = (),
) -> tuple[Path, Path]:
    notes = notes or {}
    title = f"bloomperf: {run.model.name} on {run.topology}"
    when = run.started_at or "unknown time"
    header, body = table_rows(comparison)
    environment = environment_rows(run.environment)
    verdict = "FAILED" if comparison.failed else "passed"
    baseline = shown_baseline(comparison.baseline)
    summary = comparison.summary.removesuffix("; FAILED")  # the verdict says it first

    md = [
        f"# {title}",
        "",
        f"Run started {markdown_text(when)}; {'complete' if run.complete else 'INCOMPLETE'}.",
        "",
        f"**{verdict}**: {markdown_text(summary)} (baseline: {markdown_text(baseline)})",
        "",
        plots_note(run.environment),
        "",
    ]
    md += ["## Verdicts", "", *markdown_table(header, body), ""]
    failures = [plain(f) for f in [*comparison.failures(), *flag_lines(run)]]
    md += [f"- {markdown_text(f)}" for f in failures] + ([""] if failures else [])
    md += markdown_lines(changed)
    for key, heading in (*PLOT_HEADINGS, *LATENCY_HEADINGS):
        if key not in plots and key not in notes:
            continue  # a plot of figures the run has none of (ms/token of a serving sweep)
        shown = f"![{heading}]({plots[key].name})" if key in plots else markdown_text(notes[key])
        md += [f"## {heading}", "", shown, ""]
    if "serving" in plots:
        md += [f"## {SERVING_HEADING}", "", f"![{SERVING_HEADING}]({plots['serving'].name})", ""]
    if "trend" in plots:
        md += ["## Trend over the nights", "", f"![trend]({plots['trend'].name})", ""]
        md += [*render_changes(changes, nights, "markdown").splitlines(), ""]
    md += ["## Environment", "", *markdown_table(["What", "Value"], environment), ""]

    doc = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Run started {html.escape(when)}; {'complete' if run.complete else 'INCOMPLETE'}.</p>",
        f"<p class='verdict {'failed' if comparison.failed else 'passed'}'>{verdict}: "
        f"{html.escape(summary)}<br><small>baseline: "
        f"{html.escape(baseline)}</small></p>",
        "<h2>Verdicts</h2>",
        html_table(header, body),
    ]
    if failures:
        doc.append("<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in failures) + "</ul>")
    doc += html_lines(changed)
    for key, heading in (*PLOT_HEADINGS, *LATENCY_HEADINGS):
        if key not in plots and key not in notes:
            continue
        shown = embedded(plots[key]) if key in plots else f"<p>{html.escape(notes[key])}</p>"
        doc += [f"<h2>{heading}</h2>", shown]
    if "serving" in plots:
        doc += [f"<h2>{SERVING_HEADING}</h2>", embedded(plots["serving"])]
    if "trend" in plots:
        doc += ["<h2>Trend over the nights</h2>", embedded(plots["trend"])]
        if changes:
            doc.append(html_table(CHANGE_HEADER, change_rows(changes)))
        else:
            doc.append(f"<p>No persistent change in any cell over {len(nights)} nights.</p>")
    doc += ["<h2>Environment</h2>", html_table(["What", "Value"], environment), "</body></html>"]

    html_path = out / "index.html"
    md_path = out / "report.md"
    write_text_atomic(html_path, "\n".join(doc) + "\n")
    write_text_atomic(md_path, "\n".join(md) + "\n")
    return html_path, md_path
