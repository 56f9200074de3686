"""The report's "What changed" section, from the results file of a real tiny CPU run
(tests/data/results): since the previous night of a history, else since the baseline."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import date
from pathlib import Path

from bloomperf.catalog.provenance import NOTHING_CHANGED
from bloomperf.cli import main
from bloomperf.cli.report import write_report
from bloomperf.store.baseline.accept import accept_run, software_environment
from bloomperf.store.baseline.codec import load_baseline, save_baseline
from bloomperf.store.results import RunResult
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_BASELINE, RESULTS, add_night, on_night

STEPS = RESULTS / "cpu.tiny.steps.results.json"
OLD_COMMIT = "4a049f5fe93a"  # the fixture's, with uncommitted edits
NEW_COMMIT = "b" * 40
UPGRADES = [
    f"bloomperf commit: {OLD_COMMIT} (dirty) → {NEW_COMMIT[:12]}",
    "driver: none → 560.35.03",
    "nccl: none → 2.23.4",
    "torch 2.13.0+cpu → 2.14.0+cpu",
]


def upgraded(run: RunResult, day: date) -> RunResult:
    """The same run on ``day``, on a new torch, with a driver and NCCL, from a clean checkout of
    another commit."""
    environment = copy.deepcopy(run.environment)
    environment["packages"]["torch"] = "2.14.0+cpu"
    environment["driver"] = "560.35.03"
    environment["nccl"] = "2.23.4"
    environment["provenance"]["git"].update(commit=NEW_COMMIT, dirty=False)
    return replace(on_night(run, day), environment=environment)


def section(markdown: str) -> str:
    """The "What changed" section of a report.md."""
    return markdown.split("## What changed\n", 1)[1].split("\n## ", 1)[0]


def test_since_the_previous_night_the_report_lists_commit_driver_nccl_and_torch(
    tmp_path: Path,
) -> None:
    fixture = read_results(STEPS)
    history = tmp_path / "history"
    add_night(history, on_night(fixture, date(2026, 12, 1)), tmp_path)
    tonight = upgraded(fixture, date(2026, 12, 2))
    # Reported before `history add` (the newest night is the previous one), then after it.
    before = write_report(tonight, None, tmp_path / "before", history)
    add_night(history, tonight, tmp_path)
    after = write_report(tonight, None, tmp_path / "after", history)
    for report in (before, after):
        (changed,) = report.what_changed
        assert changed.against == "the previous night, 2026-12-01"
        assert list(changed.lines) == UPGRADES
        text = section(report.markdown.read_text())
        assert "Since the previous night, 2026-12-01:" in text
        assert all(f"- {line}\n" in text for line in UPGRADES)
        assert NOTHING_CHANGED not in text
        page = report.html.read_text()
        assert "<h2>What changed</h2>" in page
        assert "<li>torch 2.13.0+cpu → 2.14.0+cpu</li>" in page


def test_a_night_on_the_same_software_says_nothing_changed(tmp_path: Path) -> None:
    fixture = read_results(STEPS)
    history = tmp_path / "history"
    add_night(history, on_night(fixture, date(2026, 12, 1)), tmp_path)
    tonight = on_night(fixture, date(2026, 12, 2))
    add_night(history, tonight, tmp_path)
    report = write_report(tonight, None, tmp_path / "out", history)
    assert [c.lines for c in report.what_changed] == [()]
    text = section(report.markdown.read_text())
    assert text == f"\nSince the previous night, 2026-12-01:\n\n- {NOTHING_CHANGED}\n"
    assert f"<li>{NOTHING_CHANGED}</li>" in report.html.read_text()


def test_since_a_baseline_accepted_from_a_run_commit_and_versions_are_compared(
    tmp_path: Path,
) -> None:
    fixture = read_results(STEPS)
    path = tmp_path / "cpu.tiny.json"
    save_baseline(accept_run(fixture, None, source="night.json"), path)
    baseline = load_baseline(path)
    # The commit and its dirty flag travel in the baseline's provenance, read back as recorded.
    git = software_environment(baseline.provenance[0])["provenance"]["git"]
    assert git == {"commit": fixture.environment["provenance"]["git"]["commit"], "dirty": True}

    same = write_report(fixture, baseline, tmp_path / "same")
    assert [(c.lines, c.unrecorded) for c in same.what_changed] == [((), ())]
    assert f"- {NOTHING_CHANGED}" in section(same.markdown.read_text())

    report = write_report(upgraded(fixture, date(2026, 12, 2)), baseline, tmp_path / "out")
    (changed,) = report.what_changed
    assert changed.against.startswith("the baseline cpu.tiny.json, as measured in run-")
    # The CPU baseline records no driver or NCCL: unknown there, so said, not listed as changed.
    assert list(changed.lines) == [UPGRADES[0], UPGRADES[3]]
    assert changed.unrecorded == ("driver", "NCCL")
    assert "Not recorded there, so not compared: driver, NCCL." in report.markdown.read_text()


def test_the_cli_report_compares_with_the_blog_baselines_requirements(tmp_path: Path) -> None:
    """The blog's baseline records package requirements, no commit and no torch: the section
    shows what it can compare and names what it cannot, never a version as "none"."""
    out = tmp_path / "out"
    assert main([
        "report", str(RESULTS / "8xA100-SXM4-80GB.blog.results.json"),
        "--baseline", str(BLOG_BASELINE), "--out", str(out),
    ]) == 0  # fmt: skip
    text = section((out / "report.md").read_text())
    assert text.startswith(
        "\nSince the baseline 8xA100-SXM4-80GB.bloom-176b.json, "
        "as measured in hf-blog-2022-09-8xA100-80GB:\n"
    )
    assert "- transformers >=4.21.3 → 4.21.3\n" in text
    assert "none" not in text and "generation" not in text
    assert "Not recorded there, so not compared: torch." in text
