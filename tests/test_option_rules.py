"""Option plumbing, in process, against oracles of its own: each option's value comes from its
first source (command line > environment > ini > default), an empty value on the command line
is refused while an empty one elsewhere counts as unset, a zero is a value, and every parser
accepts exactly its range and says what it refused."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.config.argparsing import Parser
from hypothesis import example, given
from hypothesis import strategies as st

from bloomperf.backends.ds_inference import SHARD_MARKER
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import UnknownName
from bloomperf.harness import parsers
from bloomperf.harness.options import (
    OPTIONS,
    add_cli_options,
    add_pytest_options,
    input_files,
    resolve_options,
)
from tests.users import as_nobody

# Two values each option parses to different results (a switch's "0" among them),
# and what each parses to: the oracle is this table, not the option's parser.
VALUES: dict[str, tuple[tuple[str, object], tuple[str, object]]] = {
    "new_tokens": (("7", 7), ("12", 12)),
    "threads": (("1", 1), ("3", 3)),
    "cycles": (("2", 2), ("5", 5)),
    "batch_sizes": (("2,1", (1, 2)), ("4", (4,))),
    "no_lock": (("1", True), ("0", False)),
    "launcher": (("slurm", "slurm"), ("pdsh", "pdsh")),
    "master_addr": (("n1", "n1"), ("10.0.0.2", "10.0.0.2")),
}
# Where a value may stand: absent, empty, or one of the option's two values.
STATES = st.sampled_from(["absent", "empty", 0, 1])


def raw(option: str, state: str | int) -> str | None:
    if state == "absent":
        return None
    if state == "empty":
        return ""
    return VALUES[option][int(state)][0]


@given(st.sampled_from(sorted(VALUES)), STATES, STATES, STATES, st.sampled_from(["cli", "pytest"]))
def test_each_option_comes_from_its_first_source_and_empty_is_refused_only_as_a_flag(
    name: str, cli: str | int, env: str | int, ini: str | int, style: str
) -> None:
    option = next(o for o in OPTIONS if o.name == name)
    given_cli = {} if cli == "absent" else {name: raw(name, cli)}
    given_env = {} if env == "absent" else {option.env_var: raw(name, env)}
    given_ini = {} if ini == "absent" else {name: raw(name, ini)}
    flag = option.cli_flag if style == "cli" else option.pytest_flag
    if cli == "empty":
        with pytest.raises(BloomperfError) as refused:
            resolve_options(given_cli, given_ini, given_env, flag_style=style)  # type: ignore[arg-type]
        assert str(refused.value) == f"{flag}: is empty (give a value, or leave the option out)"
        return
    config = resolve_options(given_cli, given_ini, given_env, flag_style=style)  # type: ignore[arg-type]
    first = next((s for s in (cli, env, ini) if s not in ("absent", "empty")), None)
    expected = getattr(RunConfig(), name) if first is None else VALUES[name][int(first)][1]
    assert getattr(config, name) == expected
    # No other option moved: a source of one option is never read as another's.
    for other in OPTIONS:
        if other.name != name:
            assert getattr(config, other.name) == getattr(RunConfig(), other.name), other.name


@pytest.mark.parametrize("source", ["cli", "env", "ini"])
def test_a_bad_value_is_refused_naming_where_it_came_from(source: str) -> None:
    option = next(o for o in OPTIONS if o.name == "new_tokens")
    where = {
        "cli": "--new-tokens",
        "env": "environment variable BLOOMPERF_NEW_TOKENS",
        "ini": "ini option bloomperf_new_tokens",
    }[source]
    cli = {"new_tokens": "x"} if source == "cli" else {}
    env = {option.env_var: "x"} if source == "env" else {}
    ini = {"new_tokens": "x"} if source == "ini" else {}
    with pytest.raises(BloomperfError) as refused:
        resolve_options(cli, ini, env)
    assert str(refused.value) == f"{where}: 'x' is not an integer"


@given(
    st.sampled_from(["absent", "empty", "a.json", "b.json"]),
    st.sampled_from(["absent", "empty", "a.json", "b.json"]),
    st.sampled_from(["absent", "empty", "a.json", "b.json"]),
    st.booleans(),
)
def test_the_input_files_are_each_options_first_source(
    cli: str, env: str, ini: str, hostfile_too: bool
) -> None:
    """The files a run reads, as ``resolve_options`` takes them: the first non-empty source of
    ds_config, then hostfile; every other option's text is not a file."""
    text = {"absent": None, "empty": ""}

    def value(state: str) -> str | None:
        return text.get(state, state)

    cli_map = {"ds_config": value(cli), "master_addr": "n1", "new_tokens": "3"}
    env_map = {k: v for k, v in {"BLOOMPERF_DS_CONFIG": value(env)}.items() if v is not None}
    ini_map = {"ds_config": value(ini)}
    if hostfile_too:
        env_map["BLOOMPERF_HOSTFILE"] = "hosts"
    first = next((value(s) for s in (cli, env, ini) if value(s)), None)
    expected = ([Path(first)] if first else []) + ([Path("hosts")] if hostfile_too else [])
    assert input_files(cli_map, ini_map, env_map) == expected


def test_the_input_files_read_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BLOOMPERF_HOSTFILE", "from-env")
    assert input_files({}) == [Path("from-env")]


@given(st.sets(st.sampled_from("abcde"), min_size=1), st.sets(st.sampled_from("abcde")))
def test_nodes_both_included_and_excluded_are_named_once_each(
    include: set[str], exclude: set[str]
) -> None:
    both = include & exclude
    cli = {"include": "@".join(sorted(include))}
    if exclude:
        cli["exclude"] = "@".join(f"{n}:0" for n in sorted(exclude))
    if not both:
        assert resolve_options(cli, env={}).include == cli["include"]
        return
    with pytest.raises(BloomperfError) as refused:
        resolve_options(cli, env={})
    names = ", ".join(sorted(both))
    assert str(refused.value) == (f"--include and --exclude: {names} is both included and excluded")


def one_line(text: str) -> str:
    """The text without white space: argparse wraps lines, at hyphens too."""
    return "".join(text.split())


def test_every_option_has_its_help_in_the_cli_and_in_pytests_ini_list() -> None:
    parser = argparse.ArgumentParser(prog="x")
    add_cli_options(parser)
    shown = one_line(parser.format_help())
    pytest_parser = Parser(_ispytest=True)  # the parser pytest hands a plugin
    add_pytest_options(pytest_parser.getgroup("bloomperf"), pytest_parser)
    flags = {a: o for o in pytest_parser.getgroup("bloomperf").options for a in o.names()}
    for option in OPTIONS:
        assert one_line(option.help % {}) in shown, option.name  # argparse's "%%" is "%"
        assert pytest_parser._inidict[option.ini_key][0] == option.help, option.ini_key
        assert flags[option.pytest_flag].attrs()["help"] == option.help, option.pytest_flag
        assert flags[option.pytest_flag].attrs()["dest"] == "bloomperf_" + option.name
        assert flags[option.pytest_flag].attrs()["default"] is None  # unset: the next source


# ---- the parsers ----------------------------------------------------------------------------

NAMES = st.sampled_from(["", "batch size", "port"])


@given(st.integers(-(10**6), 10**6), NAMES)
def test_a_positive_integer_is_taken_and_anything_else_is_said(value: int, name: str) -> None:
    if value > 0:
        assert parsers.parse_positive_int(f" {value} ", name) == value
        return
    with pytest.raises(ValueError) as refused:
        parsers.parse_positive_int(str(value), name)
    said = f"{name} must be a positive integer" if name else "must be a positive integer"
    assert str(refused.value) == f"{said}, got {value}"


@given(st.sampled_from(["x", "1.5", "", "1e3", "one"]), NAMES)
def test_text_that_is_no_integer_is_quoted(text: str, name: str) -> None:
    with pytest.raises(ValueError) as refused:
        parsers.parse_positive_int(text, name)
    assert str(refused.value) == f"{text!r} is not an integer" + (f" {name}" if name else "")


@given(st.integers(1, 100), st.integers(-2, 2), NAMES)
def test_a_bounded_integer_takes_its_limit_and_refuses_the_next(
    limit: int, offset: int, name: str
) -> None:
    value = limit + offset
    for parse in (
        lambda t: parsers.parse_bounded_int(t, limit, name),
        parsers.parse_bounded(limit, name),
    ):
        if value > limit:
            with pytest.raises(ValueError) as refused:
                parse(str(value))
            said = f"{name} must be at most" if name else "must be at most"
            assert str(refused.value) == f"{said} {limit}, got {value}"
        elif value > 0:
            assert parse(str(value)) == value


def test_a_bounded_integer_without_a_name_says_only_the_rule() -> None:
    for parse in (lambda t: parsers.parse_bounded_int(t, 3), parsers.parse_bounded(3)):
        with pytest.raises(ValueError) as refused:
            parse("4")
        assert str(refused.value) == "must be at most 3, got 4"
        with pytest.raises(ValueError) as refused:
            parse("0")
        assert str(refused.value) == "must be a positive integer, got 0"


@given(st.integers(-3, 65540))
def test_a_port_is_one_to_65535_and_a_refusal_says_port(port: int) -> None:
    if 1 <= port <= 65535:
        assert parsers.parse_port(str(port)) == port
        return
    with pytest.raises(ValueError) as refused:
        parsers.parse_port(str(port))
    assert str(refused.value).startswith("port must be ")


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, -0.0, 1e-300, 999.999, 1000.0, 1000.001, 1001.0]),
    )
)
def test_a_positive_number_and_a_percent_up_to_1000(value: float) -> None:
    text = repr(value)
    positive = value > 0 and math.isfinite(value)
    if not positive:
        for parse in (parsers.parse_positive_float, parsers.parse_percent):
            with pytest.raises(ValueError) as refused:
                parse(text)
            assert str(refused.value) == f"must be a positive number, got {text}"
        return
    assert parsers.parse_positive_float(text) == value
    if value <= 1000:
        assert parsers.parse_percent(text) == value
    else:
        with pytest.raises(ValueError) as refused:
            parsers.parse_percent(text)
        assert str(refused.value) == f"must be at most 1000, got {text}"


def test_text_that_is_no_number_is_quoted() -> None:
    with pytest.raises(ValueError) as refused:
        parsers.parse_positive_float("fast")
    assert str(refused.value) == "'fast' is not a number"


VALID = ("accelerate", "ds-zero", "ds-inference")


@given(st.lists(st.sampled_from([*VALID, "vllm", " ", ""]), max_size=5))
@example(["ds-zero", "accelerate", "ds-zero", "accelerate"])  # two names, each given twice
def test_a_list_of_names_is_trimmed_checked_and_each_name_given_once(words: list[str]) -> None:
    text = ",".join(words)
    names = [w.strip() for w in words if w.strip()]
    parse = parsers.parse_names(VALID)
    if not names:
        with pytest.raises(ValueError, match=r"^is empty$"):
            parse(text)
    elif any(n not in VALID for n in names):
        with pytest.raises(UnknownName) as unknown:
            parse(text)
        assert unknown.value.value == next(n for n in names if n not in VALID)
        assert unknown.value.valid == VALID
    elif len(set(names)) < len(names):
        with pytest.raises(ValueError) as refused:
            parse(text)
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        assert str(refused.value) == f"{', '.join(twice)} given twice"
    else:
        assert parse(text) == tuple(names)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_batch_sizes_given_twice_are_each_named(sizes: list[int]) -> None:
    text = ",".join(map(str, sizes))
    twice = sorted(s for s in set(sizes) if sizes.count(s) > 1)
    if not twice:
        assert parsers.parse_batch_sizes(text) == tuple(sorted(sizes))
        return
    with pytest.raises(ValueError) as refused:
        parsers.parse_batch_sizes(text)
    assert str(refused.value) == f"batch size {', '.join(map(str, twice))} given twice"


@given(st.sampled_from(["slurm", "pdsh", "Slurm", "mpich", ""]))
def test_a_choice_is_one_of_its_names_exactly(text: str) -> None:
    valid = ("pdsh", "slurm")
    if text in valid:
        assert parsers.parse_choice(valid)(text) == text
        return
    with pytest.raises(UnknownName) as unknown:
        parsers.parse_choice(valid)(text)
    assert (unknown.value.value, unknown.value.valid) == (text, valid)


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


@given(
    st.sampled_from([*TRUE_WORDS, *FALSE_WORDS, "2", "y", "nope", "enabled"]),
    st.sampled_from([str.lower, str.upper, str.title]),
    st.sampled_from(["", " ", "\t"]),
)
def test_a_switch_reads_its_words_in_any_case_and_refuses_others(
    word: str, case: object, pad: str
) -> None:
    text = pad + case(word) + pad  # type: ignore[operator]
    if word in TRUE_WORDS:
        assert parsers.parse_flag(text) is True
    elif word in FALSE_WORDS:
        assert parsers.parse_flag(text) is False
    else:
        with pytest.raises(ValueError) as refused:
            parsers.parse_flag(text)
        assert str(refused.value) == f"{text!r} is not a boolean (use 1/0, true/false)"


HOST_CHARS = "aZ09._-:@ /"


@given(st.text(HOST_CHARS, max_size=8))
def test_a_host_name_is_letters_digits_dots_dashes_after_a_letter_or_digit(text: str) -> None:
    ok = bool(text) and text[0].isalnum() and all(c.isalnum() or c in "._-" for c in text)
    if ok:
        assert parsers.parse_host(text) == text
    else:
        with pytest.raises(ValueError) as refused:
            parsers.parse_host(text)
        assert str(refused.value) == f"{text!r} is not a host name or address"


@given(st.sampled_from(["Node1", "n1:0,1", "A@B:2", "n1:", "@n1", "n 1", "N-1.x@m_2:3"]))
def test_a_node_filter_takes_upper_and_lower_case_names(text: str) -> None:
    ok = text in ("Node1", "n1:0,1", "A@B:2", "N-1.x@m_2:3")
    if ok:
        assert parsers.parse_node_filter(text) == text
    else:
        with pytest.raises(ValueError, match="is not NODE"):
            parsers.parse_node_filter(text)


def test_a_ds_config_at_the_size_limit_is_read_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    limit = parsers.MAX_DS_CONFIG_BYTES
    config = tmp_path / "ds.json"
    head, tail = '{"a": ', '""}'
    config.write_text(head + " " * (limit - len(head) - len(tail)) + tail)
    assert config.stat().st_size == limit
    assert parsers.parse_ds_config(str(config)) == {"a": ""}
    config.write_text(head + " " * (limit - len(head) - len(tail) + 1) + tail)
    with pytest.raises(ValueError) as refused:
        parsers.parse_ds_config(str(config))
    assert str(refused.value) == f"{config}: {limit + 1} bytes, over {limit} for a config"


def test_a_ds_config_that_is_missing_a_folder_or_a_list_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(ValueError) as refused:
        parsers.parse_ds_config(str(missing))
    assert str(refused.value) == f"{missing}: cannot read: No such file or directory"
    with pytest.raises(ValueError) as refused:
        parsers.parse_ds_config(str(tmp_path))
    assert (
        str(refused.value) == f"{tmp_path}: is a directory, expected a DeepSpeed config JSON file"
    )
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(ValueError) as refused:
        parsers.parse_ds_config(str(listed))
    assert str(refused.value) == f"{listed}: a DeepSpeed config must be a JSON object"


def test_a_work_folder_must_be_a_folder_or_creatable_under_a_writable_one(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    assert parsers.parse_work_folder(str(tmp_path / "new" / "deeper")) == tmp_path / "new/deeper"
    with pytest.raises(ValueError) as refused:
        parsers.parse_work_folder(str(afile))
    assert str(refused.value) == f"{afile} exists and is not a folder"
    with pytest.raises(ValueError) as refused:
        parsers.parse_work_folder(str(afile / "under"))
    assert str(refused.value) == f"{afile / 'under'}: {afile} is not a writable folder"


def parser_said(parse: Callable[[str], Path], text: str) -> str:
    """What a path parser answers, as text (a child run as nobody returns JSON)."""
    try:
        return str(parse(text))
    except ValueError as exc:
        return f"refused: {exc}"


def work_folder_said(text: str) -> str:
    return parser_said(parsers.parse_work_folder, text)


def test_a_folder_one_may_not_write_in_or_enter_is_no_place_for_a_work_folder() -> None:
    """As root the check runs as nobody, so that root's access to every folder cannot pass it."""
    base = Path(tempfile.mkdtemp(prefix="bloomperf-work-"))
    try:
        base.chmod(0o755)
        work_folder_said(str(base / "warm-up"))  # what the child needs, imported as root
        for mode, usable in ((0o555, False), (0o666, False), (0o733, True)):
            folder = base / f"mode{mode:o}"
            folder.mkdir()
            folder.chmod(mode)
            target = str(folder / "w")
            said = as_nobody(work_folder_said, target)
            if usable:
                assert said == target
            elif mode == 0o666:  # not even looked into
                assert said == f"refused: {target}: cannot be reached: Permission denied"
            else:
                assert said == f"refused: {target}: {folder} is not a writable folder"
    finally:
        for folder in base.iterdir():
            folder.chmod(0o755)
        shutil.rmtree(base)


def test_a_sharded_folder_that_is_no_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        parsers.parse_sharded(str(tmp_path / "none"))
    assert str(refused.value) == f"{tmp_path / 'none'} is not a folder"


def sharded_said(text: str) -> str:
    return parser_said(parsers.parse_sharded, text)


def test_a_sharded_folder_one_may_not_enter_or_read_is_refused_by_name() -> None:
    """As root the check runs as nobody, so that root's access to every folder cannot pass it:
    a folder on the way that may not be entered, the folder itself, an unreadable marker."""
    base = Path(tempfile.mkdtemp(prefix="bloomperf-sharded-"))
    marker = json.dumps({"tp": 2, "kernel_inject": False})
    names = ("good", "shut/tp2", "listed", "unreadable")
    try:
        base.chmod(0o755)
        for name in names:
            (base / name).mkdir(parents=True)
            (base / name / SHARD_MARKER).write_text(marker)
            (base / name / SHARD_MARKER).chmod(0o644)
        (base / "unreadable" / SHARD_MARKER).chmod(0o000)
        for name in ("shut", "listed"):
            (base / name).chmod(0o666)  # listed, not entered
        assert sharded_said(str(base / "good")) == str(base / "good")  # imported as root
        said = {name: as_nobody(sharded_said, str(base / name)) for name in names}
        assert said["good"] == str(base / "good")
        for name in ("shut/tp2", "listed"):
            assert said[name] == f"refused: {base / name}: cannot be reached: Permission denied"
        unreadable = base / "unreadable" / SHARD_MARKER
        assert said["unreadable"] == f"refused: {unreadable}: cannot read: Permission denied"
    finally:
        for folder in (base / "shut", base / "listed"):
            folder.chmod(0o755)
        shutil.rmtree(base)
