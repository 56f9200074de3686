"""Command-line arguments that several commands share, each defined once.

A run option (``options.OPTIONS``) keeps its flag, metavar, parser and help wherever another
command takes it too, so ``--layers 0`` or a ``--include`` with shell characters is refused alike
by ``run``, ``predict``, ``doctor`` and ``topology``. A command passes only what is its own: a
help sentence where the meaning is narrower, a default, or ``required``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bloomperf.analysis.changes import (
    DEFAULT_CONFIRM,
    DEFAULT_TOLERANCE,
    DEFAULT_WINDOW,
    check_test_settings,
)
from bloomperf.core.formatting import UnknownName
from bloomperf.harness.options import OPTIONS, Option

T = TypeVar("T")


def checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An options parser as an argparse type: a usage error with its message (argparse's own
    for a ValueError would be "invalid parse value")."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except UnknownName as exc:  # kept as the cause: the parser fits it to its line
            raise argparse.ArgumentTypeError(str(exc)) from exc
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def run_option(name: str) -> Option:
    return next(option for option in OPTIONS if option.name == name)


def add_run_option(parser: Any, name: str, *flags: str, **overrides: Any) -> None:
    """Run option ``name`` on another command; ``flags`` adds older spellings of it."""
    option = run_option(name)
    settings: dict[str, Any] = {"dest": name, "help": option.help}
    if option.flag:
        settings["action"] = "store_true"
    else:
        settings.update(type=checked(option.parse), metavar=option.metavar, default=None)
    settings.update(overrides)
    parser.add_argument(option.cli_flag, *flags, **settings)


def add_node_arguments(parser: Any) -> None:
    """Multi-node: the nodes of a DeepSpeed hostfile, reached through the launcher's transport."""
    add_run_option(
        parser, "hostfile", help="list every node of this DeepSpeed hostfile [this node only]"
    )
    add_run_option(parser, "launcher", default="pdsh")
    for name in ("ssh_port", "include", "exclude"):
        add_run_option(parser, name)


def add_format_argument(parser: Any, *more: str, help: str = "output format [text]") -> None:
    parser.add_argument("--format", choices=("text", *more), default="text", help=help)


class Deprecated(argparse.Action):
    """An option under its old spelling too: the old one still works, with one line on stderr
    naming the new one (``DEPRECATED`` maps each old spelling to it)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        if option in DEPRECATED:
            print(f"bloomperf: {option} is deprecated; use {DEPRECATED[option]}", file=sys.stderr)
        setattr(namespace, self.dest, values)


# --tolerance means one thing in every command (diff, ab, bisect): this, with its own default.
TOLERANCE_HELP = "the smallest relative ms/token change that counts (0.05: 5 %%)"

# Old spelling -> the one name each concept has now: a history folder is --history,
# a folder written is --out-dir, a file written is --output.
DEPRECATED = {"--dir": "--history", "--into": "--history", "--out": "--out-dir"}


def add_out_argument(parser: Any, help: str) -> None:
    """The folder a command writes: ``--out-dir`` (``--out`` before)."""
    parser.add_argument(
        "--out-dir",
        "--out",
        dest="out",
        type=Path,
        required=True,
        metavar="DIR",
        help=help,
        action=Deprecated,
    )


def add_history_argument(parser: Any, help: str, *old: str, **settings: Any) -> None:
    """The history folder, wherever one is read or written: ``--history DIR``."""
    parser.add_argument(
        "--history",
        *old,
        dest="history",
        type=Path,
        metavar="DIR",
        help=help,
        action=Deprecated,
        **settings,
    )


def add_allow_arguments(parser: Any, incomplete: str, synthetic: str) -> None:
    """The two ways a results file is refused unless asked for: how the help words each."""
    add_run_option(parser, "allow_incomplete", help=incomplete)
    parser.add_argument("--allow-synthetic", action="store_true", help=synthetic)


def add_detection_options(parser: argparse.ArgumentParser) -> None:
    """The test's settings, shared with ``bloomperf diff --history`` and ``bloomperf report``."""
    parser.add_argument(
        "--change-tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="smallest relative shift reported [0.05]",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help="nights compared on each side [6]",
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=DEFAULT_CONFIRM,
        help="nights a new level must hold before it is reported [3]",
    )


def detection_settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = {
        "tolerance": args.change_tolerance,
        "window": args.window,
        "confirm": args.confirm,
    }
    check_test_settings(**settings)
    return settings
