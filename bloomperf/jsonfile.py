"""Reading and writing the project's JSON files: schema-versioned, atomic, hostile-input safe.

Every stored file is an object ``{"kind": ..., "schema_version": N, ...}``. Reading refuses
anything else with one line that names the file; writing goes through a temporary file in the
same folder and ``os.replace`` so a crash, a full disk or Ctrl-C never leaves half a file.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from bloomperf.errors import BloomperfError

# Files we write are a few MB at most; anything far larger is not ours.
MAX_FILE_BYTES = 256 * 1024 * 1024


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard number {name}")


def read_json(path: Path, kind: str, schema_version: int) -> dict[str, Any]:
    """Load a stored file of ``kind`` and check its schema version."""
    data = read_document(path, f"a {kind}")
    check_header(data, str(path), kind, schema_version)
    return data


def read_document(path: Path, what: str) -> Any:
    """The parsed JSON of ``path`` (``what`` it should be, for messages), with one-line errors."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise BloomperfError(f"{path}: file is {size} bytes, too large to be {what} file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BloomperfError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BloomperfError(f"{path}: is a directory, expected {what} JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BloomperfError(f"{path}: cannot read: {exc}") from None
    return parse_json_text(text, str(path))


def parse_json_text(text: str, where: str) -> Any:
    """``json.loads`` with one-line errors for truncation, NaN/Infinity and deep nesting."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise BloomperfError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise BloomperfError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:
        raise BloomperfError(f"{where}: not valid JSON ({exc})") from None


def check_header(data: Any, where: str, kind: str, schema_version: int) -> None:
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: expected a JSON object, found {type(data).__name__}")
    found_kind = data.get("kind")
    if found_kind != kind:
        raise BloomperfError(f"{where}: not a {kind} file (kind is {found_kind!r})")
    version = data.get("schema_version")
    if version != schema_version:
        advice = (
            "upgrade bloomperf to read it"
            if isinstance(version, int) and version > schema_version
            else "re-create it with this bloomperf version"
        )
        raise BloomperfError(
            f"{where}: schema_version {version!r} is not supported "
            f"(this bloomperf reads {schema_version}); {advice}"
        )


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


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one.

    The temporary file gets a unique name created with O_EXCL (``mkstemp``): a link planted at a
    guessable name is never followed. It is fsynced before ``os.replace``, so a crash or a full
    disk leaves the old file whole. Only a missing file or a regular file is replaced.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    check_output_target(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
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


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as strict JSON (no NaN or Infinity), written atomically."""
    try:
        text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError as exc:
        raise BloomperfError(f"{path}: refusing to write non-standard JSON ({exc})") from None
    write_text_atomic(path, text)


# ---- field readers: each names the file and the field when the value is wrong -------------


def get_str(obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise BloomperfError(f"{where}: field {key!r} must be a string, found {_kind_of(value)}")
    return value


def get_int(
    obj: dict[str, Any], key: str, where: str, *, optional: bool = False, minimum: int = 0
) -> int | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BloomperfError(f"{where}: field {key!r} must be an integer, found {_kind_of(value)}")
    if value < minimum or value > 2**62:
        raise BloomperfError(f"{where}: field {key!r} is out of range ({value})")
    return value


def get_float(obj: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BloomperfError(f"{where}: field {key!r} must be a number, found {_kind_of(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > 1e15:
        raise BloomperfError(f"{where}: field {key!r} is out of range ({value})")
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
