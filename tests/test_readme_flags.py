"""Every command and flag the README shows exists in the real parsers.

The README's ``bloomperf …`` lines (code blocks and inline code) are checked against the
argparse parser ``bloomperf.cli`` builds, down to the subcommand (and its own subcommand, as in
``baseline show``); every ``--bloomperf-…`` flag, and every flag on a ``pytest …`` line, against
what ``pytest --help`` prints with the plugin loaded. A failure names the README line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.cli import build_parser

README = Path(__file__).resolve().parent.parent / "README.md"

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
FLAG = re.compile(r"^--?[A-Za-z][\w-]*")


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def snippets(text: str) -> list[tuple[int, str]]:
    """(README line, command text) for each code-block line and each inline code span."""
    found: list[tuple[int, str]] = []
    for block in FENCE.finditer(text):
        first = line_of(text, block.start())
        lines = block.group(0).splitlines()[1:-1]
        pending = ""
        for index, line in enumerate(lines, start=first + 1):
            if line.rstrip().endswith("\\"):  # a shell continuation: one command
                pending += line.rstrip()[:-1] + " "
                continue
            found.append((index, pending + line))
            pending = ""
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for span in INLINE.finditer(prose):
        found.append((line_of(prose, span.start()), span.group(1).replace("\n", " ")))
    return found


def strip_comment(command: str) -> str:
    return command.split(" #", 1)[0].split("&&")[-1]


def bloomperf_commands(text: str) -> list[tuple[int, list[str]]]:
    """The words after ``bloomperf`` (or ``…/bin/bloomperf``) of each command shown."""
    commands = []
    for line, snippet in snippets(text):
        words = strip_comment(snippet).split()
        if words[:1] == ["$"]:
            words = words[1:]
        # "bloomperf" alone is the name, not a command.
        if len(words) > 1 and (words[0] == "bloomperf" or words[0].endswith("/bin/bloomperf")):
            commands.append((line, words[1:]))
    return commands


def flags_in(words: list[str]) -> list[str]:
    """The option strings among ``words`` (``[--json]``, ``--x=1``, ``--a/--b`` included)."""
    flags = []
    for word in words:
        for part in word.strip("[]()").split("/"):
            match = FLAG.match(part)
            if match and not re.fullmatch(r"-\d+", part):
                flags.append(match.group(0))
    return flags


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def problems_in_command(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What ``words`` uses that ``parser`` (and the subcommands it names) does not know."""
    problems = []
    parsers = [parser]
    rest = list(words)
    while rest and subparsers_of(parsers[0]) and not rest[0].startswith("-"):
        choices = subparsers_of(parsers[0])
        word = rest.pop(0).strip("[]")
        # "baseline show|accept" names two subcommands at once.
        names = [name for name in word.split("|") if name]
        unknown = [name for name in names if name not in choices]
        if unknown:
            return [f"unknown command {' '.join(unknown)!r}"]
        parsers = [choices[name] for name in names]
        if len(parsers) > 1:
            break
    for flag in flags_in(rest):
        if not all(flag in sub._option_string_actions for sub in parsers):
            problems.append(f"unknown flag {flag}")
    return problems


def test_readme_shows_bloomperf_commands() -> None:
    # Guards the extraction itself: a README parse that finds nothing would pass vacuously.
    commands = bloomperf_commands(README.read_text(encoding="utf-8"))
    assert len(commands) > 20
    shown = {words[0] for _, words in commands}
    assert {"run", "diff", "baseline", "ab", "bisect", "shard", "predict"} <= shown


def test_every_bloomperf_flag_in_readme_exists() -> None:
    parser = build_parser()
    failures = [
        f"README.md:{line}: bloomperf {' '.join(words)}: {problem}"
        for line, words in bloomperf_commands(README.read_text(encoding="utf-8"))
        for problem in problems_in_command(parser, words)
    ]
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def pytest_flags() -> set[str]:
    """Every option string ``pytest --help`` prints, with bloomperf's plugin (an entry point)."""
    shown = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        check=True,
        cwd=README.parent,
    ).stdout
    assert "--bloomperf-output" in shown  # the plugin is loaded
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", shown))


def pytest_flags_shown(text: str) -> list[tuple[int, str]]:
    """(README line, flag): each ``--bloomperf-…`` flag, and each flag on a ``pytest`` line."""
    shown = []
    for line, snippet in snippets(text):
        words = strip_comment(snippet).split()
        on_pytest_line = "pytest" in words[:3]
        for flag in flags_in(words):
            if flag.startswith("--bloomperf-") or on_pytest_line:
                shown.append((line, flag))
    return shown


def test_every_pytest_flag_in_readme_exists(pytest_flags: set[str]) -> None:
    shown = pytest_flags_shown(README.read_text(encoding="utf-8"))
    assert any(flag.startswith("--bloomperf-") for _, flag in shown)
    failures = [
        f"README.md:{line}: pytest flag {flag} unknown"
        for line, flag in shown
        if flag not in pytest_flags
    ]
    assert not failures, "\n".join(failures)


def test_a_bogus_flag_is_caught(pytest_flags: set[str]) -> None:
    parser = build_parser()
    assert problems_in_command(parser, ["run", "--batch-sizes", "1", "--no-such"]) == [
        "unknown flag --no-such"
    ]
    assert problems_in_command(parser, ["baseline", "show|nope"]) == ["unknown command 'nope'"]
    assert "--bloomperf-no-such" not in pytest_flags


def options_table(text: str) -> list[tuple[int, str]]:
    """(README line, flag) for the first column of the table under "## Options"."""
    lines = text.splitlines()
    start = lines.index("## Options")
    rows = []
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if line.startswith("## "):
            break
        if line.startswith("| `-"):
            first_cell = re.split(r"(?<!\\)\|", line)[1].replace("`", " ")
            rows += [(number, flag) for flag in flags_in(first_cell.replace(",", " ").split())]
    return rows


def test_options_table_has_all_three_spellings(pytest_flags: set[str]) -> None:
    # The table says every option exists as `bloomperf run --x` and `pytest --bloomperf-x`.
    rows = options_table(README.read_text(encoding="utf-8"))
    assert len(rows) > 20
    run_flags = subparsers_of(build_parser())["run"]._option_string_actions
    failures = [
        f"README.md:{line}: {flag} unknown to bloomperf run"
        for line, flag in rows
        if flag not in run_flags
    ] + [
        f"README.md:{line}: --bloomperf-{flag[2:]} unknown to pytest"
        for line, flag in rows
        if f"--bloomperf-{flag[2:]}" not in pytest_flags
    ]
    assert not failures, "\n".join(failures)
