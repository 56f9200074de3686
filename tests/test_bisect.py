"""`bloomperf bisect`: versions from a local wheelhouse, the search, and a real bisect."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bloomperf.analysis.paired import INCONCLUSIVE, SAME, SLOWER
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.cli import main
from bloomperf.cli.bisect import (
    SKIPPED,
    Step,
    list_versions,
    search,
    versions_between,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.overlay import PackageSource
from tests.wheels import build_wheel, slowdown_package


def test_versions_come_in_pep440_order_and_pre_releases_only_when_asked(tmp_path: Path) -> None:
    for version in ("1.9", "1.10", "1.2", "1.10rc1", "2.0.post1", "1.0"):
        build_wheel(tmp_path, "bporder", version, {"bporder/__init__.py": ""})
    build_wheel(tmp_path, "bporder_other", "9.0", {"bporder_other/__init__.py": ""})
    (tmp_path / "bporder-not-a-version.whl").write_bytes(b"")
    (tmp_path / "bporder-0.5.tar.gz").write_bytes(b"")  # an sdist counts too
    source = PackageSource(find_links=(str(tmp_path),))
    # A local wheelhouse is read from its file names: no pip (of whatever version) is asked.
    released = [str(v) for v in list_versions("bporder", source, pre=False, python="/nowhere")]
    assert released == ["0.5", "1.0", "1.2", "1.9", "1.10", "2.0.post1"]
    with_pre = [str(v) for v in list_versions("bporder", source, pre=True)]
    assert with_pre == ["0.5", "1.0", "1.2", "1.9", "1.10rc1", "1.10", "2.0.post1"]
    available = list_versions("bporder", source, pre=False)
    assert [str(v) for v in versions_between(available, "1.2", "1.10")] == ["1.2", "1.9", "1.10"]
    with pytest.raises(BloomperfError, match=r"GOOD 1\.3 is not in the index"):
        versions_between(available, "1.3", "1.10")
    with pytest.raises(BloomperfError, match="must be an earlier version than BAD"):
        versions_between(available, "1.10", "1.9")
    with pytest.raises(BloomperfError, match="the index lists no versions"):
        list_versions("bpnothing", source, pre=False)


def verdicts(table: dict[str, str]) -> tuple[Callable[[str], Step], list[str]]:
    tested: list[str] = []

    def test(version: str) -> Step:
        assert version not in tested, f"{version} tested twice"  # fails, where a loop would hang
        tested.append(version)
        return Step(version, table[version])

    return test, tested


def test_search_narrows_to_the_first_slower_version_and_goes_around_skips() -> None:
    versions = [f"1.{i}" for i in range(8)]
    table = {v: (SLOWER if v >= "1.5" else SAME) for v in versions}
    table["1.3"] = SKIPPED
    table["1.4"] = INCONCLUSIVE
    test, tested = verdicts(table)
    finding, steps = search(versions, test)
    assert tested[0] == "1.7"  # BAD first
    assert (finding.last_good, finding.first_bad) == ("1.2", "1.5")
    assert finding.ambiguous == ("1.3", "1.4")  # either could be the first slower one
    assert [s.version for s in steps] == tested


def test_a_bad_version_that_cannot_install_is_bad_input_not_a_finding() -> None:
    test, tested = verdicts({"1.0": SAME, "1.1": SAME, "1.2": SKIPPED})
    with pytest.raises(BloomperfError, match=r"BAD 1\.2 cannot be tested") as caught:
        search(["1.0", "1.1", "1.2"], test)
    assert caught.value.exit_code == 2 and tested == ["1.2"]


def test_search_stops_when_bad_is_not_slower() -> None:
    test, tested = verdicts({"1.0": SAME, "1.1": SAME, "1.2": SAME})
    finding, _ = search(["1.0", "1.1", "1.2"], test)
    assert finding.first_bad is None and tested == ["1.2"]
    assert "not slower" in finding.reason


@pytest.mark.parametrize("first_slow", [5])
def test_bisect_finds_the_version_that_made_it_slower(tmp_path: Path, first_slow: int) -> None:
    house = tmp_path / "wheels"
    for minor in range(8):
        slowdown_package(house, "bpslow", f"1.{minor}", slow=minor >= first_slow)
    slowdown_package(house, "bpslow", f"1.{first_slow - 1}rc1", slow=True)  # only with --pre
    broken = 3 if first_slow != 3 else 2
    (house / f"bpslow-1.{broken}-py3-none-any.whl").write_bytes(b"not a zip")
    output = tmp_path / "bisect.json"
    tiny = str(resolve_model("tiny", None, None).path)
    code = main(
        [
            "bisect",
            "bpslow",
            "1.0",
            "1.7",
            "--find-links",
            str(house),
            "--model",
            tiny,
            "--cache-dir",
            str(tmp_path / "cache"),
            "--batch-sizes",
            "1",
            "--dtypes",
            "fp32",
            "--new-tokens",
            "8",
            "--tolerance",
            "0.3",
            "--confidence",
            "0.95",
            "--max-time",
            "60",
            "--no-lock",
            "--output",
            str(output),
        ]
    )
    document = json.loads(output.read_text())
    assert document["kind"] == "bloomperf-bisect" and document["complete"]
    assert (code, document["first_slower"]) == (0, f"1.{first_slow}"), document["steps"]
    assert document["last_good"] == f"1.{first_slow - 1}"
    steps = {s["version"]: s for s in document["steps"]}
    assert steps[f"1.{first_slow}"]["verdict"] == SLOWER
    assert steps[f"1.{first_slow}"]["low"] > 1.3
    assert steps[f"1.{first_slow - 1}"]["verdict"] == SAME
    # Each step's ab results name exactly what differs: the package's version.
    culprit = json.loads(Path(steps[f"1.{first_slow}"]["results"]).read_text())
    assert culprit["differences"]["packages"] == {"bpslow": {"a": "1.0", "b": f"1.{first_slow}"}}
    assert culprit["differences"]["settings"] == {}
    if f"1.{broken}" in steps:
        assert steps[f"1.{broken}"]["verdict"] == SKIPPED
        assert "pip could not install" in steps[f"1.{broken}"]["message"]
    assert f"1.{first_slow - 1}rc1" not in document["versions"]
