"""`bloomperf bisect` as a command, in process: each version's verdict comes from a script instead
of an A/B run (``test_bisect.py`` runs a real one on the tiny model), so every path of the
command is walked in seconds: the versions it says it will test, the document it rewrites after
each step, its progress, its table and conclusion, and its exit status. GOOD's overlay is a real
``pip install`` from a local wheelhouse, once per file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.cli import bisect, main
from bloomperf.cli.bisect import SKIPPED, Step
from tests.wheels import build_wheel

VERSIONS = [f"1.{minor}" for minor in range(8)]


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    for version in VERSIONS:
        build_wheel(folder, "bpcmd", version, {"bpcmd/__init__.py": f"VERSION = {version!r}\n"})
    build_wheel(folder, "bpcmd", "1.8rc1", {"bpcmd/__init__.py": ""})  # not without --pre
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")  # GOOD's overlay, installed once for the file


def bisect_with(
    verdicts: dict[str, str],
    house: Path,
    cache: Path,
    output: Path | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, list[dict[str, Any]], str, str]:
    """Run the command with each version's step scripted; returns its exit status, what each
    step saw of the document when it ran, stdout and stderr."""
    seen: list[dict[str, Any]] = []

    def scripted(package: str, version: str, good: Any, *rest: Any) -> Step:
        *_, settings, results, _err = rest
        assert (package, good.pins, settings.tolerance) == ("bpcmd", ("bpcmd==1.0",), 0.3)
        seen.append(json.loads(Path(results).read_text()))
        verdict = verdicts[version]
        if verdict in (SKIPPED,):
            return Step(version, verdict, message="did not install")
        ratio = {SLOWER: 1.5, SAME: 1.0, FASTER: 0.8, INCONCLUSIVE: 1.1}[verdict]
        return Step(version, verdict, ratio, ratio - 0.1, ratio + 0.1, 12, "accelerate-fp32-bs1")

    monkeypatch.setattr(bisect, "test_version", scripted)
    tiny = str(resolve_model("tiny", None, None).path)
    argv = ["bisect", "bpcmd", "1.0", "1.7", "--find-links", str(house), "--model", tiny]
    argv += ["--cache-dir", str(cache), "--tolerance", "0.3", "--no-lock"]
    argv += ["--output", str(output)] if output is not None else []
    code = main(argv)
    captured = capsys.readouterr()
    return code, seen, captured.out, captured.err


@pytest.mark.parametrize("first_slow", [1, 4, 7])
def test_the_command_names_the_planted_version_and_keeps_every_step_as_it_goes(
    first_slow: int,
    house: Path,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    verdicts = {v: SLOWER if i >= first_slow else SAME for i, v in enumerate(VERSIONS)}
    output = tmp_path / "b.json"
    code, seen, out, err = bisect_with(verdicts, house, cache, output, monkeypatch, capsys)
    document = json.loads(output.read_text())
    assert code == 0
    assert (document["kind"], document["schema_version"]) == ("bloomperf-bisect", 1)
    assert (document["package"], document["good"], document["bad"]) == ("bpcmd", "1.0", "1.7")
    assert document["versions"] == VERSIONS  # the rc only with --pre
    assert document["complete"] and document["finished_at"] >= document["started_at"]
    assert document["first_slower"] == VERSIONS[first_slow]
    assert document["last_good"] == VERSIONS[first_slow - 1]
    assert document["ambiguous"] == []
    tested = [s["version"] for s in document["steps"]]
    assert tested[0] == "1.7" and VERSIONS[first_slow] in tested
    assert [s["verdict"] for s in document["steps"]] == [verdicts[v] for v in tested]
    # Before each step the document held every earlier step, and was not yet complete.
    assert [[s["version"] for s in d["steps"]] for d in seen] == [
        tested[:i] for i in range(len(tested))
    ]
    assert not any(d["complete"] for d in seen)
    # Progress: what it will test, each version as it starts and its verdict when done.
    lines = err.splitlines()
    assert lines[0] == f"bloomperf bisect: bpcmd {', '.join(VERSIONS)} (6 between GOOD and BAD)"
    testing = [line.removeprefix("bloomperf bisect: testing bpcmd ") for line in lines
               if line.startswith("bloomperf bisect: testing ")]  # fmt: skip
    assert testing == tested
    done = [line.strip() for line in lines if line.startswith("  ")]
    assert done == [
        f"{v}: {verdicts[v]}, B/A {r:.3f} [{r - 0.1:.3f}, {r + 0.1:.3f}] over 12 pairs "
        "(accelerate-fp32-bs1)"
        for v in tested
        for r in [1.5 if verdicts[v] == SLOWER else 1.0]
    ]
    # The table by version, then the conclusion and where the document is.
    rows = [line for line in out.splitlines() if re.match(r"\| 1\.\d ", line)]
    assert [row.split("|")[1].strip() for row in rows] == sorted(tested, key=Version)
    assert out.splitlines()[-2:] == [
        f"first slower version of bpcmd: {VERSIONS[first_slow]} "
        f"(last not slower: {VERSIONS[first_slow - 1]})",
        f"results: {output}",
    ]


@pytest.mark.parametrize(
    ("verdicts", "conclusion"),
    [
        # BAD not slower: nothing to find.
        ({v: SAME for v in VERSIONS}, "no culprit: BAD 1.7 is not slower than GOOD (same)"),
        # The versions around the step skipped or undecided: several candidates.
        (
            {**{v: SLOWER if v >= "1.5" else SAME for v in VERSIONS}, "1.4": SKIPPED,
             "1.5": INCONCLUSIVE, "1.3": SKIPPED},
            "first slower version of bpcmd: one of 1.3, 1.4, 1.5, 1.6 (after 1.2; "
            "skipped versions leave several candidates)",
        ),
    ],
)  # fmt: skip
def test_a_bisect_that_cannot_name_one_version_exits_1_and_says_why(
    verdicts: dict[str, str],
    conclusion: str,
    house: Path,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, out, _ = bisect_with(verdicts, house, cache, None, monkeypatch, capsys)
    assert code == 1
    assert out.splitlines()[-2] == conclusion
    # Without --output: a file of its own under results/, named for the package and the time.
    (written,) = (tmp_path / "results").iterdir()
    assert re.fullmatch(r"bloomperf-bisect-bpcmd-\d{8}-\d{6}\.json", written.name)
    assert out.splitlines()[-1] == f"results: {Path('results') / written.name}"
    document = json.loads(written.read_text())
    assert document["complete"] and document["first_slower"] == (
        None if "no culprit" in conclusion else "1.6"
    )
    assert document["ambiguous"] == ([] if "no culprit" in conclusion else ["1.3", "1.4", "1.5"])
