"""How every stored document is read and written (``core/jsonfile.py``), in process: the input
limit and what is refused before a byte is read, strict JSON (no NaN, no key twice, no deep
nesting), the atomic writer (mode, leftovers of killed writers, links and devices refused), and
the field readers' bounds, each refusal one line naming the file and the field."""

from __future__ import annotations

import fcntl
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import (
    DEFAULT_MAX_INPUT_BYTES,
    MAX_DEPTH,
    MAX_INPUT_ENV,
    TEMP_EXTRA,
    TEMP_NAME,
    as_json_types,
    check_output_target,
    dead_temps,
    get_bool,
    get_dict,
    get_figures,
    get_float,
    get_int,
    get_list,
    get_str,
    get_strings,
    json_fields,
    max_input_bytes,
    parse_json_text,
    read_at_most,
    read_document,
    read_text_bounded,
    refuse_overwriting_inputs,
    remove_dead_temps,
    temp_prefix,
    write_bytes_atomic,
    write_json_atomic,
)
from tests.users import as_nobody

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def refusal(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(BloomperfError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---- the input limit ---------------------------------------------------------------------


@pytest.mark.parametrize(("text", "limit"), [("", None), ("  ", None), ("123", 123), (" 7 ", 7)])
def test_the_limit_is_the_environments_number_or_64_mib(
    monkeypatch: pytest.MonkeyPatch, text: str, limit: int | None
) -> None:
    monkeypatch.setenv(MAX_INPUT_ENV, text)
    assert max_input_bytes() == (limit or 64 * 1024 * 1024) == (limit or DEFAULT_MAX_INPUT_BYTES)


def test_no_limit_in_the_environment_is_64_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_INPUT_ENV, raising=False)
    assert max_input_bytes() == 64 * 1024 * 1024


@pytest.mark.parametrize("text", ["0", "-5", "abc", "1.5", "1e6"])
def test_a_limit_that_is_not_a_positive_count_is_refused(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv(MAX_INPUT_ENV, text)
    assert refusal(max_input_bytes) == (
        f"{MAX_INPUT_ENV}: must be a positive number of bytes, not {text!r}"
    )


@SETTINGS
@given(size=st.integers(1, 300), limit=st.integers(1, 300))
def test_a_file_is_read_up_to_the_limit_and_refused_past_it(
    tmp_path: Path, size: int, limit: int
) -> None:
    path = tmp_path / "d.json"
    path.write_bytes(b"x" * size)
    os.environ[MAX_INPUT_ENV] = str(limit)
    try:
        if size <= limit:
            assert read_text_bounded(path, "results JSON") == "x" * size
        else:
            assert refusal(read_text_bounded, path, "results JSON") == (
                f"{path}: file is {size} bytes, over the {limit}-byte input limit ({MAX_INPUT_ENV})"
            )
    finally:
        del os.environ[MAX_INPUT_ENV]


def test_a_file_that_grows_past_the_limit_while_read_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # /proc files say size 0 and then give more: the stat check passes, the read must not.
    monkeypatch.setenv(MAX_INPUT_ENV, "10")
    status = Path("/proc/self/status")
    assert refusal(read_text_bounded, status, "x") == (
        f"{status}: file grew over the 10-byte input limit while read"
    )


@SETTINGS
@given(data=st.binary(max_size=3000), limit=st.integers(1, 3000), chunk=st.integers(1, 64))
def test_read_at_most_reads_exactly_the_first_limit_bytes(
    data: bytes, limit: int, chunk: int
) -> None:
    read, write = os.pipe()
    try:
        os.set_blocking(write, False)
        os.write(write, data)
        os.close(write)
        assert read_at_most(read, limit) == data[:limit]
    finally:
        os.close(read)


def test_read_at_most_reads_past_one_megabyte_chunks(tmp_path: Path) -> None:
    path = tmp_path / "big"
    data = os.urandom((1 << 20) + 4099)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_at_most(fd, len(data) - 5) == data[:-5]
    finally:
        os.close(fd)


def test_what_is_not_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened without blocking: no writer, no hang
    assert refusal(read_text_bounded, fifo, "baseline JSON") == (
        f"{fifo}: is not a regular file, expected baseline JSON file"
    )
    assert refusal(read_text_bounded, tmp_path, "baseline JSON") == (
        f"{tmp_path}: is a directory, expected baseline JSON file"
    )
    assert (
        refusal(read_text_bounded, tmp_path / "none", "x") == f"{tmp_path / 'none'}: no such file"
    )
    assert refusal(read_text_bounded, tmp_path / "none" / "x", "x").startswith(
        f"{tmp_path / 'none' / 'x'}: no such file"
    )
    plain = tmp_path / "plain"
    plain.write_text("{}")
    assert refusal(read_text_bounded, plain / "below", "x") == (
        f"{plain / 'below'}: cannot read: Not a directory"
    )


@pytest.mark.parametrize(("data", "at"), [(b"\xff", 0), (b'{"a": "\xc3"}', 7), (b"ok\x80", 2)])
def test_text_that_is_not_utf8_names_the_first_bad_byte(
    tmp_path: Path, data: bytes, at: int
) -> None:
    path = tmp_path / "d.json"
    path.write_bytes(data)
    assert refusal(read_document, path, "results") == f"{path}: not UTF-8 text (byte {at})"


def test_read_document_parses_and_names_what_it_expected(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"a": [1, 2.5, null, true]}')
    assert read_document(path, "results") == {"a": [1, 2.5, None, True]}
    (tmp_path / "sub").mkdir()
    assert refusal(read_document, tmp_path / "sub", "results") == (
        f"{tmp_path / 'sub'}: is a directory, expected results JSON file"
    )


# ---- strict JSON -------------------------------------------------------------------------

KEYS = st.text(max_size=6)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@SETTINGS
@given(value=VALUES)
def test_any_standard_json_reads_back_as_written(value: Any) -> None:
    assert parse_json_text(json.dumps(value), "w") == value


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    assert refusal(parse_json_text, f'{{"a": [1, {constant}]}}', "f.json") == (
        f"f.json: not valid JSON (non-standard number {constant})"
    )


def test_a_key_twice_in_one_object_is_refused_and_named_to_60_characters() -> None:
    assert refusal(parse_json_text, '{"b": {"a": 1, "a": 2}}', "f.json") == (
        "f.json: not valid JSON (key 'a' appears twice in one object)"
    )
    key = "k" * 70
    assert refusal(parse_json_text, f'{{"{key}": 1, "{key}": 2}}', "f.json") == (
        f"f.json: not valid JSON (key {'k' * 60!r} appears twice in one object)"
    )
    assert parse_json_text('[{"a": 1}, {"a": 2}]', "f.json") == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("text", "line", "column"), [('{"a": 1', 1, 8), ('{\n  "a": ,\n}', 2, 8), ("", 1, 1)]
)
def test_broken_json_names_its_line_and_column(text: str, line: int, column: int) -> None:
    message = refusal(parse_json_text, text, "f.json")
    assert message.startswith(f"f.json: not valid JSON (line {line}, column {column}: ")


def nested(levels: int) -> str:
    """A document whose deepest value is at depth ``levels`` (the document itself is at depth
    1), alternating objects and lists above a number."""
    text = "1"
    for level in range(levels - 1):
        text = f"[{text}]" if level % 2 else f'{{"k": {text}}}'
    return text


@pytest.mark.parametrize("levels", [1, MAX_DEPTH - 1, MAX_DEPTH])
def test_documents_up_to_the_depth_limit_are_read(levels: int) -> None:
    assert parse_json_text(nested(levels), "f.json") == json.loads(nested(levels))


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, MAX_DEPTH + 2, 5 * MAX_DEPTH])
def test_documents_past_the_depth_limit_are_refused(levels: int) -> None:
    assert refusal(parse_json_text, nested(levels), "f.json") == (
        f"f.json: JSON nested too deeply (over {MAX_DEPTH} levels)"
    )


def test_nesting_past_pythons_recursion_is_refused_in_one_line() -> None:
    deep = "[" * (sys.getrecursionlimit() * 2) + "]" * (sys.getrecursionlimit() * 2)
    assert refusal(parse_json_text, deep, "f.json") == "f.json: JSON nested too deeply"


# ---- writing -----------------------------------------------------------------------------


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_take_the_umasks_mode_not_mkstemps(
    tmp_path: Path, umask: int, mode: int
) -> None:
    old = os.umask(umask)
    try:
        write_bytes_atomic(tmp_path / "r.json", b"{}")
        assert os.umask(old) == umask  # the writer left the process's umask as it was
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == mode


def test_a_write_replaces_the_file_whole_into_a_folder_it_makes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "r.json"
    write_bytes_atomic(target, b"first, longer")
    write_bytes_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.json"]


def test_a_relative_name_is_written_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_json_atomic(Path("r.json"), {"a": 1})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}


def test_json_is_written_indented_in_order_with_a_final_newline(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "r.json", {"z": 1, "a": [1, 2]})
    assert (tmp_path / "r.json").read_text() == '{\n  "z": 1,\n  "a": [\n    1,\n    2\n  ]\n}\n'


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_never_written(tmp_path: Path, value: float) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    message = refusal(write_json_atomic, target, {"a": value})
    assert message.startswith(f"{target}: refusing to write non-standard JSON (")
    assert target.read_text() == "old"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_bytes_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_links_folders_and_fifos_are_never_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("kept")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert refusal(write_bytes_atomic, link, b"x") == (
        f"{link}: is a symbolic link; refusing to replace it"
    )
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        assert refusal(check_output_target, target) == (
            f"{target}: is not a regular file; refusing to replace it"
        )
    assert real.read_text() == "kept"
    check_output_target(real)
    check_output_target(tmp_path / "missing.json")
    plain = tmp_path / "plain"
    plain.write_text("")
    assert (
        refusal(check_output_target, plain / "x") == f"{plain / 'x'}: cannot write: Not a directory"
    )


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    assert refusal(write_bytes_atomic, plain / "sub" / "r.json", b"x").startswith(
        f"{plain / 'sub' / 'r.json'}: cannot write: "
    )


@pytest.mark.parametrize("length", [1, 20, 200, 242, 243, 250, 255])
def test_a_temporary_name_fits_the_folders_name_limit(tmp_path: Path, length: int) -> None:
    name = "r" * (length - 5) + ".json" if length > 5 else "r"
    prefix = temp_prefix(tmp_path, name)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    assert prefix.startswith(".") and prefix.endswith(".")
    assert len(prefix) + 8 + len(".tmp") <= limit
    kept = prefix[1:-1]
    assert name.startswith(kept)
    assert len(kept) == min(len(name), limit - TEMP_EXTRA)
    write_bytes_atomic(tmp_path / name, b"x")  # and the write itself goes through
    assert (tmp_path / name).read_bytes() == b"x"


def leftover(folder: Path, name: str, age_s: float, tag: str = "abcd1234") -> Path:
    path = folder / f".{name}.{tag}.tmp"
    path.write_text("half")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_a_write_removes_its_names_dead_temporaries_and_spares_the_rest(tmp_path: Path) -> None:
    dead = leftover(tmp_path, "r.json", 60)
    fresh = leftover(tmp_path, "r.json", 0, "fresh123")
    other = leftover(tmp_path, "other.json", 60)
    held = leftover(tmp_path, "r.json", 60, "held1234")
    with held.open() as handle:  # a live writer holds its lock until its rename
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        assert dead_temps(tmp_path, "r.json") == [dead]
        write_bytes_atomic(tmp_path / "r.json", b"x")
        assert not dead.exists()
        assert fresh.exists() and other.exists() and held.exists()
    assert dead_temps(tmp_path) == sorted([other, held])
    assert dead_temps(tmp_path, "r.json", min_age_s=0) == sorted([fresh, held])


def test_only_names_a_writer_makes_count_as_its_leftovers(tmp_path: Path) -> None:
    leftover(tmp_path, "r.json", 60, "short")  # mkstemp's part is 8 characters
    leftover(tmp_path, "r.json", 60, "UPPERCAS")
    (tmp_path / ".r.json.abcd1234.tmp").symlink_to(tmp_path / "elsewhere")
    made = leftover(tmp_path, "r.json", 60, "ok_12345")
    assert dead_temps(tmp_path, "r.json") == [made]
    assert dead_temps(tmp_path / "missing", "r.json") == []


def test_a_killed_writers_temporary_folder_counts_as_a_leftover(tmp_path: Path) -> None:
    folder = tmp_path / ".r.json.abcd1234.tmp"
    folder.mkdir()
    then = time.time() - 60
    os.utime(folder, (then, then))
    assert dead_temps(tmp_path, "r.json") == [folder]
    write_bytes_atomic(tmp_path / "r.json", b"x")
    assert not folder.exists()


def test_an_output_that_is_an_input_is_refused_by_any_spelling(tmp_path: Path) -> None:
    source = tmp_path / "base.json"
    source.write_text("{}")
    hard = tmp_path / "hard.json"
    os.link(source, hard)
    for spelling in (
        source,
        tmp_path / "." / "base.json",
        tmp_path / "x" / ".." / "base.json",
        hard,
    ):
        (tmp_path / "x").mkdir(exist_ok=True)
        assert refusal(refuse_overwriting_inputs, [spelling], [source], "--output") == (
            f"--output: {spelling} is also an input ({source}); refusing to overwrite it"
        )
    other = tmp_path / "other.json"
    other.write_text("{}")
    refuse_overwriting_inputs([other, tmp_path / "new.json"], [source], "--output")
    refuse_overwriting_inputs([], [source], "--output")


# ---- records and field readers -------------------------------------------------------------


@dataclass(frozen=True)
class Inner:
    pair: tuple[int, int]


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    items: tuple[Inner, ...]
    table: dict[str, tuple[float, ...]]


def test_records_are_stored_as_jsons_own_types_in_field_order() -> None:
    record = Outer("n", Inner((1, 2)), (Inner((3, 4)),), {"b": (1.5,), "a": ()})
    fields = json_fields(record)
    assert fields == {
        "name": "n",
        "inner": {"pair": [1, 2]},
        "items": [{"pair": [3, 4]}],
        "table": {"b": [1.5], "a": []},
    }
    assert list(fields) == ["name", "inner", "items", "table"]
    assert list(fields["table"]) == ["b", "a"]
    assert json.loads(json.dumps(fields)) == fields
    assert as_json_types((1, [2, (3,)])) == [1, [2, [3]]]


@SETTINGS
@given(value=st.integers(-50, 50), low=st.integers(-20, 20), span=st.integers(0, 20))
def test_an_integer_is_read_exactly_within_its_bounds(value: int, low: int, span: int) -> None:
    high = low + span
    doc = {"n": value}
    if low <= value <= high:
        assert get_int(doc, "n", "f.json", minimum=low, maximum=high) == value
    else:
        assert refusal(get_int, doc, "n", "f.json", minimum=low, maximum=high) == (
            f"f.json: field 'n' is out of range ({value})"
        )


def test_integer_defaults_are_zero_to_two_to_the_62() -> None:
    assert get_int({"n": 0}, "n", "f") == 0
    assert get_int({"n": 2**62}, "n", "f") == 2**62
    assert refusal(get_int, {"n": -1}, "n", "f") == "f: field 'n' is out of range (-1)"
    assert (
        refusal(get_int, {"n": 2**62 + 1}, "n", "f")
        == f"f: field 'n' is out of range ({2**62 + 1})"
    )


@pytest.mark.parametrize(
    ("value", "kind"),
    [(True, "bool"), (1.0, "float"), ("1", "str"), (None, "nothing"), ([], "list")],
)
def test_what_is_not_an_integer_is_refused_by_its_kind(value: Any, kind: str) -> None:
    assert (
        refusal(get_int, {"n": value}, "n", "f") == f"f: field 'n' must be an integer, found {kind}"
    )


def test_an_optional_integer_or_figure_may_be_absent_or_null_and_nothing_else() -> None:
    for reader in (get_int, get_float):
        assert reader({}, "n", "f", optional=True) is None
        assert reader({"n": None}, "n", "f", optional=True) is None
        assert reader({"n": 3}, "n", "f", optional=True) == 3
        assert "found nothing" in refusal(reader, {}, "n", "f")
        assert "found nothing" in refusal(reader, {"n": None}, "n", "f")
        assert "found str" in refusal(reader, {"n": "3"}, "n", "f", optional=True)
    assert (
        refusal(get_int, {"n": -1}, "n", "f", optional=True) == "f: field 'n' is out of range (-1)"
    )


@SETTINGS
@given(number=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**20), 10**20))
def test_a_number_is_read_when_finite_and_in_0_to_1e15(number: float) -> None:
    doc = {"x": number}
    if math.isfinite(number) and 0 <= number <= 1e15:
        read = get_float(doc, "x", "f")
        assert read == float(number) and type(read) is float
    else:
        assert (
            refusal(get_float, doc, "x", "f") == f"f: field 'x' is out of range ({float(number):g})"
        )


def test_a_measured_figure_must_be_a_normal_positive_float() -> None:
    assert get_float({"x": sys.float_info.min}, "x", "f", positive=True) == sys.float_info.min
    assert get_float({"x": 1e15}, "x", "f", positive=True) == 1e15
    assert get_float({"x": 0}, "x", "f") == 0.0
    for broken in (0, 0.0, 5e-324, sys.float_info.min / 2):
        assert refusal(get_float, {"x": broken}, "x", "f", positive=True) == (
            f"f: field 'x' must be a positive measured figure, found {float(broken):g}"
        )
    assert (
        refusal(get_float, {"x": 10**400}, "x", "f") == "f: field 'x' is out of range (too large)"
    )
    assert refusal(get_float, {"x": True}, "x", "f") == "f: field 'x' must be a number, found bool"


def test_list_entries_are_named_by_their_index() -> None:
    assert get_strings(["a", "b"], "flags", "f") == ("a", "b")
    assert refusal(get_strings, ["a", 3], "flags", "f") == (
        "f: field 'flags[1]' must be a string, found int"
    )
    assert get_figures([1, 2.5], "ms", "f") == (1.0, 2.5)
    assert refusal(get_figures, [1.0, 2.0, 0], "ms", "f") == (
        "f: field 'ms[2]' must be a positive measured figure, found 0"
    )
    assert get_strings([], "flags", "f") == () == get_figures([], "ms", "f")


@pytest.mark.parametrize(
    ("reader", "good", "bad", "what"),
    [
        (get_str, "s", 1, "a string, found int"),
        (get_bool, False, "false", "true or false, found str"),
        (get_bool, True, 1, "true or false, found int"),
        (get_list, [1], {}, "a list, found dict"),
        (get_dict, {"a": 1}, [], "an object, found list"),
    ],
)
def test_each_reader_takes_its_own_kind_its_default_and_nothing_else(
    reader: Any, good: Any, bad: Any, what: str
) -> None:
    assert reader({"k": good}, "k", "f") == good
    assert reader({}, "k", "f", good) == good  # the default, when the field is absent
    assert reader({"k": good}, "k", "f", None) == good
    assert refusal(reader, {"k": bad}, "k", "f") == f"f: field 'k' must be {what}"
    assert refusal(reader, {}, "k", "f").endswith("found nothing")


# ---- what the mutation run of core/jsonfile found untested --------------------------------


def test_a_path_the_system_refuses_is_named_with_its_reason() -> None:
    assert refusal(read_text_bounded, Path("a\0b"), "x") == "a\0b: cannot read: embedded null byte"


def test_broken_json_in_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"a": }')
    assert refusal(read_document, path, "results").startswith(
        f"{path}: not valid JSON (line 1, column 7: "
    )


def test_json_too_large_for_memory_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(json, "loads", out_of_memory)
    assert refusal(parse_json_text, "[]", "f.json") == "f.json: JSON too large to parse in memory"


def test_the_largest_number_read_is_1e15() -> None:
    assert get_float({"x": 1e15}, "x", "f") == 1e15
    assert refusal(get_float, {"x": 1e15 + 1}, "x", "f") == "f: field 'x' is out of range (1e+15)"


def test_the_writers_temporary_is_beside_the_target_under_a_name_its_cleanup_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    fsync = os.fsync

    def look(fd: int) -> None:  # while the data is flushed, before the rename
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", look)
    write_bytes_atomic(tmp_path / "r.json", b"x")
    monkeypatch.undo()
    [names] = seen
    [temp] = names
    assert temp.startswith(".r.json.") and temp.endswith(".tmp")
    assert TEMP_NAME.fullmatch(temp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_full_disk_leaves_the_old_file_whole_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_bytes(b"old")
    # A file-size limit makes the write fail as a full disk does (EFBIG instead of ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        message = refusal(write_bytes_atomic, target, b"x" * 5000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    assert message == f"{target}: cannot write: File too large"
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_folder_the_system_will_not_make_is_one_line() -> None:
    target = Path("/proc/bloomperf-missing/r.json")
    assert refusal(write_bytes_atomic, target, b"x") == (
        f"{target}: cannot write: No such file or directory"
    )


def test_a_missing_folders_name_limit_is_taken_as_255() -> None:
    prefix = temp_prefix(Path("/bloomperf-missing-folder"), "r" * 300)
    assert len(prefix) == 2 + 255 - TEMP_EXTRA


def test_a_leftover_over_two_seconds_old_is_dead(tmp_path: Path) -> None:
    old = leftover(tmp_path, "r.json", 2.5)
    assert dead_temps(tmp_path, "r.json") == [old]
    assert dead_temps(tmp_path, "r.json", min_age_s=5) == []


def test_a_link_at_a_temporary_name_is_never_taken_for_a_leftover(tmp_path: Path) -> None:
    real = leftover(tmp_path, "data", 60)  # an old regular file: dead, were it at that name
    link = tmp_path / ".r.json.abcd1234.tmp"
    link.symlink_to(real)
    assert dead_temps(tmp_path, "r.json") == []
    write_bytes_atomic(tmp_path / "r.json", b"x")
    assert link.is_symlink() and real.exists()


def test_a_file_that_fails_while_read_is_one_line() -> None:
    # /proc/self/mem opens as a regular file of size 0, and reading its first page fails.
    assert refusal(read_text_bounded, Path("/proc/self/mem"), "x") == (
        "/proc/self/mem: cannot read: Input/output error"
    )


def test_a_dead_temporary_folder_the_user_cannot_empty_is_left_without_an_error() -> None:
    """Another user's killed writer left a folder whose contents this user may not remove
    (as nobody, when the test runs as root): the clean-up gives up on it quietly, and the
    write it came before still happens."""
    # Under /tmp, which every user may reach (pytest's own folders are private to root).
    shared = Path(tempfile.mkdtemp(prefix="bloomperf-shared-"))
    shared.chmod(0o777)
    dead = shared / ".r.json.abcd1234.tmp"
    dead.mkdir()
    (dead / "part").write_text("half")  # the other user's: not this one's to delete
    then = time.time() - 60
    os.utime(dead, (then, then))

    def clean_then_write(folder: str) -> list[str]:
        remove_dead_temps(Path(folder), "r.json")
        write_bytes_atomic(Path(folder) / "r.json", b"x")
        return sorted(p.name for p in Path(folder).iterdir())

    if os.geteuid() != 0:
        dead.chmod(0o555)  # this user's own folder, made one it cannot empty
    try:
        left = as_nobody(clean_then_write, str(shared))
    finally:
        dead.chmod(0o755)
        shutil.rmtree(shared)
    assert left == [".r.json.abcd1234.tmp", "r.json"]
