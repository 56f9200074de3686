"""Arguments several commands share are one definition: the same value is refused alike."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bloomperf.cli import build_parser, main

PREDICT = ["predict", "--model", "tiny", "--topology", "1xA100-80GB"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--layers", "0", "--dry-run"], "--layers: must be a positive integer, got 0"),
        ([*PREDICT, "--layers", "0"], "--layers: must be a positive integer, got 0"),
        (["doctor", "--layers", "0"], "--layers: must be a positive integer, got 0"),
        (["shard", "--tp", "0", "--out", "x"], "--tp: must be a positive integer, got 0"),
        (["doctor", "--tp", "-1"], "--tp: must be a positive integer, got -1"),
        (
            [*PREDICT, "--backends", "fast"],
            "--backends: unknown value 'fast' (5 valid ones: see --help)",
        ),
        ([*PREDICT, "--batches", "0"], "--batch-sizes/--batches: batch size must be a positive"),
        (["doctor", "--device", "gpu"], "--device: unknown value 'gpu' (valid: auto, cpu, cuda)"),
        (["diff", "x.json", "--baselines", ""], "--baselines: is empty"),
    ],
)
def test_a_shared_option_is_checked_as_the_run_checks_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_topology_refuses_what_a_run_refuses_before_reaching_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its own definitions took any integer and any text, and handed them to pdsh.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=1\n")
    for flag, value, message in (
        ("--ssh-port", "-5", "must be a positive integer, got -5"),
        ("--include", "localhost;id", "is not NODE[:SLOT[,SLOT...]][@NODE...]"),
        # Read from the hostfile, past the parser: every slot excluded leaves no node to ask.
        ("--exclude", "localhost", "'localhost' leaves no slot of the hostfile to run on"),
        ("--exclude", "localhost:0", "'localhost:0' leaves no slot of the hostfile to run on"),
    ):
        assert main(["topology", "--hostfile", str(hostfile), flag, value]) == 2
        assert f"{flag}: " in (err := capsys.readouterr().err) and message in err


def test_predict_takes_the_run_spelling_and_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for flag in ("--batch-sizes", "--batches"):
        assert main([*PREDICT, flag, "8,1", "--dtypes", "fp32", "--format", "json"]) == 0
        rows.append(json.loads(capsys.readouterr().out)["rows"])
    assert rows[0] == rows[1]
    assert [c["batch_size"] for c in rows[0][0]["cells"]] == [1, 8]


def every_parser(parser: argparse.ArgumentParser, name: str = "bloomperf") -> Iterator[Any]:
    """(command words, parser) for the program, each command and each command's actions."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, child in action.choices.items():
                yield from every_parser(child, f"{name} {word}")


def test_every_command_action_and_option_says_what_it_is_for() -> None:
    """A --help line without its sentence tells a user nothing: each command, each action of a
    command and each argument has help text of its own (deprecated ones say so)."""
    missing = []
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                # argparse lists a sub-command in --help only when it was given help text.
                helped = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{name} {word}" for word in action.choices if word not in helped]
            elif action.help is not argparse.SUPPRESS and not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
