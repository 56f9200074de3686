"""Where a run's results file goes, and what happens to a file already there.

- ``--output results/`` (a trailing slash) or an existing folder names a folder: the run's file
  is made inside it under the default name, never a file named ``results``.
- The default name carries the UTC time and says so (``bloomperf-20261203-184500Z.json``): the
  history files a run under its UTC night, and the name agrees with it in every time zone.
- A results file already at the output is never emptied before the new run has cells of its
  own: it is copied aside to ``NAME.previous.json`` before anything is written, and left in
  place until the new run's first cell replaces it (an interrupted run leaves it as it was).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import check_output_target, write_bytes_atomic

NAME_MAX = 255
PREVIOUS = ".previous"


def utc_stamp(now: dt.datetime | None = None) -> str:
    """``20261203-184500Z``: the UTC time of a run, for file names."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y%m%d-%H%M%SZ")


def results_path(given: Path | None, raw: str | None, prefix: str) -> Path:
    """The results file of a run: ``given`` as a file, or a new name in the folder it names
    (``raw`` is the text the user typed, whose trailing slash ``Path`` drops)."""
    name = f"{prefix}-{utc_stamp()}.json"
    if given is None:
        return Path("results") / name
    if str(raw or "").endswith(("/", os.sep)) or given.is_dir():
        return given / name
    return given


def previous_path(output: Path) -> Path:
    """``keep.json`` → ``keep.previous.json``, its stem cut to fit the name limit."""
    suffix = output.suffix if output.suffix == ".json" else ""
    stem = output.name.removesuffix(suffix)
    room = NAME_MAX - len(os.fsencode(PREVIOUS + suffix))
    stem = os.fsdecode(os.fsencode(stem)[:room])
    return output.with_name(f"{stem}{PREVIOUS}{suffix}")


def keep_previous(output: Path) -> Path | None:
    """Copy a results file already at ``output`` aside; where to, or None when there is none."""
    try:
        if output.stat().st_size == 0:
            return None
        check_output_target(output)
        data = output.read_bytes()
    except FileNotFoundError:  # none there, or gone since: nothing to keep
        return None
    except OSError as exc:
        raise BloomperfError(f"--output {output}: cannot read: {exc.strerror or exc}") from None
    aside = previous_path(output)
    write_bytes_atomic(aside, data)
    return aside
