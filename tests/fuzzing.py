"""Shared pieces of the hypothesis fuzzers: hostile values, document mutations, the CLI probe.

The only failure a fuzzer accepts is bloomperf's own: exit status 0, 1 or 2, and for 2 exactly
one line ``bloomperf: error: …`` on stderr. A traceback, status 3 (an internal error) or a
multi-line error fails the property.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bloomperf import cli

# Few examples each, no deadline (a shared 2-core CI box): all fuzzers together stay near a
# minute. Raise with HYPOTHESIS_PROFILE=deep for a longer hunt.
settings.register_profile(
    "ci",
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck)
)
FUZZ = settings.get_profile("ci")

NASTY_TEXT = [
    "",
    " ",
    "../../escape",
    "/etc/passwd",
    "a/b/c",
    "new\nline",
    "nul\x00byte",
    "\x1b[2J\x1b]0;owned\x07",
    "\ud800",
    "é",
    "x" * 300,
    "NaN",
    "Infinity",
    "-1",
    "0",
    "1e999",
    "accelerate",
    "bf16",
    "ok",
    "oom",
    "cpu",
]
NASTY_NUMBERS = [0, -1, 5e-324, 1e-310, 1e308, 2**63, -(2**63), -0.0, 10**400, 10**400]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NASTY_TEXT),
    st.sampled_from(NASTY_NUMBERS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn, document: Any, max_edits: int = 3) -> Any:
    """``document`` with a few edits, each at a place chosen uniformly among all its values:
    a leaf gets a plausible-looking but hostile value (a number for a number, a string for a
    string) that reaches the deepest checks; a container loses, gains or repeats an entry."""
    doc = copy.deepcopy(document)
    for _ in range(draw(st.integers(min_value=1, max_value=max_edits))):
        path = draw(st.sampled_from(list(places(doc))))
        doc = edit_at(draw, doc, path)
    return doc


def places(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    keys = (
        list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
    )
    for key in keys:
        yield from places(node[key], (*path, key))


def edit_at(draw: st.DrawFn, node: Any, path: tuple[Any, ...]) -> Any:
    if path:
        node[path[0]] = edit_at(draw, node[path[0]], path[1:])
        return node
    if not isinstance(node, (dict, list)) or not node:
        like = NASTY_NUMBERS if isinstance(node, (int, float)) else NASTY_TEXT
        return draw(st.sampled_from(like)) if draw(st.integers(0, 3)) else draw(values)
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    key = draw(st.sampled_from(keys))
    action = draw(st.sampled_from(["replace", "drop", "add", "repeat"]))
    if action == "replace":
        node[key] = draw(values)
    elif action == "drop":
        del node[key]
    elif action == "add" and isinstance(node, dict):
        name = draw(st.sampled_from([*NASTY_TEXT[:6], "cells", "kind", "schema_version"]))
        node[name] = draw(values)
    elif isinstance(node, list):
        node.append(copy.deepcopy(node[key]))
    return node


@st.composite
def serialised(draw: st.DrawFn, document: Any) -> bytes:
    """The mutated document as bytes, sometimes truncated, padded or made invalid."""
    text = json.dumps(draw(mutated(document)), allow_nan=True)
    # Mostly well-formed JSON: a parse error stops a file before the checks worth reaching.
    damage = draw(st.sampled_from(["none"] * 7 + ["truncate", "nan", "bytes", "bom"]))
    if damage == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif damage == "nan":
        text = text.replace("0", "NaN", 1)
    data = text.encode("utf-8", "surrogatepass")
    if damage == "bytes":
        data += draw(st.binary(max_size=8))
    elif damage == "bom":
        data = b"\xef\xbb\xbf" + data
    return data


# ---- the strict readers' properties: a wrong JSON type, a key named twice ----------------------

# For each JSON type a value has, values of every other JSON type (JSON has one number type).
WRONG_TYPES: dict[type, list[Any]] = {
    bool: ["false", "true", 0, 1, [], {}],
    int: ["1", 1.5, True, [], {}],
    float: ["1.0", True, [], {}],
    str: [1, True, [], {}],
    list: ["[]", 1, {}, True],
    dict: ["{}", [], 1, True],
}
# Free-form by design: what the environment, the backends and other plugins recorded.
FREE_FORM = ("environment", "details", "machine_info", "commit_info", "stats", "options")


def typed_places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], type]]:
    """Every place of ``document`` that holds a typed value, with that value's type."""
    if path and path[-1] in FREE_FORM:
        return []
    found: list[tuple[tuple[Any, ...], type]] = []
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node[:2])
        if isinstance(node, list)
        else []
    )
    for key, value in children:
        found += typed_places(value, (*path, key))
    if path and node is not None and node != []:
        found.append((path, type(node)))
    return found


@st.composite
def retyped(
    draw: st.DrawFn, document: Any, skip: tuple[str, ...] = (), within: tuple[str, ...] = ()
) -> Any:
    """``document`` with one typed value replaced by a value of another JSON type; only at
    places named by none of ``skip`` and, if given, by one of ``within``."""
    choices = [
        p
        for p in typed_places(document)
        if not set(map(str, p[0])) & set(skip) and (not within or set(map(str, p[0])) & set(within))
    ]
    path, kind = draw(st.sampled_from(choices))
    wrong = [v for v in WRONG_TYPES[kind] if not (kind is float and type(v) is int)]
    doc = copy.deepcopy(document)
    node, key = parent_of(doc, path)
    node[key] = draw(st.sampled_from(wrong))
    return doc


def parent_of(document: Any, where: tuple[Any, ...]) -> tuple[Any, Any]:
    """The object or list that holds the place ``where``, and its key there."""
    node = document
    for step in where[:-1]:
        node = node[step]
    return node, where[-1]


def retype(document: Any, where: tuple[Any, ...], kind: type) -> Any:
    """A copy of ``document`` whose value at ``where`` (of type ``kind``) has another type."""
    doc = copy.deepcopy(document)
    node, key = parent_of(doc, where)
    node[key] = WRONG_TYPES[kind][0]
    return doc


# How a reader names an entry of these lists in its messages ("cell 2", "load time 0").
LIST_LABELS = {"cells": "cell", "load_times": "load time", "provenance": "provenance"}


def assert_names_the_place(message: str, path: Any, where: tuple[Any, ...]) -> None:
    """A reader's refusal of the value at ``where``: one line, starting with the file's path,
    naming the place (its key, or a list entry by its label), and the list entry it is in."""
    assert "\n" not in message and message.startswith(str(path)), message
    key = next(k for k in reversed(where) if isinstance(k, str))
    entry = len(where) > 1 and f"{LIST_LABELS.get(where[-2])} {where[-1]}" in message
    assert key in message or entry, (where, message)
    # An entry of a list field without a label of its own: named by its index, "key[i]".
    if isinstance(where[-1], int) and where[-2] == key and key not in LIST_LABELS:
        assert f"{key}[{where[-1]}]" in message, (where, message)
    for section, label in LIST_LABELS.items():
        if where[0] == section and len(where) > 2:
            assert f"{label} {where[1]}" in message, (where, message)


def objects_in(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if isinstance(node, dict) and node else []
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node[:2])
        if isinstance(node, list)
        else []
    )
    for key, value in children:
        found += objects_in(value, (*path, key))
    return found


def dumps_with_duplicate(node: Any, target: tuple[Any, ...], path: tuple[Any, ...] = ()) -> str:
    """``node`` as JSON text, the object at ``target`` naming its first key twice."""
    if isinstance(node, dict):
        items = [
            f"{json.dumps(k)}: {dumps_with_duplicate(v, target, (*path, k))}"
            for k, v in node.items()
        ]
        if path == target and items:
            items.append(items[0])
        return "{" + ", ".join(items) + "}"
    if isinstance(node, list):
        inner = (dumps_with_duplicate(v, target, (*path, i)) for i, v in enumerate(node))
        return "[" + ", ".join(inner) + "]"
    return json.dumps(node)


@st.composite
def with_duplicate_key(draw: st.DrawFn, document: Any) -> bytes:
    """``document`` as JSON text in which one object, anywhere, names a key twice."""
    target = draw(st.sampled_from(objects_in(document)))
    return dumps_with_duplicate(document, target).encode()


def run_cli(*argv: object) -> tuple[int, str, str]:
    """The real entry point, in process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def assert_gate_answer(code: int, err: str, argv: Any = ()) -> None:
    """bloomperf's own answer, nothing else: 0, 1, or 2 with one error line."""
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), f"{argv!r}: exit {code}: {err}"
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and err.endswith("\n"), f"{argv!r}: {err!r}"
        assert lines[0].startswith(("bloomperf: error: ", "bloomperf ")), f"{argv!r}: {err!r}"
