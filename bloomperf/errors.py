"""The one error type a user sees: a single line and an exit code, never a traceback."""

from __future__ import annotations

EXIT_USAGE = 2
EXIT_REGRESSION = 1


class BloomperfError(Exception):
    """Bad input or an unusable file: printed as one line, exits with ``exit_code``.

    The message names the option or file and what is wrong with it.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
