"""`bloomperf history publish`: a static site of a real history root, two topologies merged from
the runners' files (the blog's run, one cell 15 % slower from a transformers upgrade on) and the
tiny CPU run that recorded step times (TTFT/TPOT)."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.cli import main
from bloomperf.core.metrics import metric_names
from bloomperf.core.progress import set_sink
from bloomperf.render.history.trend import panels, shown_panels
from bloomperf.store.history.nights import Night
from bloomperf.store.results import RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import (
    BLOG_RESULTS,
    BLOG_TOPOLOGY,
    RESULTS,
    night,
    ok_cell,
    on_night,
    scaled_run,
    tiny_run,
)

EIGHT = BLOG_TOPOLOGY
SLOW_CELL = "accelerate-bf16-bs8"
DROPPED_CELL = "accelerate-int8-bs8"
STEP_NIGHT = 8  # the first night of the slower level
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def with_transformers(run: RunResult, version: str) -> RunResult:
    packages = {**run.environment.get("packages", {}), "transformers": version}
    return replace(run, environment={**run.environment, "packages": packages})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Artifacts of two runners, merged into a history root, then published."""
    tmp = tmp_path_factory.mktemp("site")
    rng = random.Random(5)
    blog = read_results(BLOG_RESULTS)
    blog = replace(blog, cells=tuple(c for c in blog.cells if c.backend == "accelerate"))
    cpu = read_results(RESULTS / "cpu.tiny.steps.results.json")
    for day in range(12):
        run = scaled_run(blog, 1 + rng.uniform(-0.02, 0.02))
        if day >= STEP_NIGHT:
            run = with_transformers(scaled_run(run, 1.15, SLOW_CELL), "4.44.0")
        save_run(on_night(run, night(day)), tmp / "artifacts" / "night-8x" / f"{day}.json")
    for day in range(4):
        run = on_night(scaled_run(cpu, 1 + rng.uniform(-0.02, 0.02)), night(day))
        if day == 3:  # the newest night no longer runs one cell
            run = replace(run, cells=tuple(c for c in run.cells if c.id != DROPPED_CELL))
        save_run(run, tmp / "artifacts" / "night-cpu" / f"{day}.json")
    history = tmp / "history"
    assert main(["history", "merge", str(tmp / "artifacts"), "--history", str(history)]) == 0
    out = tmp / "site"
    progress: list[str] = []
    set_sink(progress.append)  # where the pytest plugin routes progress lines
    try:
        assert main(["history", "publish", "--history", str(history), "--out-dir", str(out)]) == 0
    finally:
        set_sink(None)
    assert any(f"{EIGHT}: 10/10 trend pages" in line for line in progress), progress
    assert any(f"cpu: the report of {night(3)}" in line for line in progress), progress
    return history, out


def links(page: Path) -> list[str]:
    return re.findall(r'(?:href|src)="([^"]+)"', page.read_text(encoding="utf-8"))


def test_every_page_links_only_to_files_of_the_site(site: tuple[Path, Path]) -> None:
    _, out = site
    pages = list(out.rglob("*.html"))
    assert len(pages) > 10
    checked = 0
    for page in pages:
        for ref in links(page):
            if ref.startswith(("#", "data:", "https://")):
                continue
            assert not ref.startswith(("/", "file:", "http:")), (page, ref)  # relative only
            target = (page.parent / ref.split("#")[0]).resolve()
            assert target.is_file() and out.resolve() in target.parents, (page, ref)
            checked += 1
    assert checked > 30
    index = (out / "index.html").read_text(encoding="utf-8")
    # Every trend page is linked from the index, a cell the newest night did not run too.
    linked = set(links(out / "index.html"))
    for page in out.glob("*/*.html"):
        assert str(page.relative_to(out)) in linked, page
    rows = re.findall(rf"<tr><td>{DROPPED_CELL}</td>.*?</tr>", index)
    (row,) = [r for r in rows if f'href="cpu/{DROPPED_CELL}.html"' in r]
    assert "<td>not run</td>" in row
    for topology in (EIGHT, "cpu"):
        assert f'href="{topology}/report/index.html"' in index
        assert (
            f'href="{topology}/{SLOW_CELL if topology == EIGHT else "accelerate-fp32-bs1"}.html"'
            in index
        )


def test_the_regressed_cell_is_marked_with_its_step_and_what_changed(
    site: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    history, out = site
    index = (out / "index.html").read_text(encoding="utf-8")
    row = re.search(rf"<tr><td>{SLOW_CELL}</td>.*?</tr>", index)
    assert row is not None
    assert "REGRESSED" in row[0] and '<td class="bad">1 worse</td>' in row[0]
    assert index.count("worse") == 1  # the noise of the other cells is no change

    page = (out / EIGHT / f"{SLOW_CELL}.html").read_text(encoding="utf-8")
    step = night(STEP_NIGHT).isoformat()
    change = re.search(r"<h2>Persistent changes</h2>(.*?)</table>", page, re.S)
    assert change is not None
    assert f"<td>{step}</td>" in change[1] and ">worse<" in change[1]
    assert "transformers 4.21.3 → 4.44.0" in change[1]  # the blog's version, then ours
    # The same change `history changes` lists for that folder.
    capsys.readouterr()
    assert main(["history", "changes", "--history", str(history / EIGHT)]) == 0
    listed = capsys.readouterr().out
    assert f"{step}  {SLOW_CELL}  ms_per_token" in listed and "1 change(s)" in listed

    calm = (out / EIGHT / "accelerate-bf16-bs1.html").read_text(encoding="utf-8")
    assert "None over these nights." in calm
    for name in (f"{SLOW_CELL}.png", "accelerate-bf16-bs1.png"):
        data = (out / EIGHT / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def test_step_times_are_shown_where_the_runs_recorded_them(site: tuple[Path, Path]) -> None:
    _, out = site
    page = (out / "cpu" / "accelerate-fp32-bs1.html").read_text(encoding="utf-8")
    assert "<th>TTFT</th>" in page
    rows = re.findall(r"<tr><td>2026-10-0\d</td>.*?</tr>", page)
    assert len(rows) == 4 and all(re.search(r"<td>\d+\.\d+ ms</td>", r) for r in rows)
    # The GPU fixture recorded none: no empty column.
    assert "<th>TTFT</th>" not in (out / EIGHT / f"{SLOW_CELL}.html").read_text("utf-8")


def test_bad_history_is_one_line_exit_2(
    site: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, _ = site
    (tmp_path / "empty").mkdir()
    twice = tmp_path / "twice"
    for name in ("a", "b"):
        (twice / name).mkdir(parents=True)
        night_file = history / EIGHT / f"{night(0)}.json"
        (twice / name / night_file.name).write_bytes(night_file.read_bytes())
    assert (
        main(
            [
                "history",
                "publish",
                "--history",
                str(history),
                "--out-dir",
                str(history / EIGHT / "site"),
            ]
        )
        == 2
    )
    assert "--out" in capsys.readouterr().err and not (history / EIGHT / "site").exists()
    for root, where in (
        (tmp_path / "missing", "missing"),
        (tmp_path / "empty", "empty"),
        (twice, str(twice / "b")),
    ):
        capsys.readouterr()
        assert (
            main(["history", "publish", "--history", str(root), "--out-dir", str(tmp_path / "out")])
            == 2
        )
        err = [e for e in capsys.readouterr().err.splitlines() if "history publish:" not in e]
        assert len(err) == 1 and where in err[0] and "error" in err[0], err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_trend_page_has_a_panel_for_each_registered_metric_a_cell_has() -> None:
    """The registry decides the panels: a serving figure (higher is better) and the latency
    percentiles get one where a night has them, memory is shown in GiB, and a metric no night
    has gets none."""
    assert [p[0] for p in panels()] == list(metric_names())
    assert all((p[2], p[3]) == ("GiB", float(2**30)) for p in panels() if p[0] == "peak_memory")
    served = replace(ok_cell(10.0), figures={"serving_effective_rps": (40.0, 41.0)})
    nights = [Night(f"2026-11-0{i}", Path(f"{i}.json"), tiny_run(served)) for i in (1, 2)]
    shown = [p[0] for p in shown_panels(nights, served.id)]
    assert shown == ["ms_per_token", "peak_memory", "load_time", "serving_effective_rps"]
    eff = next(p for p in panels() if p[0] == "serving_effective_rps")
    assert eff[1:] == ("effective throughput", "req/s", 1.0)
