"""One name per concept over every subcommand's parser, so that a new option cannot
break the rules: the history folder is ``--history DIR`` everywhere, a folder written is
``--out-dir``, a file written ``--output FILE``, ``--tolerance`` has one meaning, every default is
shown in one form (``[...]`` at the end of the help), old spellings keep working with one
deprecation line, ``bloomperf --version`` and a bare ``bloomperf`` answer.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomperf import __version__, cli
from bloomperf.cli.arguments import DEPRECATED, TOLERANCE_HELP, Deprecated
from tests.builders import BLOG_RESULTS
from tests.test_readme_flags import subparsers_of

DEFAULT_SHOWN = re.compile(r"\[[^\]]+\]$")  # the one form: "... [the default]"
OTHER_FORMS = re.compile(r"\(default|\[default|default:")


def parsers(
    parser: argparse.ArgumentParser, name: str = "bloomperf"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for sub, child in subparsers_of(parser).items():
        yield from parsers(child, f"{name} {sub}")


def options() -> list[tuple[str, argparse.Action]]:
    return [
        (name, action)
        for name, parser in parsers(cli.build_parser())
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
    ]


def test_the_rules_see_every_command() -> None:
    names = {name for name, _ in parsers(cli.build_parser())}
    assert {"bloomperf run", "bloomperf history publish", "bloomperf baseline accept"} <= names
    assert len(options()) > 150


def test_every_default_is_shown_in_one_form() -> None:
    wrong = [
        f"{name} {action.option_strings[0]}: {action.help!r}"
        for name, action in options()
        if action.nargs != 0  # a flag's default is "off"
        and (
            OTHER_FORMS.search(action.help or "")
            or not (action.required or DEFAULT_SHOWN.search(action.help or ""))
        )
    ]
    assert not wrong, "\n".join(wrong)


def test_one_name_per_concept() -> None:
    wrong = []
    for name, action in options():
        first, *older = action.option_strings
        if first in DEPRECATED:
            wrong.append(f"{name} {first}: an old spelling as the name")
        for old in older:
            if old in DEPRECATED and (DEPRECATED[old] != first or type(action) is not Deprecated):
                wrong.append(f"{name} {old}: not an alias of {DEPRECATED[old]} that warns")
        if action.dest == "history" and (first != "--history" or action.metavar != "DIR"):
            wrong.append(f"{name} {first}: a history folder is --history DIR")
        if action.dest == "out" and first != "--out-dir":
            wrong.append(f"{name} {first}: a folder written is --out-dir")
        if first == "--output" and action.metavar != "FILE":
            wrong.append(f"{name} --output: names a FILE, not {action.metavar}")
        if first == "--tolerance" and not (action.help or "").startswith(TOLERANCE_HELP):
            wrong.append(f"{name} --tolerance: another meaning ({action.help!r})")
    assert not wrong, "\n".join(wrong)


def test_no_folder_option_keeps_an_old_name_without_warning() -> None:
    spelled = {s for _, action in options() for s in action.option_strings}
    for old in DEPRECATED:
        assert old in spelled  # still accepted ...
    assert all(
        type(action) is Deprecated
        for _, action in options()
        if set(action.option_strings) & set(DEPRECATED)
    )  # ... and always through the warning action


def test_version_and_a_bare_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bloomperf {__version__}"
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    commands = subparsers_of(cli.build_parser())
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == list(commands)
    assert all(len(line) <= 100 for line in out.splitlines())


def test_an_old_spelling_works_and_says_its_new_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["history", "merge", str(BLOG_RESULTS), "--into", str(tmp_path / "h")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == ["bloomperf: --into is deprecated; use --history"]
    assert cli.main(["history", "changes", "--dir", str(tmp_path / "h")]) == 0
    assert "--dir is deprecated; use --history" in capsys.readouterr().err
    assert cli.main(["history", "changes", "--history", str(tmp_path / "h")]) == 0
    assert "deprecated" not in capsys.readouterr().err


def test_history_changes_reads_the_root_that_merge_makes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Once: "0 nights", exit 0, on the folder `history merge` writes (one folder per topology).
    root = tmp_path / "root"
    assert cli.main(["history", "merge", str(BLOG_RESULTS), "--history", str(root)]) == 0
    capsys.readouterr()
    assert cli.main(["history", "changes", "--history", str(root)]) == 0
    out = capsys.readouterr().out
    assert "History: 1 night" in out
    assert cli.main(["diff", str(BLOG_RESULTS), "--history", str(root)]) == 0
    assert "0 nights" not in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert cli.main(["history", "changes", "--history", str(tmp_path / "empty")]) == 2
    assert "holds no nights" in capsys.readouterr().err
