"""The history site's pages in process, read back by ``html.parser``: a cell's trend page (its
links, newest verdict, plot, persistent changes and nights newest first), a topology's section of
the index (cells ranked failing, then worse, then changed, then the rest), the verdict line, the
trend pages of a topology, what counts as a site in an output folder, and the refusals."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bloomperf.analysis.changes import Change
from bloomperf.analysis.compare import judge
from bloomperf.core.errors import BloomperfError
from bloomperf.core.progress import set_sink
from bloomperf.render.history import site
from bloomperf.render.history.site import (
    cell_page,
    index_section,
    is_site,
    night_row,
    page,
    publish_site,
    publish_topology,
    read_topologies,
    verdict_line,
)
from bloomperf.render.history.trend import Topology
from bloomperf.store.baseline import EXPECT_OK, BaselineCell
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.history.nights import Night
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from tests.builders import cpu_baseline, night, on_night, tiny_run

TOLERANT = 0.1
BASELINE = cpu_baseline(
    *(
        BaselineCell("accelerate", "fp32", b, EXPECT_OK, ms_per_token=10.0 * b,
                     ms_per_token_tolerance=TOLERANT)
        for b in range(1, 7)
    )
)  # fmt: skip


class Page(HTMLParser):
    """What a page says: its title, headings, paragraphs, images, links and tables (each a
    header and rows of cell texts, with each cell's link and class)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.title = ""
        self.headings: list[tuple[str, dict[str, Any], str]] = []
        self.paragraphs: list[tuple[dict[str, Any], str]] = []
        self.images: list[dict[str, Any]] = []
        self.links: list[tuple[str, str]] = []
        self.tables: list[dict[str, list]] = []
        self._open: list[tuple[str, dict[str, Any]]] = []
        self._texts: list[list[str]] = []
        self._href: str | None = None
        self._body = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self.tables.append({"header": [], "rows": [], "classes": [], "links": []})
        elif tag in ("thead", "tbody"):
            self._body = tag == "tbody"
        elif tag == "tr" and self._body:
            for key in ("rows", "classes", "links"):
                self.tables[-1][key].append([])
        elif tag == "img":
            self.images.append(found)
        elif tag == "a":
            self._href = found.get("href")
        if tag in ("title", "h1", "h2", "p", "th", "td", "a"):
            self._open.append((tag, found))
            self._texts.append([])

    def handle_endtag(self, tag: str) -> None:
        if not self._open or self._open[-1][0] != tag:
            return
        _, attrs = self._open.pop()
        text = "".join(self._texts.pop())
        if tag == "a":
            self.links.append((self._href or "", text))
            if self._open and self._open[-1][0] == "td":
                self.tables[-1]["links"][-1].append(self._href)
            self._href = None
        elif tag == "title":
            self.title = text
        elif tag in ("h1", "h2"):
            self.headings.append((tag, attrs, text))
        elif tag == "p":
            self.paragraphs.append((attrs, text))
        elif tag == "th":
            self.tables[-1]["header"].append(text)
        elif tag == "td":
            self.tables[-1]["rows"][-1].append(text)
            self.tables[-1]["classes"][-1].append(attrs.get("class"))
            if len(self.tables[-1]["links"][-1]) < len(self.tables[-1]["rows"][-1]):
                self.tables[-1]["links"][-1].append(None)

    def handle_data(self, data: str) -> None:
        for text in self._texts:  # an element's text includes its children's
            text.append(data)


def rows_of(text: str) -> list[list[str]]:
    (table,) = Page(text).tables
    return table["rows"]


def cells(*figures: float | None) -> list[CellResult]:
    """Batch size b + 1 at each figure (ms/token); None: an OOM at that batch size."""
    return [
        CellResult("accelerate", "fp32", b + 1, Outcome.OK, (ms,) * 3)
        if ms is not None
        else CellResult("accelerate", "fp32", b + 1, Outcome.OOM, message="out of memory")
        for b, ms in enumerate(figures)
    ]


def history(
    runs: list[list[CellResult]], name: str = "cpu", environments: list[dict] | None = None
) -> list[Night]:
    nights = []
    for i, ran in enumerate(runs):
        run = on_night(tiny_run(*ran, topology=name, environment=(environments or [{}] * 99)[i]),
                       night(i))  # fmt: skip
        nights.append(Night(str(night(i)), Path(f"{night(i)}.json"), run))
    return nights


def topology_of(nights: list[Night], changes: list[Change] = ()) -> Topology:  # type: ignore[assignment]
    name = nights[-1].run.topology
    verdicts = [judge(replace(n.run, topology="cpu"), BASELINE) for n in nights]
    return Topology(name, nights, list(changes), verdicts, BASELINE)


def step(cell: str, at: int, before: float, after: float, since: int = 2) -> Change:
    return Change(cell, "ms_per_token", at, str(night(at)), before, after, since)


# ---- a cell's trend page ------------------------------------------------------------------------


def test_a_cell_page_links_back_says_the_newest_verdict_and_lists_nights_newest_first() -> None:
    environments = [
        {
            "packages": {"torch": "2.4.0", "numpy": "1.26"},
            "provenance": {"git": {"commit": "a" * 40}},
        },
        {
            "packages": {"torch": "2.5.0", "numpy": "2.1"},
            "provenance": {"git": {"commit": "b" * 40}, "ci_run_url": "https://ci/run/2?a=1&b=2"},
        },
        {
            "packages": {"torch": "2.5.0", "numpy": "2.1"},
            "provenance": {"git": {"commit": "b" * 40}, "ci_run_url": "https://ci/3"},
        },
    ]
    nights = history([cells(10.0), cells(12.5), []], "cpu<&>", environments)
    changes = [
        step("accelerate-fp32-bs1", 1, 10.0, 12.5, 1),
        step("accelerate-fp32-bs1", 2, 12.5, 10.0),
    ]
    topology = topology_of(nights, changes)
    text = cell_page(topology, "accelerate-fp32-bs1", Path("/x/accelerate-fp32-bs1.png"))
    found = Page(text)
    assert found.title == "accelerate-fp32-bs1 on cpu<&>" and "cpu&lt;&amp;&gt;" in text
    assert found.headings[0] == ("h1", {}, "accelerate-fp32-bs1 on cpu<&>")
    assert found.links[:2] == [("../index.html", "all topologies"), ("report/index.html", "report")]
    # The newest night did not run the cell.
    assert found.paragraphs[1][1] == f"Newest night {night(2)}: not run"
    assert found.images == [{"src": "accelerate-fp32-bs1.png", "alt": "accelerate-fp32-bs1 trend"}]
    assert "\n<h2>Persistent changes</h2>\n" in text and "\n<h2>Nights, newest first</h2>\n" in text
    changes_table, nights_table = found.tables
    assert changes_table["header"] == [
        "Night",
        "Metric",
        "Change",
        "Kind",
        "What changed that night",
    ]
    ((label, metric, size, kind, what), later) = changes_table["rows"]
    assert (label, metric, kind) == (str(night(1)), "ms_per_token", "worse")
    assert "(+25.0 %)" in size and size.endswith(", 1 night since")
    said = what.split("; ")  # one item per thing that changed that night
    assert "torch 2.4.0 → 2.5.0" in said and "numpy 1.26 → 2.1" in said
    assert [later[0], later[3], later[4]] == [str(night(2)), "better", "nothing recorded"]
    assert changes_table["classes"][1][3] == "good" and changes_table["classes"][0][3] == "bad"
    assert nights_table["header"] == ["Night", "Outcome", "ms/token", "Commit"]
    labels = [row[0] for row in nights_table["rows"]]
    assert labels == [str(night(i)) for i in (2, 1, 0)]
    newest, middle, oldest = nights_table["rows"]
    assert newest == [str(night(2)), "not run", "", ""]
    assert middle[1] == "ok" and middle[2].startswith("12.5") and middle[3] == "b" * 12
    assert nights_table["links"][1][3] == "https://ci/run/2?a=1&b=2"
    assert oldest[3] == "a" * 12 and nights_table["links"][2][3] is None


def test_a_cell_page_without_plot_or_changes_says_so() -> None:
    nights = history([cells(10.0), cells(10.0)])
    text = cell_page(topology_of(nights), "accelerate-fp32-bs1", None)
    found = Page(text)
    assert found.images == []
    assert "\n<p>None over these nights.</p>\n" in text
    assert found.paragraphs[1][1].startswith(f"Newest night {night(1)}: ms/token same")
    assert len(found.tables) == 1


def test_a_night_row_gives_each_panels_figure_a_dash_where_the_night_has_none_and_its_run() -> None:
    panels = [("ms_per_token", "ms/token", "ms", 1.0), ("load_time", "load time", "s", 1.0)]
    (ran,) = history([cells(10.0)])
    assert night_row(ran, "accelerate-fp32-bs9", panels) == [ran.label, "not run", "", "", ""]
    row = night_row(ran, "accelerate-fp32-bs1", panels)
    assert row[:2] == [ran.label, "ok"] and row[3] == "–" and row[4] == ""
    environment = {"provenance": {"ci_run_url": "https://ci/1"}}
    (linked,) = history([cells(10.0)], environments=[environment])
    where = night_row(linked, "accelerate-fp32-bs1", panels)[-1]
    assert where.markup == '<a href="https://ci/1">run</a>'  # type: ignore[union-attr]


@pytest.mark.parametrize("failed", [True, False])
def test_the_verdict_line_says_failed_or_passed_and_the_summary_once(failed: bool) -> None:
    nights = history([cells(20.0 if failed else 10.0, 20.0)])
    comparison = topology_of(nights).latest
    assert comparison.failed is failed
    (found,) = Page(verdict_line(comparison)).paragraphs
    word = "FAILED" if failed else "passed"
    assert found[0] == {"class": f"verdict {word.lower()}"}
    assert found[1] == f"{word}: {comparison.summary.removesuffix('; FAILED')}"
    assert "FAILED" not in found[1].removeprefix(word)


# ---- a topology's section of the index ----------------------------------------------------------

STATES = st.lists(
    st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=6
)


@settings(max_examples=60, deadline=None)
@given(states=STATES)
# After a cell without changes in the pages' order: a cell with only changes for the better.
@example(states=[(False, 0, 1), (False, 0, 0)])
@example(states=[(False, 0, 0), (False, 1, 1), (True, 0, 0), (False, 0, 2)])
def test_the_index_ranks_failing_cells_then_worse_changes_then_any_change_then_the_rest(
    states: list[tuple[bool, int, int]],
) -> None:
    # Cell b (batch size b + 1): failing on the newest night or not, with so many changes for
    # the worse and for the better.
    newest = [
        10.0 * (b + 1) * (1.5 if failing else 1.0) for b, (failing, _, _) in enumerate(states)
    ]
    nights = history([cells(*(10.0 * (b + 1) for b in range(len(states)))), cells(*newest)])
    changes = []
    for b, (_, worse, better) in enumerate(states):
        cell = f"accelerate-fp32-bs{b + 1}"
        changes += [step(cell, 1, 1.0, 2.0) for _ in range(worse)]
        changes += [step(cell, 1, 2.0, 1.0) for _ in range(better)]
    topology = topology_of(nights, changes)
    # The pages' order (the newest night's cells) against the names' order: ranks keep it.
    pages = {f"accelerate-fp32-bs{b + 1}": f"cpu/p{b}.html" for b in reversed(range(len(states)))}
    section = Page("".join(index_section(topology, pages)))
    (table,) = section.tables
    assert table["header"] == ["Cell", "Newest night", "Persistent changes", "Trend"]

    def rank(b: int) -> int:
        failing, worse, better = states[b]
        return 0 if failing else 1 if worse else 2 if better else 3

    order = sorted(reversed(range(len(states))), key=rank)  # stable: the pages' order in a rank
    assert [row[0] for row in table["rows"]] == [f"accelerate-fp32-bs{b + 1}" for b in order]
    for row, links, b in zip(table["rows"], table["links"], order, strict=True):
        _, worse, better = states[b]
        said = [f"{worse} worse"] * bool(worse) + [f"{better} better"] * bool(better)
        assert row[2] == (", ".join(said) or "none")
        assert row[3] == "trend" and links[3] == f"cpu/p{b}.html"
        assert ("REGRESSED" in row[1]) is states[b][0]


def test_the_index_section_heads_its_topology_and_says_its_span_model_and_report() -> None:
    nights = history([cells(10.0), cells(10.0), cells(10.0)], name="8x<A100>")
    newest = replace(nights[2].run, model=replace(nights[2].run.model, name="tiny-2"))
    nights = [*nights[:2], Night(nights[2].label, nights[2].path, newest)]
    topology = topology_of(nights)
    section = index_section(topology, {"accelerate-fp32-bs1": "x.html", "gone-bs1": "y.html"})
    found = Page("".join(section))
    assert found.headings == [("h2", {"id": "8x<A100>"}, "8x<A100>")]
    assert "<h2 id='8x&lt;A100&gt;'>" in section[0]
    span = found.paragraphs[0][1]
    assert span == f"3 nights, {night(0)} … {night(2)}; tiny-2; report of the newest night"
    assert ("8x<A100>/report/index.html", "report of the newest night") in found.links
    assert verdict_line(topology.latest) in section  # the newest night's verdict
    assert found.tables[0]["rows"][1][:3] == ["gone-bs1", "not run", "none"]


# ---- publishing ---------------------------------------------------------------------------------


def test_the_trend_pages_follow_the_newest_nights_cells_then_those_it_no_longer_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nights = history([cells(10.0, 20.0, None), cells(10.0, None, None), cells(None, 20.0)])
    topology = topology_of(nights)
    # A clock 10 s further on at each reading, from 100 s, and a line at most every 20 s.
    ticks = iter(range(100, 1000, 10))
    monkeypatch.setattr(site, "time", SimpleNamespace(monotonic=lambda: float(next(ticks))))
    monkeypatch.setenv("BLOOMPERF_HEARTBEAT_S", "20")
    lines: list[tuple[str, list[str]]] = []  # each line, and the pages written when it came
    folder = tmp_path / "cpu"
    set_sink(lambda line: lines.append((line, sorted(p.name for p in folder.glob("*.html")))))
    try:
        links, files = publish_topology(topology, tmp_path)
    finally:
        set_sink(None)
    order = ["accelerate-fp32-bs1", "accelerate-fp32-bs2", "accelerate-fp32-bs3"]
    assert list(links) == order and links[order[0]] == f"cpu/{order[0]}.html"
    # A page per cell; a plot for the cells with a figure on some night (bs3 never ran).
    expected = []
    for cell in order:
        expected.append(folder / f"{cell}.html")
        if cell != order[2]:
            expected.append(folder / f"{cell}.png")
    assert files == expected and all(path.is_file() for path in files)
    assert sorted(folder.iterdir()) == sorted(expected)
    # 10 s after the start: too soon; 20 s: the count and the rest at that rate; the last page:
    # the whole count and the time it took.
    said = [(line.split(" bloomperf: ", 1)[1], written) for line, written in lines]
    assert said == [
        (
            "history publish: cpu: 2/3 trend pages, about 10 s left",
            [f"{c}.html" for c in order[:2]],
        ),
        ("history publish: cpu: 3/3 trend pages in 30 s", [f"{c}.html" for c in order]),
    ]
    for cell in order:  # the plot on the pages that have one
        page_text = (folder / f"{cell}.html").read_text(encoding="utf-8")
        assert (f'<img src="{cell}.png"' in page_text) is (cell != order[2])


def test_a_site_folder_holds_the_index_and_folders_of_pages_plots_and_reports(
    tmp_path: Path,
) -> None:
    (tmp_path / "index.html").write_text("x")
    assert is_site(tmp_path / "index.html")
    (tmp_path / "folder" / "index.html").mkdir(parents=True)
    assert not is_site(tmp_path / "folder" / "index.html")  # a folder named like the index
    pages = tmp_path / "cpu"
    (pages / "report").mkdir(parents=True)
    for name in ("a.html", "a.png"):
        (pages / name).write_text("x")
    assert is_site(pages)
    (pages / "2026-10-01.json").write_text("{}")
    assert not is_site(pages)  # a history's night is never a site's
    (tmp_path / "notes.txt").write_text("x")
    assert not is_site(tmp_path / "notes.txt")


def test_a_site_inside_its_history_and_two_folders_of_one_topology_are_refused(
    tmp_path: Path,
) -> None:
    root = tmp_path / "history"
    for folder in ("a", "b"):
        save_run(on_night(tiny_run(*cells(10.0)), night(0)), root / folder / f"{night(0)}.json")
    for out in (root, root / "site", root / "a" / "x"):
        with pytest.raises(BloomperfError) as refused:
            publish_site(root, out)
        assert str(refused.value) == (
            f"--out-dir {out}: is inside the history {root}; write the site elsewhere"
        )
    with pytest.raises(BloomperfError) as refused:
        read_topologies(root, None, {})
    assert str(refused.value) == (
        f"{root / 'b'}: holds topology cpu like {root / 'a'}; merge them first "
        "(bloomperf history merge)"
    )
    assert not (tmp_path / "site").exists()


def test_a_page_is_a_whole_document_with_its_title_escaped_and_the_body_in_order() -> None:
    text = page("a <b> & c", ["<p>one</p>", "<p>two</p>"])
    assert text.startswith("<!DOCTYPE html><html><head><meta charset='utf-8'>")
    assert "<title>a &lt;b&gt; &amp; c</title>" in text
    assert text.endswith("<p>one</p>\n<p>two</p>\n</body></html>\n")
    assert [p[1] for p in Page(text).paragraphs] == ["one", "two"]
    assert html.unescape(Page(text).title) == "a <b> & c"


def nightly(root: Path, topology: str, figures: list[tuple[float, ...]]) -> None:
    """A history folder of ``topology``: a night per entry, batch size b + 1 at each figure."""
    for i, ms in enumerate(figures):
        run = on_night(tiny_run(*cells(*ms), topology=topology), night(i))
        save_run(run, root / topology / f"{night(i)}.json")


def test_a_published_site_holds_each_topologys_pages_plots_and_report_failing_ones_first(
    tmp_path: Path,
) -> None:
    root, out, baselines = tmp_path / "history", tmp_path / "site", tmp_path / "baselines"
    # 2xTEST passes against its baseline; 3xNONE has none anywhere (FAILED); cpu's newest bs1
    # is 50 % slower than its baseline (FAILED), and its bs2 15 ms on the last two nights.
    nightly(root, "2xTEST", [(10.0,), (10.0,)])
    nightly(root, "3xNONE", [(10.0,)])
    nightly(root, "cpu", [(10.0, 10.0)] * 6 + [(10.0, 15.0), (15.0, 15.0)])
    save_baseline(BASELINE, baselines / "cpu.tiny.json")
    save_baseline(replace(BASELINE, topology="2xTEST"), baselines / "2x.tiny.json")
    (out / "cpu").mkdir(parents=True)
    (out / "cpu" / "old-bs9.html").write_text("an earlier site's page")
    lines: list[str] = []
    set_sink(lines.append)
    try:
        site = publish_site(root, out, baselines, confirm=2)
    finally:
        set_sink(None)
    order = ["3xNONE", "cpu", "2xTEST"]  # the failing ones first, each group in folder order
    assert site.index == out / "index.html"
    assert site.reports == tuple(out / t / "report" / "index.html" for t in order)
    assert site.pages == (
        out / "3xNONE" / "accelerate-fp32-bs1.html",
        *(out / "cpu" / f"accelerate-fp32-bs{b}.html" for b in (1, 2)),
        out / "2xTEST" / "accelerate-fp32-bs1.html",
    )
    assert site.plots == tuple(p.with_suffix(".png") for p in site.pages)
    assert all(p.is_file() for p in (site.index, *site.pages, *site.plots, *site.reports))
    assert not (out / "cpu" / "old-bs9.html").exists()  # replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baselines", "history", "site"]
    index = Page(site.index.read_text(encoding="utf-8"))
    assert index.headings[0] == ("h1", {}, "bloomperf nightly history")
    published = re.fullmatch(r"Published (\S+)\. Topologies:", index.paragraphs[0][1])
    assert published is not None  # when, in UTC
    stamp = datetime.fromisoformat(published[1])
    assert stamp.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - stamp) < timedelta(minutes=10)
    assert index.links[:3] == [(f"#{t}", t) for t in order]
    assert [h[2] for h in index.headings[1:]] == order
    verdicts = [p[0]["class"] for p in index.paragraphs if "class" in p[0]]
    assert verdicts == ["verdict failed", "verdict failed", "verdict passed"]
    # cpu's bs2 changed for the worse on the seventh night: confirmed by two nights, the setting
    # given (the default asks for three).
    bs2 = Page((out / "cpu" / "accelerate-fp32-bs2.html").read_text(encoding="utf-8"))
    (step_row,) = bs2.tables[0]["rows"]
    assert [step_row[0], step_row[1], step_row[3]] == [str(night(6)), "ms_per_token", "worse"]
    cpu_rows = index.tables[1]["rows"]
    assert [row[0] for row in cpu_rows] == ["accelerate-fp32-bs1", "accelerate-fp32-bs2"]
    assert [row[2] for row in cpu_rows] == ["none", "1 worse"]
    lonely = Page((out / "3xNONE" / "accelerate-fp32-bs1.html").read_text(encoding="utf-8"))
    assert (
        lonely.paragraphs[1][1]
        == f"Newest night {night(0)}: no baseline cell; measured ok 10.00 ms"
    )
    passing = Page((out / "2xTEST" / "accelerate-fp32-bs1.html").read_text(encoding="utf-8"))
    assert (
        passing.paragraphs[1][1]
        == f"Newest night {night(1)}: ms/token same: "
        + (passing.paragraphs[1][1].split("ms/token same: ", 1)[1])
    )
    # Each topology's report: of its newest night, against its baseline, with its history's trend
    # and the changes found with the settings given.
    report = (out / "cpu" / "report" / "index.html").read_text(encoding="utf-8")
    assert "REGRESSED" in report and "cpu.tiny.json" in report
    assert "<tr><td>2026-10-07</td><td>accelerate-fp32-bs2</td>" in report
    assert (out / "cpu" / "report" / "trend.png").is_file()
    lone = (out / "3xNONE" / "report" / "index.html").read_text(encoding="utf-8")
    assert "no baseline for this topology and model" in lone
    text = site.index.read_text(encoding="utf-8")
    assert index.title == "bloomperf nightly history"
    assert "\n<h1>bloomperf nightly history</h1>\n" in text
    contents = "".join(f'<li><a href="#{t}">{t}</a></li>' for t in order)
    assert f"\n<ul>{contents}</ul>\n" in text
    said = [line.split(" bloomperf: ", 1)[1] for line in lines]
    folders = ("2xTEST", "3xNONE", "cpu")
    assert said[:3] == [f"history publish: reading {root / t}" for t in folders]
    assert f"history publish: cpu: the report of {night(7)}" in said
    assert f"history publish: 2xTEST: the report of {night(1)}" in said


def test_a_site_is_never_written_over_what_it_did_not_write(tmp_path: Path) -> None:
    root, out = tmp_path / "history", tmp_path / "site"
    nightly(root, "cpu", [(10.0,)])
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(BloomperfError) as refused:
        publish_site(root, out)
    assert str(refused.value).startswith(f"--out-dir {out}: holds 'notes.txt', which this")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
