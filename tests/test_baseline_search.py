"""Finding a baseline in process: its file name, the first match along the search order, a
user's ``--baseline FILE|TOPOLOGY`` narrowed by the model, where a new baseline may be written,
and results refused among the baselines; each refusal as its whole line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.core.errors import BloomperfError
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.baseline.search import (
    all_baselines,
    baseline_file_name,
    baseline_path_in,
    find_baseline,
    refuse_output_among_baselines,
    resolve_baseline,
)
from tests.builders import cpu_baseline

# A topology no shipped baseline has (the package ships cpu.tiny.json).
CPU_TINY = replace(cpu_baseline(), topology="box1")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder whose ./baselines and user folder are empty, and a folder to pass as
    ``--baselines``."""
    work = tmp_path / "work"
    (work / "baselines").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "given").mkdir()
    return tmp_path


def saved(folder: Path, name: str, topology: str = "box1", model: str = "tiny") -> Path:
    path = folder / name
    save_baseline(replace(CPU_TINY, topology=topology, model=model), path)
    return path


@pytest.mark.parametrize(
    ("topology", "model", "name"),
    [
        ("a.b", "c", "a~db.c.json"),
        ("a", "b.c", "a.b~dc.json"),
        ("8xA100-SXM4-80GB", "bigscience/bloom", "8xA100-SXM4-80GB.bigscience~sbloom.json"),
    ],
)
def test_a_baseline_file_name_escapes_the_names_dots_and_slashes(
    topology: str, model: str, name: str
) -> None:
    assert baseline_file_name(topology, model) == name


NAMES = st.text(st.sampled_from("ab./"), min_size=1, max_size=5)


@given(NAMES, NAMES, NAMES, NAMES)
def test_two_pairs_never_share_a_file_name(t1: str, m1: str, t2: str, m2: str) -> None:
    same = baseline_file_name(t1, m1) == baseline_file_name(t2, m2)
    assert same == ((t1, m1) == (t2, m2))
    assert "/" not in baseline_file_name(t1, m1)


def test_the_first_folder_with_a_match_wins_and_two_matches_in_one_are_refused(
    home: Path,
) -> None:
    project, given = home / "work" / "baselines", home / "given"
    assert find_baseline("box1", "tiny") is None
    theirs = saved(project, "x.json")
    assert find_baseline("BOX1", "TINY") is not None
    assert find_baseline("box1", "tiny").path == str(theirs)  # type: ignore[union-attr]
    assert find_baseline("box1", "other") is None
    mine = saved(given, "mine.json")
    assert find_baseline("box1", "tiny", given).path == str(mine)  # type: ignore[union-attr]
    for count in (2, 3):
        extra = [saved(given, f"again-{i}.json") for i in range(count - 1)]
        paths = sorted([mine, *extra])
        with pytest.raises(BloomperfError) as refused:
            find_baseline("box1", "tiny", given)
        listed = ", ".join(str(p) for p in paths)
        assert str(refused.value) == f"{given}: several baselines match box1 and tiny: {listed}"


def test_an_earlier_folders_baseline_hides_a_later_one_of_the_same_pair(home: Path) -> None:
    project, user = home / "work" / "baselines", home / "data" / "bloomperf" / "baselines"
    user.mkdir(parents=True)
    first = saved(project, "first.json")
    saved(user, "hidden.json")
    other = saved(user, "other.json", model="bloom-176b")
    found = all_baselines(None)
    assert [b.path for b in found if b.topology == "box1"] == [str(first), str(other)]
    given = saved(home / "given", "only.json", topology="1xH200")
    assert [b.path for b in all_baselines(home / "given")] == [str(given)]


def test_a_named_baseline_is_a_file_or_a_topology_narrowed_by_the_model(home: Path) -> None:
    given = home / "given"
    tiny = saved(given, "t.json")
    bloom = saved(given, "b.json", model="bloom-176b")
    assert resolve_baseline("box1", "tiny", given).path == str(tiny)
    assert resolve_baseline("box1", "bloom-176b", given).path == str(bloom)
    # A file by its path, with or without .json; a missing .json path is that file's error.
    plain = given / "plain"
    plain.write_bytes(tiny.read_bytes())
    assert resolve_baseline(str(plain), None, None).path == str(plain)
    with pytest.raises(BloomperfError) as refused:
        resolve_baseline(str(given / "missing.json"), None, None)
    assert str(refused.value).startswith(f"{given / 'missing.json'}: ")  # the reader's, no lookup
    with pytest.raises(BloomperfError) as refused:
        resolve_baseline("box1", None, given)
    assert str(refused.value) == (
        "--baseline: topology 'box1' has baselines for several models (bloom-176b, tiny)"
    )
    with pytest.raises(BloomperfError) as refused:
        resolve_baseline("box1", "other", given)  # no baseline has it: both are still candidates
    assert "several models" in str(refused.value)
    bloom.unlink()
    assert resolve_baseline("box1", "other", given).path == str(
        tiny
    )  # the only one, told why later
    with pytest.raises(BloomperfError) as refused:
        resolve_baseline("1xH200", "tiny", given)
    assert str(refused.value) == f"--baseline: no baseline for topology '1xH200' in {given}"


def test_a_topology_found_nowhere_names_the_whole_search(home: Path) -> None:
    saved(home / "given", "t.json")  # not searched without --baselines
    with pytest.raises(BloomperfError) as refused:
        resolve_baseline("box1", "tiny", None)
    message = str(refused.value)
    assert message.startswith("--baseline: no baseline for topology 'box1' in baselines searched,")
    assert f"1. {home / 'work' / 'baselines'} (./baselines)" in message


def test_a_new_baseline_goes_inside_its_folder_never_over_another_pairs(home: Path) -> None:
    given = home / "given"
    assert baseline_path_in(given, "box1", "tiny") == given / "box1.tiny.json"
    saved(given, "box1.tiny.json")
    assert baseline_path_in(given, "box1", "tiny") == given / "box1.tiny.json"  # its own pair
    saved(given, "box1.Other.json", model="tiny")  # same topology, other model
    with pytest.raises(BloomperfError) as refused:
        baseline_path_in(given, "box1", "Other")
    assert str(refused.value) == (
        f"{given / 'box1.Other.json'}: holds the baseline of box1 / tiny, not of box1 / Other;"
        " refusing to replace it"
    )
    (given / "x.y.json").symlink_to(home / "elsewhere.json")
    with pytest.raises(BloomperfError) as refused:
        baseline_path_in(given, "x", "y")
    assert str(refused.value) == f"{given / 'x.y.json'}: a baseline must be written inside {given}"


def test_results_are_refused_among_the_baselines_searched(home: Path) -> None:
    given, project = home / "given", home / "work" / "baselines"
    refuse_output_among_baselines(home / "results.json", given)
    refuse_output_among_baselines(project / "r.json", given)  # not searched with --baselines
    with pytest.raises(BloomperfError) as refused:
        refuse_output_among_baselines(given / "r.json", given)
    assert str(refused.value) == (
        f"--output {given / 'r.json'}: is inside the baselines folder {given}; refusing to write"
        " results among the baselines"
    )
    with pytest.raises(BloomperfError, match="is inside the baselines folder"):
        refuse_output_among_baselines(project / "r.json", None)


def test_a_baselines_folder_that_is_not_one_is_named(home: Path) -> None:
    with pytest.raises(BloomperfError) as refused:
        find_baseline("box1", "tiny", home / "nowhere")
    assert str(refused.value) == f"--baselines: {home / 'nowhere'} is not a folder"
