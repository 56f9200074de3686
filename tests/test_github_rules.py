"""The GitHub workflow commands `diff --format github` writes, against the runner's own rules.

The oracle is GitHub's toolkit (actions/toolkit, core/src/command.ts): a message escapes
``%`` ``\\r`` ``\\n`` as ``%25`` ``%0D`` ``%0A``, a property also ``:`` and ``,`` as ``%3A``
``%2C``; the runner reads a line ``::LEVEL file=F,title=T::MESSAGE`` and decodes each part.
The decoder here is written from that rule, character by character, not from bloomperf's code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.analysis.verdicts import (
    BOUNDARY_MOVED_UP,
    ERROR,
    INCOMPARABLE,
    NO_BASELINE,
    NOT_MEASURED,
    REGRESSED,
    SAME,
    CellVerdict,
    Comparison,
    MetricVerdict,
)
from bloomperf.render.github import (
    escape_data,
    escape_property,
    job_outputs,
    render_github,
    write_job_outputs,
)

DATA = {"%": "%25", "\r": "%0D", "\n": "%0A"}
PROPERTY = {**DATA, ":": "%3A", ",": "%2C"}
COMMAND = re.compile(r"::(\w+) file=([^,:]*),title=([^,:]*)::(.*)")


def decode(text: str) -> str:
    """The runner's decoding: each escape back to its character."""
    codes = {code: char for char, code in PROPERTY.items()}
    return re.sub("%25|%0D|%0A|%3A|%2C", lambda m: codes[m.group(0)], text)


def read_commands(out: str) -> list[tuple[str, str, str, str]]:
    commands = []
    for line in out.splitlines():
        match = COMMAND.fullmatch(line)
        assert match, line  # every line is one whole command
        level, file, title, message = match.groups()
        commands.append((level, decode(file), decode(title), decode(message)))
    return commands


awkward = st.text(alphabet=st.sampled_from("ab %:,\r\n€|"), max_size=30)


@given(awkward)
def test_a_message_escapes_exactly_what_the_toolkit_escapes(text: str) -> None:
    assert escape_data(text) == "".join(DATA.get(c, c) for c in text)
    assert decode(escape_data(text)) == text


@given(awkward)
def test_a_property_escapes_also_colon_and_comma(text: str) -> None:
    assert escape_property(text) == "".join(PROPERTY.get(c, c) for c in text)


def cell(status: str, batch: int, *metrics: MetricVerdict, message: str = "") -> CellVerdict:
    return CellVerdict("accelerate", "bf16", batch, status, "ok", "ok", metrics, message=message)


SLOW = MetricVerdict("ms_per_token", REGRESSED, 2.0, 1.0, 0.05)
FINE = MetricVerdict("ms_per_token", SAME, 1.0, 1.0, 0.05)
GONE = MetricVerdict("peak_memory", NOT_MEASURED, None, 1.0, None)


def comparison(*cells: CellVerdict, **run: str) -> Comparison:
    return Comparison(cells, "cpu", "tiny", "baseline.json", **run)


@given(
    st.sampled_from(["", "no cell ran"]),
    st.sampled_from(["", "no figure of 3 cells has a baseline: ms_per_token"]),
    st.sampled_from(["", "other, topology:\nx"]),
)
def test_the_run_s_own_problems_come_first_each_at_its_level(
    incomplete: str, unjudged: str, incomparable: str
) -> None:
    out = render_github(
        comparison(
            cell(SAME, 1, FINE), incomplete=incomplete, unjudged=unjudged, incomparable=incomparable
        ),
        "runs/r, 1.json",
    )
    expected = []
    if incomplete:
        expected.append(("error", "runs/r, 1.json", "bloomperf: incomplete run", incomplete))
    if unjudged:
        expected.append(("error", "runs/r, 1.json", "bloomperf: nothing judged", unjudged))
    if incomparable:
        expected.append(("warning", "runs/r, 1.json", "bloomperf: incomparable", incomparable))
    assert read_commands(out) == expected


def test_every_failing_cell_is_an_error_and_every_doubtful_one_a_warning() -> None:
    cells = (
        cell(REGRESSED, 1, SLOW),
        cell(ERROR, 2, message="worker died"),
        cell(SAME, 4, FINE, GONE),  # passes, but a figure was not measured
        cell(NO_BASELINE, 8),
        cell(INCOMPARABLE, 16, message="other SLA"),
        cell(BOUNDARY_MOVED_UP, 32),
        cell(SAME, 64, FINE),  # nothing to say
    )
    found = read_commands(render_github(comparison(*cells), "r.json"))
    assert [(level, title) for level, _, title, _ in found] == [
        ("error", "bloomperf accelerate-bf16-bs1 regressed"),
        ("error", "bloomperf accelerate-bf16-bs2 error"),
        ("warning", "bloomperf accelerate-bf16-bs4 same"),
        ("warning", "bloomperf accelerate-bf16-bs8 no-baseline"),
        ("warning", "bloomperf accelerate-bf16-bs16 incomparable"),
        ("warning", "bloomperf accelerate-bf16-bs32 boundary-moved-up"),
    ]
    messages = [message for *_, message in found]
    assert messages[:2] == [cells[0].fails(), cells[1].fails()]
    assert messages[2] == "accelerate-bf16-bs4: not measured: peak_memory"
    assert messages[3:] == [f"{c.id}: {c.explain()}" for c in cells[3:6]]
    assert {file for _, file, _, _ in found} == {"r.json"}


@given(st.lists(st.sampled_from([SAME, REGRESSED, ERROR, NO_BASELINE]), max_size=6))
def test_the_job_outputs_count_the_cells(statuses: list[str]) -> None:
    cells = tuple(cell(s, 2**i, SLOW if s == REGRESSED else FINE) for i, s in enumerate(statuses))
    failing = sum(s in (REGRESSED, ERROR) for s in statuses)
    for failed in (False, True):
        outputs = job_outputs(comparison(*cells), failed)
        assert outputs["verdict"] == ("fail" if failed else "pass")
        assert (outputs["cells"], outputs["failed"]) == (str(len(cells)), str(failing))
        for status in set(statuses):
            assert outputs[status] == str(statuses.count(status))


def test_job_outputs_go_to_the_file_the_environment_names_and_nowhere_else(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out €"
    write_job_outputs({"verdict": "pass", "note": "€"}, {"GITHUB_OUTPUT": str(target)})
    write_job_outputs({"verdict": "fail"}, {"GITHUB_OUTPUT": str(target)})
    assert target.read_bytes().decode("utf-8") == "verdict=pass\nnote=€\nverdict=fail\n"
    write_job_outputs({"verdict": "pass"}, {})  # outside Actions: nothing written anywhere
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out €"]


def test_job_outputs_go_where_this_processs_environment_says_when_none_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(target))
    write_job_outputs({"verdict": "fail", "regressed": "2"})
    assert target.read_text(encoding="utf-8") == "verdict=fail\nregressed=2\n"
    monkeypatch.delenv("GITHUB_OUTPUT")
    write_job_outputs({"verdict": "pass"})
    assert target.read_text(encoding="utf-8") == "verdict=fail\nregressed=2\n"


def test_a_warning_names_every_figure_not_measured() -> None:
    energy = MetricVerdict("energy_per_token", NOT_MEASURED, None, 1.0, None)
    out = render_github(comparison(cell(SAME, 1, FINE, GONE, energy)), "r.json")
    assert (
        read_commands(out)[0][3]
        == "accelerate-bf16-bs1: not measured: peak_memory, energy_per_token"
    )
