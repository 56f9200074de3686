"""Hostile option values for every command, through the real CLI entry in process (hypothesis).

Each command's options are read from its real argparse parser, so a new option is fuzzed as
soon as it exists. Values: empty, blank, negative, huge, NaN, units that do not exist, paths
that escape or do not exist, NUL bytes, escapes, random text. The answer must be bloomperf's
own: exit 0, 1 or 2 (for 2, one line), never a traceback or an internal error.

Commands that measure are fuzzed up to the point where they would start: `run --dry-run`
(the whole option validation and the plan, nothing loaded), and for `calibrate`, `ab`,
`bisect` and `shard` their parser plus the shared option resolution.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf import cli
from bloomperf.backends import BACKEND_NAMES, DTYPES
from bloomperf.cli.arguments import DEPRECATED
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.options import resolve_options
from tests.fuzzing import FUZZ, NASTY_TEXT, assert_gate_answer, run_cli

REPO = Path(__file__).resolve().parent.parent
BLOG_RESULTS = str(REPO / "tests" / "data" / "results" / "8xA100-SXM4-80GB.blog.results.json")

option_values = st.one_of(
    st.sampled_from(NASTY_TEXT),
    st.sampled_from(
        [
            "0.5b",
            "3GiB",
            "-3GiB",
            "1e999GiB",
            "nan",
            "inf",
            "-inf",
            "1,2,,3",
            ",",
            "0:0GiB",
            "99999999999999999999999",
            "2026-02-30",
            "9999-12-31",
            "auto",
            "json",
            "text",
            "/dev/null",
            "999999999999x8xA100-80GB",
            "8x1000000xH100-80GB",
            "/nonexistent/x",
            "-",
            "--",
            "=",
            "1;rm -rf /",
            "$(id)",
            "0x10",
            # Beyond what any machine or reader holds; a value named twice.
            "70000",
            "65536",
            "1000000000",
            "fp32,fp32",
            "accelerate,accelerate",
            "1,2,1",
        ]
    ),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=16),
)


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """ "diff", "baseline accept", … → the real parser of each command."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers and prefix:
            found[prefix] = parser
        for action in subparsers:
            for name, child in action.choices.items():
                walk(child, f"{prefix} {name}".strip())

    walk(cli.build_parser(), "")
    return found


PARSERS = subcommand_parsers()


def optionals(command: str, fixed: tuple[str, ...] = ()) -> list[argparse.Action]:
    return [
        a
        for a in PARSERS[command]._actions
        if a.option_strings
        and not isinstance(a, argparse._HelpAction)
        and not set(a.option_strings) & set(fixed)
    ]


@st.composite
def options_of(draw: st.DrawFn, command: str, fixed: tuple[str, ...] = ()) -> list[str]:
    """One to three of the command's options, each with a hostile value."""
    actions = optionals(command, fixed)
    if not actions:
        return []
    chosen = draw(st.lists(st.sampled_from(actions), min_size=1, max_size=3))
    argv: list[str] = []
    for action in chosen:
        # An old spelling says it is deprecated on a line of its own (tests/test_cli_rules.py).
        flag = draw(st.sampled_from([s for s in action.option_strings if s not in DEPRECATED]))
        if action.nargs == 0:
            argv.append(flag)
        elif draw(st.booleans()):
            argv += [flag, draw(option_values)]
        else:
            argv.append(f"{flag}={draw(option_values)}")
    return argv


# Positionals that make a command do its real work, and the options that stay fixed because
# they name where it writes (a fuzzed --baselines / or --dir / would write there for real).
IN_PROCESS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "diff": ([BLOG_RESULTS], ()),
    "baseline show": (["8xA100-80GB"], ()),
    "baseline accept": ([BLOG_RESULTS, "--baselines", "{tmp}/baselines"], ("--baselines",)),
    "history add": ([BLOG_RESULTS, "--history", "{tmp}/history"], ("--history",)),
    "history changes": (["--history", "{tmp}/history"], ("--history",)),
    "topology": ([], ()),
    "predict": (["--model", "bloom-176b", "--topology", "8xA100-80GB"], ()),
    "run": (["--dry-run", "--no-lock"], ("--dry-run", "--output")),
}
PARSE_ONLY = sorted(set(PARSERS) - set(IN_PROCESS) - {"report"})


def base_command(command: str, tmp_path: Path) -> list[str]:
    """The command line the fuzzed options are added to: one that works (a history folder
    with a night in it, a baselines folder to accept into)."""
    if not (tmp_path / "history").exists():
        run_cli("history", "add", BLOG_RESULTS, "--history", tmp_path / "history")
    positionals, _ = IN_PROCESS[command]
    return [*command.split(), *(p.replace("{tmp}", str(tmp_path)) for p in positionals)]


@pytest.mark.parametrize("command", sorted(IN_PROCESS))
def test_the_fuzzed_command_lines_work_without_the_hostile_options(
    command: str, tmp_path: Path
) -> None:
    code, _, err = run_cli(*base_command(command, tmp_path))
    assert code in (0, 1), err


def test_every_command_is_fuzzed() -> None:
    assert {"diff", "baseline accept", "run", "history add", "report"} <= set(PARSERS)
    assert set(IN_PROCESS) | set(PARSE_ONLY) | {"report"} == set(PARSERS)


EACH_OPTION = [
    (command, action.option_strings[-1])
    for command in sorted(IN_PROCESS)
    for action in optionals(command, IN_PROCESS[command][1])
    if action.nargs != 0
]


@pytest.mark.parametrize(("command", "option"), EACH_OPTION)
def test_each_option_alone(command: str, option: str, tmp_path: Path) -> None:
    """Every value-taking option on its own, so that none is left to chance."""
    base = base_command(command, tmp_path)

    @settings(FUZZ, max_examples=20)
    @given(value=option_values)
    def probe(value: str) -> None:
        full = [*base, f"{option}={value}"]
        code, _, err = run_cli(*full)
        assert_gate_answer(code, err, full)

    probe()


@pytest.mark.parametrize("command", sorted(IN_PROCESS))
def test_hostile_options_in_process(command: str, tmp_path: Path) -> None:
    base = base_command(command, tmp_path)

    @FUZZ
    @given(argv=options_of(command, IN_PROCESS[command][1]))
    def probe(argv: list[str]) -> None:
        full = [*base, *argv]
        code, _, err = run_cli(*full)
        assert_gate_answer(code, err, full)
        outside = {
            p
            for p in tmp_path.rglob("*")
            if p.parts[len(tmp_path.parts)] not in ("baselines", "history")
        }
        assert not outside, outside

    probe()


def test_hostile_report_options(tmp_path: Path) -> None:
    """report draws plots (slow): fewer examples, its --out kept inside tmp_path."""

    @settings(FUZZ, max_examples=8)
    @given(argv=options_of("report", ("--out-dir",)))
    def probe(argv: list[str]) -> None:
        full = ["report", BLOG_RESULTS, "--out-dir", str(tmp_path / "report"), *argv]
        code, _, err = run_cli(*full)
        assert_gate_answer(code, err, full)

    probe()


LISTS = {"--dtypes": DTYPES, "--backends": BACKEND_NAMES, "--batch-sizes": ("1", "2", "4")}


@FUZZ
@given(flag=st.sampled_from(sorted(LISTS)), data=st.data())
def test_a_list_option_naming_a_value_twice_is_refused(flag: str, data: st.DataObject) -> None:
    """Each value is one cell: a second would be measured, then replace the first."""
    names = data.draw(st.lists(st.sampled_from(LISTS[flag]), min_size=1, max_size=3))
    again = data.draw(st.permutations([*names, data.draw(st.sampled_from(names))]))
    code, _, err = run_cli("run", "--dry-run", "--no-lock", flag, ",".join(again))
    assert_gate_answer(code, err)
    assert code == 2 and "twice" in err and flag in err, err


@pytest.mark.parametrize("command", PARSE_ONLY)
def test_hostile_options_of_measuring_commands(command: str) -> None:
    @FUZZ
    @given(argv=options_of(command))
    def probe(argv: list[str]) -> None:
        full = [*command.split(), *argv]
        try:
            args = cli.build_parser().parse_args(full)
        except SystemExit as exc:
            assert exc.code in (0, 2), full
            return
        if command == "calibrate":
            try:
                resolve_options(vars(args))
            except BloomperfError as exc:
                assert exc.exit_code == 2 and "\n" not in str(exc), full

    probe()
