"""Output that fits a 100-column terminal, colour only for a person at one.

The first verdict table was 163 columns wide, the GPU matrix 233, predict 142 and dry-run lines
about 300: at 100 columns cells wrapped mid-word. Checked on the tiny model's recorded run and
on the recorded 8xA100 blog run, through the real commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.compare import judge
from bloomperf.render.comparison import render_comparison
from bloomperf.render.terminal import STYLES, fit_table, wants_colour
from bloomperf.store.baseline.search import find_baseline
from bloomperf.store.results.files import read_results

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "tests" / "data" / "results"
BLOG = RESULTS / "8xA100-SXM4-80GB.blog.results.json"
TINY = RESULTS / "cpu.tiny.steps.results.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def bloomperf(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100", **env},
        cwd=REPO,
    )


def too_wide(text: str, width: int = 100) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.mark.parametrize(
    "argv",
    [
        ["diff", str(BLOG)],
        ["diff", str(TINY)],
        ["diff", str(BLOG), str(BLOG)],
        ["predict", "--model", "bloom-176b", "--topology", "8xA100-80GB"],
        ["predict", "--model", "bloom-176b", "--topology", "4xA100-80GB"],
        ["run", "--dry-run", "--model", "bloom-176b", "--topology", "8xA100-80GB"],
        ["run", "--dry-run", "--model", "tiny"],
    ],
    ids=lambda argv: " ".join(a if "/" not in a else Path(a).name.split(".")[0] for a in argv),
)
def test_default_output_fits_100_columns_and_holds_no_colour_in_a_pipe(argv: list[str]) -> None:
    done = bloomperf(*argv)
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.strip()
    assert too_wide(done.stdout) == []
    assert "\x1b" not in done.stdout  # a pipe gets no escape codes


def test_on_cpu_the_headline_says_timing_was_not_judged_and_why() -> None:
    done = bloomperf("diff", str(TINY))
    lines = [line for line in done.stdout.splitlines() if "not judged" in line]
    assert len(lines) == 1 and "timing recorded, not judged (" in lines[0], done.stdout
    assert "bloomperf ab" in lines[0]
    # The cells themselves no longer repeat it beside every figure.
    assert "(+" not in done.stdout.split(lines[0], 1)[1]


def test_a_gpu_run_judged_on_timing_has_no_such_headline() -> None:
    assert "not judged (" not in bloomperf("diff", str(BLOG)).stdout


def comparison_of(path: Path):  # type: ignore[no-untyped-def]
    run = read_results(path)
    return judge(run, find_baseline(run.topology, run.model.name))


@pytest.mark.parametrize("path", [BLOG, TINY], ids=["blog", "tiny"])
def test_colour_changes_nothing_but_the_colour(path: Path) -> None:
    comparison = comparison_of(path)
    plain = render_comparison(comparison, "text", width=100)
    coloured = render_comparison(comparison, "text", colour=True, width=100)
    assert "\x1b" not in plain
    assert ANSI.sub("", coloured) == plain
    # The verdict line is red when the run fails, green when it passes.
    last = coloured.rstrip("\n").splitlines()[-1]
    expected = STYLES["regressed"] if comparison.failed else STYLES["improved"]
    assert last.startswith(expected)


def test_a_regressed_cell_is_red_and_a_timing_not_judged_is_dim() -> None:
    from tests.builders import scaled_run

    run = read_results(BLOG)
    slower = scaled_run(run, 1.5, "accelerate-bf16-bs1")
    comparison = judge(slower, find_baseline(run.topology, run.model.name))
    coloured = render_comparison(comparison, "text", colour=True, width=100)
    assert f"{STYLES['regressed']}230" not in coloured  # the unchanged figure stays plain
    assert re.search(re.escape(STYLES["regressed"]) + r"345\.\d+ ms \+50% REGRESSED", coloured)
    tiny = comparison_of(TINY)
    assert STYLES["dim"] in render_comparison(tiny, "text", colour=True, width=100)


def test_colour_only_at_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as terminal:
            monkeypatch.delenv("NO_COLOR", raising=False)
            monkeypatch.setenv("TERM", "xterm")
            assert wants_colour(terminal)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not wants_colour(terminal)
            monkeypatch.setenv("NO_COLOR", "")  # empty: as if unset (no-color.org)
            assert wants_colour(terminal)
            monkeypatch.setenv("TERM", "dumb")
            assert not wants_colour(terminal)
    finally:
        os.close(leader)
        os.close(follower)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert not wants_colour(io.StringIO())


cells = st.text(alphabet="abcdef0123456789 .%+", min_size=0, max_size=18)


@given(
    data=st.data(),
    columns=st.integers(2, 12),
    rows=st.integers(0, 6),
    width=st.integers(40, 120),
)
def test_a_table_cut_to_a_width_keeps_every_cell_once_and_fits(
    data: st.DataObject, columns: int, rows: int, width: int
) -> None:
    header = [f"h{i}" for i in range(columns)]
    body = [[data.draw(cells).strip() or "x" for _ in range(columns)] for _ in range(rows)]
    text = fit_table(header, body, width)
    blocks = text.split("\n\n")
    # Every column after the labels appears in exactly one block, in order; labels in each.
    shown = [name for block in blocks for name in block.splitlines()[0].split()]
    assert [n for n in shown if n != "h0"] == header[1:]
    assert all(block.splitlines()[0].startswith("h0") for block in blocks)
    label = max(len(r[0]) for r in [header, *body])
    widest = max(len(r[i]) for r in [header, *body] for i in range(1, columns))
    if label + 2 + widest <= width:  # a single column wider than the terminal cannot fit
        assert too_wide(text, width) == []
