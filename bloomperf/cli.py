"""`bloomperf` command line: one subcommand per concern module.

Each module in ``COMMAND_MODULES`` defines ``add_command(subparsers)`` which adds its parser and
sets ``func`` (taking the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from bloomperf.errors import BloomperfError

COMMAND_MODULES: tuple[str, ...] = (
    "bloomperf.run",
    "bloomperf.diff",
    "bloomperf.baseline_cli",
    "bloomperf.topology",
    "bloomperf.history",
    "bloomperf.predict",
    "bloomperf.report",
    "bloomperf.calibrate",
    "bloomperf.shard",
    "bloomperf.ab",
    "bloomperf.bisect",
)


class _Parser(argparse.ArgumentParser):
    """argparse, but its usage errors are one line (plus exit 2) like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bloomperf",
        description="Performance regression suite for BLOOM inference (Accelerate, DeepSpeed).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except BloomperfError as exc:
        print(f"bloomperf: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("bloomperf: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
