"""Sizes as users write them (``--max-memory``, ``--host-ram``, ``--swap``): every unit by its
own factor, in any case and with spaces around, fractions rounded down to whole bytes, and each
refusal (not a number, not positive, under a byte, over an exbibyte) a ValueError that says so.
The factors here are written out again, not read from the module."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.sizes import MAX_BYTES, parse_size

FACTORS = {
    "B": 1,
    "kB": 1000,
    "MB": 1000 * 1000,
    "GB": 1000 * 1000 * 1000,
    "KiB": 1024,
    "MiB": 1024 * 1024,
    "GiB": 1024 * 1024 * 1024,
    "TiB": 1024 * 1024 * 1024 * 1024,
}
spellings = st.sampled_from(sorted(FACTORS)).flatmap(
    lambda unit: st.sampled_from([unit, unit.lower(), unit.upper(), f" {unit}"]).map(
        lambda text: (text, FACTORS[unit])
    )
)


@given(st.integers(1, 2**20), spellings, st.sampled_from(["", " ", "\t"]))
def test_a_whole_number_of_any_unit_is_that_many_times_its_factor(
    count: int, unit: tuple[str, int], pad: str
) -> None:
    text, factor = unit
    assert parse_size(f"{pad}{count}{text}{pad}") == count * factor


@given(st.integers(1, 2**19), st.integers(1, 9), spellings)  # under an exbibyte in TiB
def test_a_fraction_is_rounded_down_to_a_whole_byte(
    whole: int, tenths: int, unit: tuple[str, int]
) -> None:
    text, factor = unit
    value = float(f"{whole}.{tenths}") * factor
    assert parse_size(f"{whole}.{tenths}{text}") == math.floor(value)


def test_a_plain_number_is_bytes_and_may_be_written_in_exponent_form() -> None:
    assert parse_size("2000000000") == 2_000_000_000
    assert parse_size("1e3") == 1000 and parse_size("1.5e3kB") == 1_500_000


def test_zero_is_refused_unless_allowed() -> None:
    for text in ("0", "0GiB", "0.0kB"):
        with pytest.raises(ValueError, match=f"must be positive, got {text}"):
            parse_size(text)
        assert parse_size(text, allow_zero=True) == 0


@pytest.mark.parametrize("text", ["-1", "-3GiB", "nan", "inf", "-inf", "infGiB"])
def test_a_negative_or_not_finite_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=f"must be positive, got {text}$"):
        parse_size(text, allow_zero=True)


@pytest.mark.parametrize("text", ["", "GiB", "3 GiB of RAM", "3GiBs", "three", "3PiB", "0x10"])
def test_what_is_not_a_size_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a size such as 3GiB or 512MiB$") as refused:
        parse_size(text)
    assert str(refused.value).startswith(repr(text))


def test_an_exbibyte_is_the_largest_size_and_one_more_unit_is_refused() -> None:
    assert MAX_BYTES == 2**60
    assert parse_size("1048576TiB") == 2**60  # 2**20 TiB
    with pytest.raises(ValueError, match=r"^'1048577TiB' is more than 1152921504606846976 bytes$"):
        parse_size("1048577TiB")


@pytest.mark.parametrize("text", ["0.5b", "0.999B", "1e-3"])
def test_a_size_under_one_byte_is_refused_even_where_zero_is_allowed(text: str) -> None:
    with pytest.raises(ValueError, match=rf"^'{text}' is less than one byte$"):
        parse_size(text, allow_zero=True)
    assert parse_size("1b") == 1 and parse_size("1.5B") == 1
