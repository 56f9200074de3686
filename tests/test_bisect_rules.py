"""`bloomperf bisect`'s rules, each against an oracle of its own: the versions pip's own index
path lists (a real pip against a local PEP 503 index), a version tested through its real overlay
with its comparison scripted, a step's verdict and figures from its cells, and every line the
command prints about a step or a finding."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from bloomperf.analysis.contention import Busy
from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER, PairedEstimate
from bloomperf.cli import ab, bisect
from bloomperf.cli.bisect import (
    SKIPPED,
    Finding,
    Step,
    busy_reason,
    conclusion,
    describe_step,
    list_versions,
    nearest,
    render_steps,
    step_from,
    versions_from_pip,
    versions_in_folders,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.interleave import Comparison, Settings
from bloomperf.harness.matrix import Cell
from bloomperf.harness.overlay import PackageSource, prepare_arm
from bloomperf.store.results import Outcome
from tests.wheels import build_wheel, simple_index


def test_pip_lists_every_version_its_index_offers_for_this_or_another_interpreter(
    tmp_path: Path,
) -> None:
    index = simple_index(tmp_path, "bpidx", ["1.0", "1.2", "2.0rc1", "1.10"])
    source = PackageSource(index_url=index)
    # Every version pip saw, pre-releases too (list_versions filters them), in pip's words.
    found = versions_from_pip("bpidx", source, sys.executable)
    assert sorted(found, key=Version) == ["1.0", "1.2", "1.10", "2.0rc1"]
    # Another interpreter (here a link to this one) is asked through pip's --python.
    other = tmp_path / "python3"
    other.symlink_to(sys.executable)
    assert sorted(versions_from_pip("bpidx", source, str(other)), key=Version) == sorted(
        found, key=Version
    )
    with pytest.raises(BloomperfError) as refused:
        versions_from_pip("bpnothere", source, sys.executable)
    message = str(refused.value)
    assert message.startswith("bpnothere: the index lists no versions (ERROR: ")
    assert len(message) <= len("bpnothere: the index lists no versions ()") + 200


def test_an_index_is_asked_through_pip_with_any_local_folders_beside_it(tmp_path: Path) -> None:
    """With --index-url, pip answers (for the interpreter under test), also when --find-links
    folders are given beside it; pre-releases only when asked for."""
    index = simple_index(tmp_path / "idx", "bpboth", ["1.0", "1.2", "2.0rc1"])
    build_wheel(tmp_path / "house", "bpboth", "1.1", {"bpboth/__init__.py": ""})
    other = tmp_path / "python3"
    other.symlink_to(sys.executable)
    source = PackageSource(index_url=index, find_links=(str(tmp_path / "house"),))
    found = list_versions("bpboth", source, False, str(other))
    assert found == [Version("1.0"), Version("1.1"), Version("1.2")]
    assert list_versions("bpboth", PackageSource(index_url=index), True) == [
        Version("1.0"),
        Version("1.2"),
        Version("2.0rc1"),
    ]


@pytest.mark.parametrize("package", ["not a name!", "bp" + "x" * 250])
def test_an_index_that_lists_nothing_is_refused_with_pips_own_error_cut_to_200(
    package: str, tmp_path: Path
) -> None:
    """A requirement pip cannot read (no "from versions" at all) and a package the index does
    not have (pip's error line longer than the 200 characters kept)."""
    source = PackageSource(index_url=simple_index(tmp_path, "bpother", ["1.0"]))
    with pytest.raises(BloomperfError) as refused:
        versions_from_pip(package, source, sys.executable)
    head = f"{package}: the index lists no versions ("
    message = str(refused.value)
    assert message.startswith(head + "ERROR: ") and message.endswith(")")
    reason = message[len(head) : -1]
    assert len(reason) <= 200 and "\n" not in reason
    if len(package) > 200:
        assert len(reason) == 200  # pip's line names the package: cut, not dropped


def test_good_and_bad_must_be_versions_the_index_offers_in_that_order() -> None:
    available = [Version(v) for v in ("1.0", "1.1", "1.2", "1.3")]
    assert bisect.versions_between(available, "1.1", "1.3") == available[1:]
    refusals = {
        ("1.x", "1.3"): "bisect: Invalid version: '1.x'",
        ("1.0", "1.9"): "bisect: BAD 1.9 is not in the index (nearest below: 1.1, 1.2, 1.3; "
        "pip lists no yanked version)",
        ("0.9", "1.3"): "bisect: GOOD 0.9 is not in the index (nearest above: 1.0, 1.1, 1.2; "
        "pip lists no yanked version)",
        ("1.2", "1.2"): "bisect: GOOD 1.2 must be an earlier version than BAD 1.2",
        ("1.3", "1.1"): "bisect: GOOD 1.3 must be an earlier version than BAD 1.1",
    }
    for (good, bad), message in refusals.items():
        with pytest.raises(BloomperfError) as refused:
            bisect.versions_between(available, good, bad)
        assert str(refused.value) == message


def test_a_local_wheelhouse_lists_its_packages_versions_from_the_file_names(
    tmp_path: Path,
) -> None:
    build_wheel(tmp_path / "a", "bp_house", "1.0", {"x.py": ""})
    build_wheel(tmp_path / "b", "BP_House", "1.1", {"x.py": ""})  # one canonical name
    (tmp_path / "b" / "bp_house-2.0.tar.gz").write_bytes(b"")
    (tmp_path / "b" / "bp_house-2.1.zip").write_bytes(b"")
    (tmp_path / "b" / "bp_house-3.0.egg").write_bytes(b"")  # not a wheel nor an sdist
    (tmp_path / "b" / "bp_house-x!y-py3-none-any.whl").write_bytes(b"")  # no version
    (tmp_path / "b" / "other-9.0.tar.gz").write_bytes(b"")
    # Sorted before the package's own files: a file that is not a distribution, and a wheel
    # whose name does not parse, are passed over and the folder read on.
    (tmp_path / "a" / "README.txt").write_bytes(b"")
    (tmp_path / "a" / "0-bad.whl").write_bytes(b"")
    folders = (str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "missing"))
    assert versions_in_folders("BP.House", folders) == ["1.0", "1.1", "2.0", "2.1"]


def test_nearest_names_up_to_three_versions_either_side() -> None:
    available = [Version(v) for v in ("1.0", "1.1", "1.2", "1.3", "2.0", "2.1", "2.2", "2.3")]
    assert nearest(available, Version("1.5")) == (
        "nearest below: 1.1, 1.2, 1.3; nearest above: 2.0, 2.1, 2.2"
    )
    assert nearest(available, Version("0.1")) == "nearest above: 1.0, 1.1, 1.2"
    assert nearest(available, Version("9")) == "nearest below: 2.1, 2.2, 2.3"
    assert nearest([], Version("1")) == "it lists none"


def test_a_version_is_tested_through_its_own_overlay_and_one_that_cannot_install_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    house = tmp_path / ("w" * 200)  # pip's error names the file: longer than a step keeps
    build_wheel(house, "bpver", "1.0", {"bpver/__init__.py": ""})
    build_wheel(house, "bpver", "1.1", {"bpver/__init__.py": ""})
    (house / "bpver-1.2-py3-none-any.whl").write_bytes(b"not a zip")
    source = PackageSource(find_links=(str(house),))
    cache = tmp_path / "cache"
    good = prepare_arm("a", sys.executable, {"K": "v"}, ("bpver==1.0",), source, cache)
    calls = []
    cell = Cell("accelerate", "fp32", 1)
    estimate = PairedEstimate(1.5, 1.4, 1.6, 9, 0.9)
    slower = Comparison(cell, Outcome.OK, SLOWER, estimate, (), 1.0, "decided")

    def compare(session, a, b, settings, results, err):  # type: ignore[no-untyped-def]
        calls.append((session, a, b, settings, results, err))
        return [slower]

    monkeypatch.setattr(ab, "compare_arms", compare)
    output = tmp_path / "out" / "bisect.json"
    s = Settings()
    session, err = object(), io.StringIO()  # passed through as they are
    step = bisect.compare_version("bpver", "1.1", good, source, cache, session, s, output, err)  # type: ignore[arg-type]
    ((passed_session, a, b, passed, results, passed_err),) = calls
    assert passed_session is session and passed_err is err
    assert a is good and passed is s
    assert b.name == "b" and b.pins == ("bpver==1.1",) and b.settings == {"K": "v"}
    assert b.python == good.python and b.overlay and os.path.isdir(b.overlay)
    assert results == tmp_path / "out" / "bisect.1.1.ab.json"
    assert step == Step("1.1", SLOWER, 1.5, 1.4, 1.6, 9, "accelerate-fp32-bs1", str(results))
    broken = bisect.compare_version(
        "bpver", "1.2", good, source, cache, None, s, output, sys.stderr
    )  # type: ignore[arg-type]
    assert (broken.version, broken.verdict, broken.ratio) == ("1.2", SKIPPED, None)
    assert len(calls) == 1
    assert broken.message.startswith("pip could not install bpver==1.2: ERROR: ")
    assert "\n" not in broken.message and len(broken.message) == 300  # its first line, cut


# ---- a step from its cells ------------------------------------------------------------------

VERDICTS = st.sampled_from([SLOWER, SAME, FASTER, INCONCLUSIVE])


def judged(batch: int, verdict: str, ratio: float, busy: Busy | None = None) -> Comparison:
    estimate = PairedEstimate(ratio, ratio * 0.9, ratio * 1.1, 10 + batch, 0.99)
    return Comparison(
        Cell("accelerate", "fp32", batch), Outcome.OK, verdict, estimate, (), 1.0, "x", busy=busy
    )


@settings(max_examples=60, deadline=None)
@given(cells=st.lists(st.tuples(VERDICTS, st.floats(0.5, 2.0)), min_size=1, max_size=5))
@example(cells=[(SAME, 1.9), (SLOWER, 1.2), (SLOWER, 1.4)])
@example(cells=[(INCONCLUSIVE, 0.9), (SAME, 1.3)])
def test_a_step_is_slower_if_any_cell_is_and_its_figures_are_the_worst_such_cells(
    cells: list[tuple[str, float]],
) -> None:
    comparisons = [judged(b + 1, v, r) for b, (v, r) in enumerate(cells)]
    step = step_from("1.1", comparisons, Path("/r/x.json"))
    verdicts = {v for v, _ in cells}
    expected = (
        SLOWER if SLOWER in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts
        else FASTER if verdicts == {FASTER} else SAME
    )  # fmt: skip
    assert step.verdict == expected
    pool = [(r, b) for b, (v, r) in enumerate(cells) if v == SLOWER or expected != SLOWER]
    _, index = max(pool, key=lambda pair: pair[0])
    worst = comparisons[index]
    assert worst.estimate is not None
    assert (step.ratio, step.low, step.high, step.pairs) == (
        worst.estimate.ratio,
        worst.estimate.low,
        worst.estimate.high,
        worst.estimate.pairs,
    )
    assert (step.message, step.results, step.busy) == (worst.cell.id, "/r/x.json", False)


def test_a_step_that_did_not_run_or_only_waited_on_a_busy_machine_says_so() -> None:
    cell = Cell("accelerate", "fp32", 4)
    oom = Comparison(cell, Outcome.OOM, None, None, (), 0.0, "failed", message="arm B: oom: x")
    skipped = Comparison(cell, Outcome.SKIPPED, None, None, (), 0.0, "failed")
    assert step_from("1.1", [judged(1, SAME, 1.0), oom], Path("r.json")) == Step(
        "1.1", SKIPPED, message="did not run: arm B: oom: x", results="r.json"
    )
    assert step_from("1.1", [skipped], Path("r.json")) == Step(
        "1.1", SKIPPED, message="no cell was measured", results="r.json"
    )
    busy = Busy(pairs=12, set_aside=9, max_wait_share=0.4, median_other_cores=1.2, gpu_neighbours=0)
    waited = Comparison(cell, Outcome.OK, INCONCLUSIVE, None, (), 1.0, "max-pairs", busy=busy)
    assert busy_reason(waited) == "accelerate-fp32-bs4: machine busy, 3 of 12 pairs clean"
    assert step_from("1.1", [waited, skipped], Path("r.json")) == Step(
        "1.1", INCONCLUSIVE, message=busy_reason(waited), results="r.json", busy=True
    )
    # Judged cells, one of them left inconclusive by the busy machine: the step says why.
    unsure = judged(2, INCONCLUSIVE, 1.2, busy)
    step = step_from("1.1", [judged(1, SAME, 1.0), unsure], None)
    assert (step.verdict, step.busy, step.ratio, step.results) == (INCONCLUSIVE, True, 1.2, None)
    assert step.message == "accelerate-fp32-bs2: machine busy, 3 of 12 pairs clean"
    no_busy = Comparison(cell, Outcome.OK, INCONCLUSIVE, None, (), 1.0, "x", busy=None)
    assert busy_reason(no_busy) == "accelerate-fp32-bs4: machine busy, pairs set aside"


# ---- what it prints -------------------------------------------------------------------------


def test_each_step_and_finding_is_said_in_one_line_and_the_table_is_by_version() -> None:
    measured = Step("1.10", SLOWER, 1.23456, 1.1, 1.4, 12, "accelerate-fp32-bs1")
    skipped = Step("1.9", SKIPPED, message="did not install")
    assert describe_step(measured) == (
        "1.10: slower, B/A 1.235 [1.100, 1.400] over 12 pairs (accelerate-fp32-bs1)"
    )
    assert describe_step(skipped) == "1.9: skipped (did not install)"
    settings_ = Settings(confidence=0.95, min_pairs=10, max_pairs=10)
    lines = render_steps([measured, skipped], settings_).splitlines()
    level = f"{settings_.look_confidence * 100:.2f} %"
    header = ["version", "verdict vs GOOD", "B/A", f"{level} interval", "pairs", "cell / reason"]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == header
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert rows == [
        ["1.9", SKIPPED, "–", "–", "–", "did not install"],  # 1.9 before 1.10: PEP 440
        ["1.10", SLOWER, "1.235", "\\[1.100, 1.400\\]", "12", "accelerate-fp32-bs1"],
    ]
    assert conclusion(
        "pkg", Finding("1.0", None, (), "BAD 1.7 is not slower than GOOD (same)")
    ) == ("no culprit: BAD 1.7 is not slower than GOOD (same)")
    assert conclusion("pkg", Finding("1.2", "1.5", (), "found")) == (
        "first slower version of pkg: 1.5 (last not slower: 1.2)"
    )
    assert conclusion("pkg", Finding("1.2", "1.5", ("1.3", "1.4"), "several")) == (
        "first slower version of pkg: one of 1.3, 1.4, 1.5 (after 1.2; several)"
    )
