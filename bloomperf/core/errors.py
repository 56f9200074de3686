"""The one error type a user sees: a single line and an exit code, never a traceback."""

from __future__ import annotations

# The exit codes of every command (and their --help): 0 pass, 1 a judged failure,
# 2 bad input or usage, 3 an internal error (a bug: one line plus a saved traceback).
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class BloomperfError(Exception):
    """Bad input or an unusable file: printed as one line, exits with ``exit_code``.

    The message names the option or file and what is wrong with it.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
