"""Names that become parts of file names: topology ids and model names, checked where read.

A baseline's file name is ``<topology>.<model>.json`` (a hub id's "/" as "--"), so a name read
from a results or baseline file decides where `baseline accept` writes. Only plain names pass:
letters, digits and ``. _ + -``, starting with a letter or digit (so never ``..``, an absolute
path, a newline or a NUL); a model name may be a hub id ``org/name`` of two such parts.
"""

from __future__ import annotations

import re

from bloomperf.core.errors import BloomperfError

_PART = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}"
TOPOLOGY_ID = re.compile(rf"{_PART}")
MODEL_NAME = re.compile(rf"{_PART}(?:/{_PART})?")


def check_topology_id(text: str, where: str) -> str:
    if not TOPOLOGY_ID.fullmatch(text):
        raise BloomperfError(f"{where}: topology id {text[:60]!r} is not a plain name {_RULE}")
    return text


def check_model_name(text: str, where: str) -> str:
    if not MODEL_NAME.fullmatch(text):
        raise BloomperfError(
            f"{where}: model name {text[:60]!r} is not a plain name or org/name {_RULE}"
        )
    return text


_RULE = "(letters, digits and . _ + -, starting with a letter or digit)"
