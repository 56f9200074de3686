"""`bloomperf` command line: one subcommand per concern module.

Each module in ``COMMAND_MODULES`` defines ``add_command(subparsers)`` which adds its parser and
sets ``func`` (taking the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from bloomperf import __version__
from bloomperf.core.errors import EXIT_INTERNAL, EXIT_USAGE, BloomperfError
from bloomperf.core.formatting import UnknownName, clean, unknown_name
from bloomperf.core.interrupt import interruption, sigterm_as_interrupt
from bloomperf.core.streams import flush_stdout, guarded_streams

COMMAND_MODULES: tuple[str, ...] = (
    "bloomperf.cli.run",
    "bloomperf.cli.diff",
    "bloomperf.cli.baseline",
    "bloomperf.cli.topology",
    "bloomperf.cli.doctor",
    "bloomperf.cli.history",
    "bloomperf.cli.predict",
    "bloomperf.cli.report",
    "bloomperf.cli.calibrate",
    "bloomperf.cli.shard",
    "bloomperf.cli.ab",
    "bloomperf.cli.bisect",
    "bloomperf.cli.serve",
)


EXIT_CODES = """exit status:
  0  pass
  1  a judged failure: regression, unexpected OOM, error, timeout, or nothing measured
  2  bad input or usage (one line naming the file or option)
  3  internal error (one line, and the path of the saved traceback)
  130 interrupted (Ctrl-C)
  143 terminated (SIGTERM: a CI cancel, timeout, kill), cleaned up as for Ctrl-C"""


class _Parser(argparse.ArgumentParser):
    """argparse, but its usage errors are one line (plus exit 2) like every other error, and
    every command's --help ends with the exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        prefix = f"{self.prog}: error: "
        message = fit_name(one_line(message), sys.exc_info()[1], len(prefix))
        self.exit(EXIT_USAGE, f"{prefix}{fit_choice(message, len(prefix))}\n")


# argparse's refusal of a value outside ``choices`` (3.11 quotes each choice, 3.12 does not).
INVALID_CHOICE = re.compile(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)")


def fit_name(message: str, error: BaseException | None, used: int) -> str:
    """A name a parser refused (``UnknownName``, the cause of argparse's error) fitted to the
    line that argparse's longer prefix leaves it."""
    while error is not None and not isinstance(error, UnknownName):
        error = error.__cause__ or error.__context__
    flag = re.match(r"argument (\S+): ", message)
    if error is None or flag is None:
        return message
    return f"{flag[1]}: {error.fit(used + len(flag[1]) + 2)}"


def fit_choice(message: str, used: int) -> str:
    """argparse's "invalid choice" as bloomperf's own "unknown value" line, which fits the
    terminal (argparse lists every choice, 199 columns for the commands)."""
    found = INVALID_CHOICE.fullmatch(message)
    if found is None:
        return message
    flag, value, listed = found.groups()
    choices = [c.strip().strip("'") for c in listed.split(",")]
    return f"{flag}: {unknown_name(value, choices, used + len(flag) + 2)}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bloomperf",
        description="Performance regression suite for BLOOM inference (Accelerate, DeepSpeed).",
    )
    parser.add_argument("--version", action="version", version=f"bloomperf {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_command(subparsers)
    return parser


def command_list(parser: argparse.ArgumentParser) -> str:
    """What a bare ``bloomperf`` prints: each command on one line, with its help."""
    lines = ["usage: bloomperf COMMAND [options]   (bloomperf COMMAND --help for its options)", ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            width = max(len(name) for name in action.choices)
            lines += [f"  {name:<{width}}  {helps.get(name, '')}" for name in action.choices]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; whatever happens, the exit status keeps its meaning (see EXIT_CODES),
    whatever the locale's encoding and whether or not anyone still reads the output."""
    with guarded_streams():
        return run_main(argv)


def run_main(argv: Sequence[str] | None) -> int:
    try:
        parser = build_parser()
        argv = list(sys.argv[1:] if argv is None else argv)
        if not argv:
            print(command_list(parser))
            return 0
        refuse_dashes_as_value(argv)
        args = parser.parse_args(argv)
        with sigterm_as_interrupt():
            code: int = args.func(args)
        flush_stdout()
    except BloomperfError as exc:
        print(f"bloomperf: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (bloomperf.core.interrupt)
        how, code = interruption(stop)
        print(f"bloomperf: {how}", file=sys.stderr)
        return code
    except SystemExit as exc:  # argparse: --help, usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except OSError as exc:
        # The file system refused a path the user gave (too long, no permission, a loop …):
        # bad input, named like every other, not a bug.
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"bloomperf: error: {one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        # A bug, not a verdict: never exit 1 (which means "regression") with a traceback.
        saved = save_traceback()
        print(
            f"bloomperf: internal error: {one_line(f'{type(exc).__name__}: {exc}')}"
            f" (traceback saved to {saved})",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return code


def refuse_dashes_as_value(argv: list[str]) -> None:
    """``--opt=--``: Python 3.11's argparse drops the "--" and hands the option an empty list."""
    for arg in argv:
        if arg == "--":
            return  # everything after it is positional
        if arg.startswith("-") and arg.endswith("=--"):
            raise BloomperfError(f"{arg.split('=', 1)[0]}: expected a value, found '--'")


def one_line(text: str) -> str:
    """A message from a file or a library as one printable line."""
    return " ".join(clean(text).split())[:2000]


def save_traceback() -> str:
    """Write the current exception's traceback to a private file; its path, or why not."""
    try:
        fd, path = tempfile.mkstemp(prefix="bloomperf-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(traceback.format_exc())
    except OSError as exc:
        return f"nowhere: {exc.strerror or exc}"
    return path


if __name__ == "__main__":
    sys.exit(main())
