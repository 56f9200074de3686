"""Schema-versioned documents: each kind, the version this bloomperf writes, and its migrations.

Every stored document is an object ``{"kind": ..., "schema_version": N, ...}``. As in asv's
results files, a kind lists ``update_to_N`` steps, each turning a version N-1 document into
version N. The one reader of a kind runs the steps an older file needs, in order, before it reads
a single field, so the readers only ever know the current layout. A file newer than this code is
refused with one line naming it (exit 2), never half understood. ``write_versioned`` stamps the
current version: a file is always written at the version this code reads best.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import read_document, write_json_atomic

# An ``update_to_N`` step: a version N-1 document in, a version N document out (a new dict).
Update = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class DocumentKind:
    name: str  # the "kind" field, e.g. "bloomperf-results"
    version: int  # the schema_version this code writes
    updates: Mapping[int, Update] = field(default_factory=dict)  # N -> update_to_N

    def __post_init__(self) -> None:
        # Every version from 1 up must be reachable: a gap would leave some old file unreadable.
        if set(self.updates) != set(range(2, self.version + 1)):
            raise ValueError(
                f"{self.name}: version {self.version} needs update_to_N steps for N in "
                f"2..{self.version}, found {sorted(self.updates)}"
            )

    def header(self) -> dict[str, Any]:
        """The first two fields of every document of this kind, as written now."""
        return {"kind": self.name, "schema_version": self.version}


def read_versioned(path: Path, kind: DocumentKind) -> dict[str, Any]:
    """A stored document of ``kind``, brought up to its current version."""
    return upgrade(read_document(path, f"a {kind.name}"), str(path), kind)


def write_versioned(path: Path, kind: DocumentKind, data: dict[str, Any]) -> None:
    """``data`` written atomically as a ``kind`` document of the current version, header first."""
    write_json_atomic(path, {**kind.header(), **data, **kind.header()})


def upgrade(data: Any, where: str, kind: DocumentKind) -> dict[str, Any]:
    """``data`` checked to be of ``kind``, with the steps from its version to the current run."""
    if not isinstance(data, dict):
        raise BloomperfError(f"{where}: expected a JSON object, found {type(data).__name__}")
    found_kind = data.get("kind")
    if found_kind != kind.name:
        raise BloomperfError(f"{where}: not a {kind.name} file (kind is {found_kind!r})")
    version = data.get("schema_version")
    readable = "1" if kind.version == 1 else f"1 to {kind.version}"
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BloomperfError(
            f"{where}: schema_version {version!r} is not supported (this bloomperf reads "
            f"{readable}); re-create it with this bloomperf version"
        )
    if version > kind.version:
        raise BloomperfError(
            f"{where}: schema_version {version} is not supported (this bloomperf reads "
            f"{readable}); upgrade bloomperf to read it"
        )
    for n in range(version + 1, kind.version + 1):
        data = {**kind.updates[n](data), "schema_version": n}
    return data
