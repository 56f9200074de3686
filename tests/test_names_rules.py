"""Names that become parts of file names: every plain name passes unchanged, every other text is
refused in one line that names where it was read, which kind of name it is, the text (cut at 60
characters) and the rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.catalog.names import check_model_name, check_topology_id
from bloomperf.core.errors import BloomperfError

FIRST = "abcXYZ019"
REST = "abcXYZ019._+-"
plain = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(FIRST),
    st.text(alphabet=REST, max_size=99),
)
# Not a plain name: empty, a leading mark, a character outside the rule, or a part too long.
not_plain = st.one_of(
    st.just(""),
    st.builds(lambda lead, name: lead + name, st.sampled_from("._+-/ "), plain),
    st.builds(
        lambda name, bad, cut: name[:cut] + bad + name[cut:],
        plain,
        st.sampled_from([" ", "\n", "\0", "\\", ":", "é", "*", "//"]),
        st.integers(1, 100),
    ),
    st.builds(lambda name: name + "a" * (101 - len(name)), plain),
)
RULE = "(letters, digits and . _ + -, starting with a letter or digit)"


@given(name=plain)
def test_a_plain_name_passes_unchanged_as_either_kind(name: str) -> None:
    assert check_topology_id(name, "f.json") == name
    assert check_model_name(name, "f.json") == name


@given(org=plain, name=plain)
def test_a_hub_id_of_two_plain_parts_is_a_model_name_not_a_topology(org: str, name: str) -> None:
    assert check_model_name(f"{org}/{name}", "f.json") == f"{org}/{name}"
    with pytest.raises(BloomperfError):
        check_topology_id(f"{org}/{name}", "f.json")
    with pytest.raises(BloomperfError):
        check_model_name(f"{org}/{name}/x", "f.json")


@given(text=not_plain, where=st.sampled_from(["results.json", "/a b/base.json", "--model"]))
def test_any_other_text_is_refused_naming_where_what_and_the_rule(text: str, where: str) -> None:
    shown = repr(text[:60])
    with pytest.raises(BloomperfError) as topology:
        check_topology_id(text, where)
    assert str(topology.value) == f"{where}: topology id {shown} is not a plain name {RULE}"
    with pytest.raises(BloomperfError) as model:
        check_model_name(text, where)
    assert str(model.value) == f"{where}: model name {shown} is not a plain name or org/name {RULE}"


def test_a_long_name_is_shown_cut_at_60_characters() -> None:
    text = "a" * 59 + "bc" + " " * 40
    with pytest.raises(BloomperfError, match=r"'a{59}b' is not"):
        check_topology_id(text, "f.json")
    with pytest.raises(BloomperfError, match=r"'a{59}b' is not"):
        check_model_name(text, "f.json")
