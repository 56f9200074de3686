"""The published JSON Schemas (``bloomperf/store/schemas``), as the package ships them, with a
validator per document kind (jsonschema is a test-only dependency)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

KINDS = ("results", "baseline", "history-night")


def schema(kind: str) -> dict[str, Any]:
    text = (files("bloomperf") / "store" / "schemas" / f"{kind}.schema.json").read_text(
        encoding="utf-8"
    )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def validator(kind: str) -> Draft202012Validator:
    """``kind``'s validator; the night's schema refers to the results schema by its name."""
    registry = Registry().with_resources(
        (schema(k)["$id"], Resource.from_contents(schema(k))) for k in KINDS
    )
    return Draft202012Validator(schema(kind), registry=registry)


def schema_errors(kind: str, document: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator(kind).iter_errors(document)
    ]
