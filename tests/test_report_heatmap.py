"""The report opens with the measured ÷ baseline heatmap, the regressed cell in red."""

from __future__ import annotations

from pathlib import Path

from bloomperf.analysis.compare import judge
from bloomperf.analysis.stats import REGRESSED, SAME
from bloomperf.cli.report import write_report
from bloomperf.render.report.heatmap import COLOURS, cell_text, ratio_heatmap
from bloomperf.store.baseline import Baseline
from bloomperf.store.results.files import read_results
from tests.builders import REGRESSED_RUN


def test_the_regressed_cell_is_a_red_ratio_and_the_others_plain(blog_baseline: Baseline) -> None:
    comparison = judge(read_results(REGRESSED_RUN), blog_baseline)
    by_id = {c.id: c for c in comparison.cells}
    assert cell_text(by_id["accelerate-bf16-bs8"], "ms_per_token") == ("1.10×", COLOURS[REGRESSED])
    assert cell_text(by_id["accelerate-bf16-bs1"], "ms_per_token") == ("1.00×", COLOURS[SAME])
    assert cell_text(by_id["accelerate-bf16-bs64"], "ms_per_token")[0] == "expected-oom"
    fig = ratio_heatmap(comparison)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ms/token", "peak memory", "load time"]
    assert len(ax.get_yticklabels()) == len(comparison.cells)


def test_the_report_opens_with_the_heatmap(tmp_path: Path, blog_baseline: Baseline) -> None:
    report = write_report(read_results(REGRESSED_RUN), blog_baseline, tmp_path)
    assert report.plots[0] == tmp_path / "ratio_heatmap.png"
    assert report.plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = report.markdown.read_text()
    images = [line for line in markdown.splitlines() if line.startswith("![")]
    assert images[0] == "![Measured ÷ baseline](ratio_heatmap.png)"
    html = report.html.read_text()
    assert html.index("Measured ÷ baseline") < html.index("ms per token")
