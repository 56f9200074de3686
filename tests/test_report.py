"""`bloomperf report`: rendered from the blog's table (read through baseline.py) and a history."""

from __future__ import annotations

import random
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.analysis.compare import compare_metric, judge
from bloomperf.analysis.verdicts import CellVerdict
from bloomperf.cli import main
from bloomperf.cli.report import write_report
from bloomperf.render.comparison import cell_text, table_rows
from bloomperf.render.report.memory import baseline_per_gpu, memory_scale, per_gpu_peak
from bloomperf.store.baseline import Baseline, BaselineCell, matching_load_time
from bloomperf.store.baseline.codec import load_baseline
from bloomperf.store.results import CellResult, MemoryReading, Outcome, RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import (
    BASELINES,
    BLOG_BASELINE,
    REGRESSED_RUN,
    REPO,
    RESULTS,
    GiB,
    add_night,
    blog_cells,
    bloom_run,
    cell_of,
    night,
    on_night,
    scaled_run,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def blog_memory(backend: str, dtype: str, batch_size: int) -> MemoryReading:
    """Per-GPU NVML peaks of the right shape (the blog gives none): 41 GiB of 16-bit weights per
    GPU at TP=8 (half in int8) plus a KV cache of about 4 MB per token; Accelerate leaves GPU 0
    nearly empty."""
    weights = 41 * GiB // (2 if dtype == "int8" else 1)
    cache = batch_size * 110 * 4_000_000
    devices = [weights + cache // 8] * 8
    if backend == "accelerate":
        devices = [3 * GiB] + [weights * 8 // 7 + cache // 7] * 7
    return MemoryReading(source="nvml", peak_bytes=sum(devices), per_device_bytes=tuple(devices))


def measured(b: BaselineCell) -> CellResult:
    """Three cycles around the blog's figure, with per-GPU memory of the right shape."""
    assert b.ms_per_token is not None
    ms = b.ms_per_token
    memory = blog_memory(b.backend, b.dtype, b.batch_size)
    return CellResult(
        b.backend, b.dtype, b.batch_size, Outcome.OK, (ms * 0.995, ms, ms * 1.004),
        generate_memory=memory,
    )  # fmt: skip


def run_from_blog(baseline: Baseline, started: str = "2026-11-29T01:30:00Z") -> RunResult:
    """The blog's table as measured results, each row with the load time the blog gives it."""
    cells = []
    for cell in blog_cells(baseline, measured):
        load = matching_load_time(baseline, cell)
        cells.append(replace(cell, load_time_s=load.seconds if load else None))
    environment = {"topology": baseline.topology, "packages": {"transformers": "4.43.4"}}
    return bloom_run(
        *cells, cycles=3, environment=environment, started_at=started, finished_at=started
    )


def write_nights(folder: Path, blog_run: RunResult, factors: list[float], tmp: Path) -> None:
    """One night per factor: every ms/token of the blog run scaled by it."""
    for i, factor in enumerate(factors):
        add_night(folder, on_night(scaled_run(blog_run, factor), night(i)), tmp)


def check_files(out: Path, with_trend: bool) -> str:
    names = ["ratio_heatmap.png", "ms_per_token.png", "memory.png", "load_time.png"] + (
        ["trend.png"] if with_trend else []
    )
    for name in names:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    text = (out / "index.html").read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == len(names)  # self-contained
    markdown = (out / "report.md").read_text(encoding="utf-8")
    for name in names:
        assert f"]({name})" in markdown
    return text


def test_report_of_the_blog_table_with_a_step_in_the_history(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    run = run_from_blog(blog_baseline)
    history = tmp_path / "history"
    rng = random.Random(4)
    factors = [(1.15 if i >= 12 else 1.0) * (1 + rng.uniform(-0.03, 0.03)) for i in range(20)]
    write_nights(history, run, factors, tmp_path)
    report = write_report(run, blog_baseline, tmp_path / "out", history)
    text = check_files(tmp_path / "out", with_trend=True)
    # The blog measured against itself: every cell passes, OOMs where the blog had them.
    assert "passed" in text and "FAILED" not in text
    assert "OOM (expected)" in text
    assert "DeepSpeed-Inference fp16" in text
    # Every cell that ran stepped up by 15 % on the 13th night, and only then.
    ran = {c.id for c in run.cells if c.outcome == Outcome.OK}
    ms_changes = [c for c in report.changes if c.metric == "ms_per_token"]
    assert {c.cell for c in ms_changes} == ran
    assert {c.night_label for c in ms_changes} == {"2026-10-13"}
    assert all(c.worse for c in ms_changes)
    assert "<td>2026-10-13</td><td>ds-inference-fp16-bs1</td>" in text
    assert "2026-10-12</td>" not in text and "2026-10-14</td>" not in text


def test_a_history_of_noise_marks_no_night(tmp_path: Path, blog_baseline: Baseline) -> None:
    run = run_from_blog(blog_baseline)
    history = tmp_path / "history"
    rng = random.Random(8)
    write_nights(history, run, [1 + rng.uniform(-0.03, 0.03) for _ in range(30)], tmp_path)
    report = write_report(run, blog_baseline, tmp_path / "out", history)
    assert report.changes == ()
    text = check_files(tmp_path / "out", with_trend=True)
    assert "No persistent change in any cell over 30 nights." in text


def test_a_regression_and_an_unexpected_oom_show_in_the_verdicts(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    run = run_from_blog(blog_baseline)
    slower = scaled_run(run, 1.3, "ds-inference-fp16-bs8")
    oom = replace(
        cell_of(run, "accelerate-bf16-bs32"),
        outcome=Outcome.OOM,
        samples_ms_per_token=(),
        generate_memory=None,
    )
    write_report(slower.with_cell(oom), blog_baseline, tmp_path / "out")
    text = check_files(tmp_path / "out", with_trend=False)
    assert "FAILED" in text
    assert '<td class="bad">OOM UNEXPECTED</td>' in text
    assert "REGRESSED" in text


def test_cli_report_reads_results_and_finds_the_baseline(
    tmp_path: Path, blog_baseline: Baseline, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "results.json"
    save_run(run_from_blog(blog_baseline), result)
    code = main(
        [
            "report",
            str(result),
            "--out",
            str(tmp_path / "r"),
            "--baselines",
            str(BASELINES),
        ]
    )
    assert code == 0, capsys.readouterr().err
    check_files(tmp_path / "r", with_trend=False)
    assert str(BLOG_BASELINE.name) in (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert main(["report", str(tmp_path / "missing.json"), "--out", str(tmp_path / "x")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


def test_the_report_command_takes_its_baseline_history_and_out_dir_as_given(
    tmp_path: Path, blog_baseline: Baseline, capsys: pytest.CaptureFixture[str]
) -> None:
    """--baseline FILE and --baselines DIR choose what it is judged against, --history adds the
    trend, the one line said names both files, and no output may replace an input."""
    result = tmp_path / "results.json"
    run = run_from_blog(blog_baseline)
    save_run(run, result)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    renamed = elsewhere / "index.html"  # a baseline where the report would write its page
    renamed.write_bytes(BLOG_BASELINE.read_bytes())
    copy = elsewhere / "picked.json"
    copy.write_bytes(BLOG_BASELINE.read_bytes())
    empty = tmp_path / "no-baselines"
    empty.mkdir()
    history = tmp_path / "history"
    write_nights(history, run, [1.0] * 8, tmp_path)
    out = tmp_path / "the report"  # said quoted, as a shell reads it
    argv = ["report", str(result), "--out-dir", str(out)]
    assert main([*argv, "--baseline", str(copy), "--history", str(history)]) == 0
    said = capsys.readouterr().out
    html, markdown = (shlex.quote(str(out / name)) for name in ("index.html", "report.md"))
    assert said == f"bloomperf: report written to {html} and {markdown}\n"
    page = check_files(out, with_trend=True)
    assert "baseline: picked.json" in page  # judged against the file named
    assert main([*argv, "--baselines", str(empty)]) == 0
    capsys.readouterr()
    page = check_files(out, with_trend=False)  # searched in the folder named: none there
    assert "baseline: no baseline for this topology and model" in page
    assert (
        main([str(a) for a in ["report", result, "--out-dir", elsewhere, "--baseline", renamed]])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("bloomperf: error: --out-dir: ") and str(renamed) in err
    assert renamed.read_bytes() == BLOG_BASELINE.read_bytes()


def test_the_report_commands_change_settings_reach_its_history_section(
    tmp_path: Path, blog_baseline: Baseline, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3 % step over twelve nights: under the default 5 % tolerance no change, under 2 % one
    on the night it came."""
    result, history = tmp_path / "results.json", tmp_path / "history"
    run = run_from_blog(blog_baseline)
    save_run(run, result)
    write_nights(history, run, [1.0] * 6 + [1.03] * 6, tmp_path)
    argv = ["report", str(result), "--history", str(history), "--baselines", str(BASELINES)]
    assert main([*argv, "--out-dir", str(tmp_path / "default")]) == 0
    assert main([*argv, "--out-dir", str(tmp_path / "fine"), "--change-tolerance", "0.02"]) == 0
    capsys.readouterr()
    default = (tmp_path / "default" / "index.html").read_text(encoding="utf-8")
    fine = (tmp_path / "fine" / "index.html").read_text(encoding="utf-8")
    assert "No persistent change in any cell over 12 nights." in default
    assert "<td>2026-10-07</td><td>ds-inference-fp16-bs1</td>" in fine


def test_the_table_names_load_and_memory_and_no_change_that_is_noise(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    run = read_results(REGRESSED_RUN)
    write_report(run, blog_baseline, tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    for text in (markdown, page):
        # An unchanged cell shows its figure, not "(+0.0%)".
        assert "+0.0%" not in text and "-0.0%" not in text
        assert "34.96 ms (+10.0%) REGRESSED" in text
    header, body = table_rows(judge(run, blog_baseline))
    assert header[-2:] == ["Load time", "Peak memory (all GPUs)"]
    rows = {row[0]: row for row in body}
    assert rows["Accelerate bf16"][1] == "230.38 ms"
    assert rows["Accelerate bf16"][-2:] == ["121 s (same)", "≤ 376 GiB (no baseline)"]
    assert rows["Accelerate int8"][-2] == "118 s (no baseline)"


def test_a_memory_regression_is_named_in_its_cell() -> None:
    ms = compare_metric("ms_per_token", [10.0, 10.01, 9.99], 10.0, 0.05)
    memory = compare_metric("peak_memory", [60.0 * GiB], 50.0 * GiB, 0.1)
    cell = CellVerdict("accelerate", "bf16", 8, "regressed", "ok", "ok", (ms, memory), 10.0)
    assert cell_text(cell) == "10.00 ms; peak memory 60.00 GiB (+20.0%) REGRESSED"


def test_a_cpu_row_says_not_judged_once_and_its_memory_below_one_gib() -> None:
    """The real tiny CPU run against the shipped CPU baseline: load time not judged on CPU."""
    run = read_results(RESULTS / "cpu.tiny.steps.results.json")
    baseline = load_baseline(REPO / "bloomperf" / "baselines" / "cpu.tiny.json")
    header, body = table_rows(judge(run, baseline))
    assert header[-1] == "Peak memory"  # a process's, not "(all GPUs)" on a machine without one
    rows = {row[0]: row for row in body}
    assert rows["Accelerate fp32"][-2:] == ["0.0872 s (+49.5%, not judged)", "≤ 0.43 GiB (same)"]


def test_the_environment_reads_as_sizes_counts_and_provenance_without_paths(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    root = "/home/ci/work/bloomperf"
    environment = {
        "topology": "8xA100-SXM4-80GB",
        "gpus": ["NVIDIA A100-SXM4-80GB"] * 8,
        "ram_bytes": 549755813888,
        "gpu_limits": [
            {"index": i, "sm_clock_max_mhz": 1410, "power_limit_w": 400.0} for i in range(8)
        ],
        "packages": {"torch": "2.4.0"},
        "provenance": {
            "git": {"commit": "0123456789abcdef", "dirty": True, "branch": "main", "root": root},
            "ci_run_url": "https://github.com/o/bloomperf/actions/runs/42",
            "command": f"bloomperf run --out {root}/results/n.json --model /home/ci/.cache/m",
            "cwd": root,
        },
    }
    run = replace(run_from_blog(blog_baseline), environment=environment)
    write_report(run, blog_baseline, tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    section = markdown[markdown.index("## Environment") :]
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    for text in (section, page[page.index("<h2>Environment") :]):
        assert "549755813888" not in text and "512 GiB" in text
        assert text.count("A100-SXM4-80GB") == 2  # the topology id, and the GPUs counted once
        assert "8 × NVIDIA A100-SXM4-80GB" in text
        assert "/home/" not in text and root not in text
        assert "0123456789ab (on main; dirty: uncommitted edits)" in text
        assert "https://github.com/o/bloomperf/actions/runs/42" in text
    assert "| Command | bloomperf run --out results/n.json --model ~/.cache/m |" in section
    assert "| GPU limits (all 8) | SM clock ≤ 1410 MHz, power limit 400 W |" in section


def test_the_markdown_links_images_beside_it_and_names_no_absolute_path(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    url = "https://github.com/o/bloomperf/actions/runs/42"
    run = run_from_blog(blog_baseline)
    run = replace(run, environment={**run.environment, "provenance": {"ci_run_url": url}})
    result = tmp_path / "results.json"
    save_run(run, result)
    out = tmp_path / "report"
    assert main(["report", str(result), "--out", str(out), "--baselines", str(BASELINES)]) == 0
    markdown = (out / "report.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert len(images) == 4
    assert all("/" not in image and (out / image).is_file() for image in images)
    assert str(REPO) not in markdown and str(tmp_path) not in markdown
    assert "(baseline: 8xA100-SXM4-80GB.bloom-176b.json)" in markdown
    # Why the images do not show in a step summary, and where to get them.
    assert "step summary cannot show local images" in markdown
    assert f"[the CI run]({url})" in markdown


def test_memory_is_plotted_per_gpu_against_one_gpus_capacity_and_the_baseline(
    tmp_path: Path, blog_baseline: Baseline
) -> None:
    # The fixture keeps NVML's total over 8 GPUs only: the plot spreads it, never sums GPUs.
    summed = read_results(REGRESSED_RUN)
    scale = memory_scale(summed.topology, summed.cells)
    assert (scale.gpus, scale.capacity_bytes) == (8, 80 * GiB)
    (bs1,) = [c for c in summed.cells if c.id == "accelerate-bf16-bs1"]
    assert bs1.peak_memory_bytes == 360 * GiB
    assert per_gpu_peak(bs1, scale) == (45 * GiB, 45 * GiB, False)
    # Per-device readings: the fullest and the emptiest GPU (Accelerate leaves GPU 0 nearly empty).
    run = run_from_blog(blog_baseline)
    (cell,) = [c for c in run.cells if c.id == "accelerate-bf16-bs1"]
    fullest, emptiest, per_device = per_gpu_peak(cell, memory_scale(run.topology, run.cells)) or ()
    assert per_device and emptiest == 3 * GiB and 46 * GiB < fullest < 48 * GiB
    # The baseline's totals per GPU, for the baseline line.
    with_memory = replace(
        blog_baseline,
        cells=tuple(
            replace(b, peak_memory_bytes=400 * GiB) if b.ms_per_token is not None else b
            for b in blog_baseline.cells
        ),
    )
    expected = baseline_per_gpu(with_memory, ("accelerate", "bf16"), scale)
    assert expected[:2] == [(1, 50 * GiB), (8, 50 * GiB)]
    write_report(run, with_memory, tmp_path / "out")
    assert (tmp_path / "out" / "memory.png").read_bytes().startswith(PNG_MAGIC)
