"""Reading and writing the project's JSON files: atomic, hostile-input safe.

Reading is bounded and refuses what is not JSON with one line that names the file (``schema``
checks a document's kind and version); writing goes through a temporary file in the same folder
and ``os.replace`` so a crash, a full disk or Ctrl-C never leaves half a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, overload

from bloomperf.core.errors import BloomperfError

# Files we write are a few MB at most; anything far larger is not ours (and parsing it would
# cost many times its size in memory). BLOOMPERF_MAX_INPUT_BYTES raises or lowers the limit.
DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024
MAX_INPUT_ENV = "BLOOMPERF_MAX_INPUT_BYTES"
# Our documents nest about six levels deep; a hundred levels is an attack, not a results file.
MAX_DEPTH = 64


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard number {name}")


def max_input_bytes() -> int:
    text = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_INPUT_BYTES
    if not text.isdigit() or int(text) <= 0:
        raise BloomperfError(f"{MAX_INPUT_ENV}: must be a positive number of bytes, not {text!r}")
    return int(text)


def read_document(path: Path, what: str) -> Any:
    """The parsed JSON of ``path`` (``what`` it should be, for messages), with one-line errors."""
    return parse_json_text(read_text_bounded(path, f"{what} JSON"), str(path))


def read_text_bounded(path: Path, what: str) -> str:
    """The UTF-8 text of a regular file no larger than the input limit.

    Opened without blocking and checked on the open descriptor: a FIFO, a device or a folder is
    refused before anything is read, and a file that grows while it is read is cut off.
    """
    limit = max_input_bytes()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BloomperfError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise BloomperfError(f"{path}: cannot read: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise BloomperfError(f"{path}: is a directory, expected {what} file")
        if not stat.S_ISREG(info.st_mode):
            raise BloomperfError(f"{path}: is not a regular file, expected {what} file")
        if info.st_size > limit:
            raise BloomperfError(
                f"{path}: file is {info.st_size} bytes, over the {limit}-byte input limit "
                f"({MAX_INPUT_ENV})"
            )
        data = read_at_most(fd, limit + 1)
    except OSError as exc:
        raise BloomperfError(f"{path}: cannot read: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BloomperfError(f"{path}: file grew over the {limit}-byte input limit while read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BloomperfError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object that names a key twice: which value counts is the parser's accident."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {key[:60]!r} appears twice in one object")
        data[key] = value
    return data


def parse_json_text(text: str, where: str) -> Any:
    """``json.loads`` with one-line errors for truncation, NaN/Infinity, duplicate keys and deep
    nesting."""
    try:
        data = json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_refuse_duplicate_keys
        )
    except json.JSONDecodeError as exc:
        raise BloomperfError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise BloomperfError(f"{where}: JSON nested too deeply") from None
    except MemoryError:
        raise BloomperfError(f"{where}: JSON too large to parse in memory") from None
    except ValueError as exc:
        raise BloomperfError(f"{where}: not valid JSON ({exc})") from None
    check_depth(data, where)
    return data


def check_depth(data: Any, where: str) -> None:
    """Refuse documents nested deeper than ``MAX_DEPTH`` (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BloomperfError(f"{where}: JSON nested too deeply (over {MAX_DEPTH} levels)")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def check_output_target(path: Path) -> None:
    """Refuse to replace anything but a regular file: a device, a FIFO, a folder or a link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BloomperfError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise BloomperfError(f"{path}: is a symbolic link; refusing to replace it")
    if not stat.S_ISREG(info.st_mode):
        raise BloomperfError(f"{path}: is not a regular file; refusing to replace it")


def refuse_overwriting_inputs(outputs: list[Path], inputs: list[Path], option: str) -> None:
    """An output that is one of the run's own inputs (results, baseline) is refused: writing
    it would destroy what the output was computed from."""
    for output in outputs:
        for source in inputs:
            if same_file(output, source):
                raise BloomperfError(
                    f"{option}: {output} is also an input ({source}); refusing to overwrite it"
                )


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one.

    The temporary file gets a unique name created with O_EXCL (``mkstemp``): a link planted at a
    guessable name is never followed. It is fsynced before ``os.replace``, so a crash or a full
    disk leaves the old file whole. Only a missing file or a regular file is replaced.
    """
    path = Path(path)
    folder = path.parent  # "." for a bare name
    check_output_target(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(folder, path.name), suffix=".tmp", dir=folder)
        fcntl.flock(fd, fcntl.LOCK_EX)  # held while written: a leftover nobody holds is dead
    except OSError as exc:
        raise BloomperfError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        # mkstemp creates 0600; stored results and baselines are meant to be shared.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        check_output_target(path)  # nothing swapped in meanwhile
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise BloomperfError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise
    remove_dead_temps(folder, path.name)


# mkstemp's part of a temporary name: 8 random characters and ".tmp", plus the leading dot and
# the dot after the prefix.
TEMP_EXTRA = 1 + 1 + 8 + len(".tmp")


def temp_prefix(folder: Path, name: str) -> str:
    """``.NAME.``, NAME cut so the temporary name fits the folder's name limit: a legal name of
    242 to 255 bytes must be writable, and its temporary file with it."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    encoded = os.fsencode(name)[: max(1, limit - TEMP_EXTRA)]
    return f".{os.fsdecode(encoded)}."


# A temporary name as mkstemp and mkdtemp make it from ``temp_prefix``: ``.NAME.XXXXXXXX.tmp``.
TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def dead_temps(folder: Path, name: str | None = None, min_age_s: float = 2.0) -> list[Path]:
    """Temporary files (and folders) of ``name``, or of any name, that a killed writer left in
    ``folder``: nobody holds their lock (a writer holds it until its rename) and they are not
    brand new."""
    pattern = glob.escape(temp_prefix(folder, name)) + "*.tmp" if name else ".*.json.*.tmp"
    try:
        candidates = [p for p in folder.glob(pattern) if TEMP_NAME.fullmatch(p.name)]
    except OSError:
        return []
    return sorted(c for c in candidates if is_dead_temp(c, min_age_s))


def is_dead_temp(path: Path, min_age_s: float) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        ours = stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
        if not ours or time.time() - info.st_mtime < min_age_s:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_dead_temps(folder: Path, name: str | None = None) -> None:
    for leftover in dead_temps(folder, name):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        with contextlib.suppress(OSError):
            leftover.unlink()


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as strict JSON (no NaN or Infinity), written atomically."""
    try:
        text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise BloomperfError(f"{path}: refusing to write non-standard JSON ({exc})") from None
    write_text_atomic(path, text)


def json_fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON's own types, in field order (tuples become lists, as they
    read back): the stored form of every record whose fields are its JSON keys."""
    return as_json_types(dataclasses.asdict(obj))


def as_json_types(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: as_json_types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json_types(v) for v in value]
    return value


# ---- field readers: each names the file and the field when the value is wrong -------------

Doc = dict[str, Any]
BIG = 2**62  # an integer field's default bound: no count bloomperf reads comes near it


def entries(values: list[Any], key: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Each entry of the list field ``key`` as a one-field object named ``key[i]``, so that the
    readers below name the entry itself: ``field 'flags[2]' must be a string``."""
    for i, value in enumerate(values):
        name = f"{key}[{i}]"
        yield {name: value}, name


def get_strings(values: list[Any], key: str, where: str) -> tuple[str, ...]:
    return tuple(get_str(entry, name, where) for entry, name in entries(values, key))


def get_figures(values: list[Any], key: str, where: str) -> tuple[float, ...]:
    """Each entry of the list field ``key`` as a positive measured figure."""
    return tuple(
        get_float(entry, name, where, positive=True) for entry, name in entries(values, key)
    )


def get_str(obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise BloomperfError(f"{where}: field {key!r} must be a string, found {_kind_of(value)}")
    return value


def get_bool(obj: dict[str, Any], key: str, where: str, default: bool | None = None) -> bool:
    """A JSON true or false: never a string or a number read as one ("false" is truthy)."""
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise BloomperfError(
            f"{where}: field {key!r} must be true or false, found {_kind_of(value)}"
        )
    return value


@overload  # required (the default): the value itself; only ``optional`` may give None
def get_int(obj: Doc, key: str, where: str, *, minimum: int = 0, maximum: int = BIG) -> int: ...
@overload
def get_int(
    obj: Doc, key: str, where: str, *, optional: bool, minimum: int = 0, maximum: int = BIG
) -> int | None: ...
def get_int(
    obj: Doc, key: str, where: str, *, optional: bool = False, minimum: int = 0, maximum: int = BIG
) -> int | None:
    """An integer in [minimum, maximum]; None only where ``optional`` and absent or null."""
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BloomperfError(f"{where}: field {key!r} must be an integer, found {_kind_of(value)}")
    if value < minimum or value > maximum:
        raise BloomperfError(f"{where}: field {key!r} is out of range ({value})")
    return value


@overload
def get_float(obj: Doc, key: str, where: str, *, positive: bool = False) -> float: ...
@overload
def get_float(
    obj: Doc, key: str, where: str, *, optional: bool, positive: bool = False
) -> float | None: ...
def get_float(
    obj: dict[str, Any], key: str, where: str, *, optional: bool = False, positive: bool = False
) -> float | None:
    """A finite number in [0, 1e15]; ``positive``: a measured figure, so a normal float > 0
    (zero, negative, denormal or non-finite readings are broken measurements)."""
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BloomperfError(f"{where}: field {key!r} must be a number, found {_kind_of(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise BloomperfError(f"{where}: field {key!r} is out of range (too large)") from None
    if not math.isfinite(number) or number < 0 or number > 1e15:
        raise BloomperfError(f"{where}: field {key!r} is out of range ({number:g})")
    if positive and number < sys.float_info.min:
        raise BloomperfError(
            f"{where}: field {key!r} must be a positive measured figure, found {number:g}"
        )
    return number


def get_list(
    obj: dict[str, Any], key: str, where: str, default: list[Any] | None = None
) -> list[Any]:
    value = obj.get(key, default)
    if not isinstance(value, list):
        raise BloomperfError(f"{where}: field {key!r} must be a list, found {_kind_of(value)}")
    return value


def get_dict(
    obj: dict[str, Any], key: str, where: str, default: dict[str, Any] | None = None
) -> dict[str, Any]:
    value = obj.get(key, default)
    if not isinstance(value, dict):
        raise BloomperfError(f"{where}: field {key!r} must be an object, found {_kind_of(value)}")
    return value


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing"
    return type(value).__name__
