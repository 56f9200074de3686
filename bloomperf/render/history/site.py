"""``bloomperf history publish --history HISTORY --out-dir SITE``: the history as a static web site.

What ``asv publish`` and github-action-benchmark do for their histories: pages a browser opens
from any static host (GitHub Pages, an artifact, a folder), with relative links only::

    SITE/index.html                      every topology: the newest night's verdict per cell
    SITE/<topology>/<cell>.html, .png    one trend page per cell: its figures over the nights
    SITE/<topology>/report/              ``bloomperf report`` of the newest night, with its trend

HISTORY is a history root (one folder of nights per topology, as ``history merge`` writes it) or
one history folder. The verdicts come from ``bloomperf.analysis.compare`` against the topology's
baseline, the persistent changes and what changed on their night from ``bloomperf.analysis.changes``
(the same as ``history changes`` lists): the site draws, it does not judge. The site is written
into a fresh folder and swapped in whole (``bloomperf.core.swapdir``): a stop or a full disk
half-way leaves the old site as it was.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomperf.analysis.changes import Change, detect_changes
from bloomperf.analysis.compare import judge
from bloomperf.analysis.verdicts import Comparison
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import Html, html_table, utc_now
from bloomperf.core.jsonfile import write_text_atomic
from bloomperf.core.metrics import format_value
from bloomperf.core.paths import real_path
from bloomperf.core.progress import emit, format_duration, heartbeat_s, time_left
from bloomperf.core.swapdir import fresh_folder
from bloomperf.render.comparison import cell_text
from bloomperf.render.history.changes import changed_at, describe_change
from bloomperf.render.history.trend import Topology, cell_changes, plot_cell, shown_panels
from bloomperf.render.report import write_report
from bloomperf.render.report.page import STYLE
from bloomperf.store.baseline import Baseline
from bloomperf.store.baseline.search import find_baseline
from bloomperf.store.history.nights import (
    Night,
    find_cell,
    history_folders,
    load_history,
    series,
)


@dataclass(frozen=True)
class Site:
    """What ``publish_site`` wrote."""

    index: Path
    pages: tuple[Path, ...]
    plots: tuple[Path, ...]
    reports: tuple[Path, ...]


# ---- reading ------------------------------------------------------------------------------------


def read_topology(folder: Path, baselines: Path | None, settings: dict[str, Any]) -> Topology:
    nights = load_history(folder)
    run = nights[-1].run
    baseline: Baseline | None = find_baseline(run.topology, run.model.name, baselines)
    verdicts = [judge(n.run, baseline) for n in nights]
    changes = detect_changes(nights, **settings)
    return Topology(run.topology, nights, changes, verdicts, baseline)


# ---- pages --------------------------------------------------------------------------------------


def page(title: str, body: Sequence[str]) -> str:
    head = f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
    return "\n".join([head, f"<style>{STYLE}</style></head><body>", *body, "</body></html>"]) + "\n"


def link(href: str, text: str) -> str:
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>'


def verdict_line(comparison: Comparison) -> str:
    word = "FAILED" if comparison.failed else "passed"
    summary = html.escape(comparison.summary.removesuffix("; FAILED"))
    return f"<p class='verdict {word.lower()}'>{word}: {summary}</p>"


def night_row(
    night: Night, cell: str, panels: Sequence[tuple[str, str, str, float]]
) -> list[str | Html]:
    found = find_cell(night.run, cell)
    if found is None:
        return [night.label, "not run", *[""] * len(panels), ""]
    figures = []
    for metric, _, _, _ in panels:
        value = series([night], cell, metric)
        figures.append(format_value(metric, value[0][1]) if value else "–")
    provenance = night.run.environment.get("provenance") or {}
    commit = str((provenance.get("git") or {}).get("commit") or "")[:12]
    url = provenance.get("ci_run_url")
    where = Html(link(url, commit or "run")) if url else commit
    return [night.label, found.outcome.value, *figures, where]


def change_table(topology: Topology, changes: Sequence[Change]) -> str:
    rows = [
        [
            c.night_label,
            c.metric,
            describe_change(c),
            "worse" if c.worse else "better",
            "; ".join(changed_at(topology.nights, c.night)) or "nothing recorded",
        ]
        for c in changes
    ]
    return html_table(["Night", "Metric", "Change", "Kind", "What changed that night"], rows)


def cell_page(topology: Topology, cell: str, plot: Path | None) -> str:
    title = f"{cell} on {topology.name}"
    latest = topology.newest_verdict(cell)
    changes = cell_changes(topology, cell)
    body = [
        f"<p>{link('../index.html', 'all topologies')} · {link('report/index.html', 'report')}</p>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>Newest night {html.escape(topology.nights[-1].label)}: "
        f"{html.escape(latest.explain() if latest else 'not run')}</p>",
    ]
    if plot is not None:
        body.append(f'<img src="{html.escape(plot.name)}" alt="{html.escape(cell)} trend">')
    body.append("<h2>Persistent changes</h2>")
    body.append(change_table(topology, changes) if changes else "<p>None over these nights.</p>")
    panels = shown_panels(topology.nights, cell)
    header = ["Night", "Outcome", *(title for _, title, _, _ in panels), "Commit"]
    rows = [night_row(n, cell, panels) for n in reversed(topology.nights)]
    body += ["<h2>Nights, newest first</h2>", html_table(header, rows)]
    return page(title, body)


def index_section(topology: Topology, pages: dict[str, str]) -> list[str]:
    name = html.escape(topology.name)
    nights = topology.nights
    ranked: list[tuple[int, list[str | Html]]] = []
    # The order of the pages (the newest night's cells, then those it no longer ran), with what
    # needs reading first: failing cells, then persistent changes for the worse, then the rest.
    for cell, page_link in pages.items():
        found = cell_changes(topology, cell)
        worse = sum(c.worse for c in found)
        kinds = [f"{worse} worse" if worse else "", f"{len(found) - worse} better"]
        changes = ", ".join(k for k in kinds if k and not k.startswith("0 ")) or "none"
        verdict = topology.newest_verdict(cell)
        newest = cell_text(verdict) if verdict is not None else "not run"
        failing = verdict is not None and bool(verdict.fails())
        rank = 0 if failing else 1 if worse else 2 if found else 3
        ranked.append((rank, [cell, newest, changes, Html(link(page_link, "trend"))]))
    rows = [row for _, row in sorted(ranked, key=lambda pair: pair[0])]  # stable within a rank
    return [
        f"<h2 id='{name}'>{name}</h2>",
        f"<p>{len(nights)} nights, {html.escape(nights[0].label)} … "
        f"{html.escape(nights[-1].label)}; {html.escape(nights[-1].run.model.name)}; "
        f"{link(f'{topology.name}/report/index.html', 'report of the newest night')}</p>",
        verdict_line(topology.latest),
        html_table(["Cell", "Newest night", "Persistent changes", "Trend"], rows),
    ]


# ---- publishing ---------------------------------------------------------------------------------


def publish_topology(topology: Topology, out: Path) -> tuple[dict[str, str], list[Path]]:
    """The trend pages of one topology; returns {cell: page link from the index}, the files."""
    folder = out / topology.name
    cells = [v.id for v in topology.latest.cells]
    cells += [
        c
        for c in dict.fromkeys(c.id for n in topology.nights for c in n.run.cells)
        if c not in cells
    ]
    links: dict[str, str] = {}
    files: list[Path] = []
    started = last = time.monotonic()
    for done, cell in enumerate(cells, 1):
        plot = plot_cell(topology, cell, folder / f"{cell}.png")
        html_path = folder / f"{cell}.html"
        write_text_atomic(html_path, cell_page(topology, cell, plot))
        files += [html_path] + ([plot] if plot else [])
        links[cell] = f"{topology.name}/{cell}.html"
        now = time.monotonic()
        if now - last >= heartbeat_s() or done == len(cells):
            last = now
            left = time_left(done, len(cells), now - started)
            emit(
                f"history publish: {topology.name}: {done}/{len(cells)} trend pages"
                + (f", about {left} left" if left else f" in {format_duration(now - started)}")
            )
    return links, files


def read_topologies(root: Path, baselines: Path | None, settings: dict[str, Any]) -> list[Topology]:
    """Every topology of the history ``root``, read and judged before anything is written."""
    topologies: dict[str, tuple[Path, Topology]] = {}
    for folder in history_folders(root):
        emit(f"history publish: reading {folder}")
        topology = read_topology(folder, baselines, settings)
        if topology.name in topologies:
            raise BloomperfError(
                f"{folder}: holds topology {topology.name} like {topologies[topology.name][0]}; "
                "merge them first (bloomperf history merge)"
            )
        topologies[topology.name] = (folder, topology)
    return [t for _, t in topologies.values()]


def publish_site(root: Path, out: Path, baselines: Path | None = None, **settings: Any) -> Site:
    """Write the site of the history ``root`` into ``out`` (see the module docstring)."""
    if real_path(out) == real_path(root) or real_path(root) in real_path(out).parents:
        # Pages among the nights would be published from, and merged into, the history itself.
        raise BloomperfError(
            f"--out-dir {out}: is inside the history {root}; write the site elsewhere"
        )
    # A topology whose newest night fails comes first, as its failing cells do in its table.
    topologies = sorted(
        read_topologies(root, baselines, settings), key=lambda t: not t.latest.failed
    )
    with fresh_folder(out, "--out-dir", is_site) as staging:
        site = write_site(topologies, staging, settings)

    def moved(paths: tuple[Path, ...]) -> tuple[Path, ...]:
        return tuple(out / p.relative_to(staging) for p in paths)

    (index,) = moved((site.index,))
    return Site(index, moved(site.pages), moved(site.plots), moved(site.reports))


def is_site(entry: Path) -> bool:
    """Whether ``entry`` of an output folder is what a site is made of: the index, or a folder
    of pages and plots with its report per topology (never a history's nights)."""
    if entry.name == "index.html":
        return entry.is_file()
    return entry.is_dir() and all(
        p.suffix in (".html", ".png") or p.name == "report" for p in entry.iterdir()
    )


def write_site(topologies: list[Topology], out: Path, settings: dict[str, Any]) -> Site:
    sections: list[str] = []
    pages: list[Path] = []
    reports: list[Path] = []
    for topology in topologies:
        links, files = publish_topology(topology, out)
        pages += files
        newest = topology.nights[-1]
        emit(f"history publish: {topology.name}: the report of {newest.label}")
        folder, where = newest.path.parent, out / topology.name / "report"
        report = write_report(newest.run, topology.baseline, where, folder, **settings)
        reports.append(report.html)
        sections += index_section(topology, links)
    contents = "".join(f"<li>{link('#' + t.name, t.name)}</li>" for t in topologies)
    body = [
        "<h1>bloomperf nightly history</h1>",
        f"<p>Published {html.escape(utc_now())}. Topologies:</p>",
        f"<ul>{contents}</ul>",
        *sections,
    ]
    index = out / "index.html"
    write_text_atomic(index, page("bloomperf nightly history", body))
    plots = tuple(p for p in pages if p.suffix == ".png")
    html_pages = tuple(p for p in pages if p.suffix == ".html")
    return Site(index, html_pages, plots, tuple(reports))
