"""Every usage error that names the valid values (backends, dtypes, commands, choices, GPUs,
model shapes, engine dtypes) is one line of at most 100 columns, whatever the user typed: the
list of names is written shorter, or replaced by where to find it, before the line overflows."""

from __future__ import annotations

import pytest

from bloomperf import cli
from bloomperf.core.errors import BloomperfError
from bloomperf.store.serving import engine_dtype

LINE_WIDTH = 100  # docs/ARCHITECTURE.md: terminal output fits 100 columns
TYPOS = ("nope", "x" * 200)
PREDICT = ["predict", "--model", "bloom-560m", "--topology", "8xA100-80GB"]
REFUSED = [
    ["run", "--backends", "{}"],
    ["run", "--backends", "accelerate,{}"],
    ["run", "--dtypes", "{}"],
    ["run", "--device", "{}"],
    ["run", "--load", "{}"],
    ["run", "--launcher", "{}"],
    ["run", "--zero-offload", "{}"],
    ["run", "--offload", "{}"],
    [*PREDICT, "--backends", "{}"],
    ["predict", "--model", "{}", "--topology", "8xA100-80GB"],
    ["predict", "--model", "bloom-560m", "--topology", "8x{}"],
    ["serve", "--workload", "{}"],
    ["diff", "x.json", "--format", "{}"],
    ["doctor", "--device", "{}"],
    ["history", "{}"],
    ["baseline", "{}"],
    ["{}"],
]


@pytest.mark.parametrize("typo", TYPOS, ids=("short", "long"))
@pytest.mark.parametrize("argv", REFUSED, ids=lambda argv: " ".join(argv[:3]))
def test_a_refused_name_is_one_line_within_the_width(
    argv: list[str], typo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([a.replace("{}", typo) for a in argv]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert len(line) <= LINE_WIDTH, line
    assert "error: " in line and captured.out == ""
    assert "_command" not in line, line  # argparse's internal name is no word of the user's


@pytest.mark.parametrize("typo", TYPOS)
def test_a_refused_engine_dtype_is_within_the_width(typo: str) -> None:
    """`serve --engine-args "--dtype X"` (refused before a server starts)."""
    with pytest.raises(BloomperfError) as refused:
        engine_dtype(f"--dtype {typo}")
    line = f"bloomperf: error: {refused.value}"
    assert len(line) <= LINE_WIDTH, line
    assert "float32" in line or typo != "nope"  # a short typo still gets the valid names
