"""`bloomperf bisect` as a command, in process: each version's verdict comes from a script instead
of an A/B run (``test_bisect.py`` runs a real one on the tiny model), so every path of the
command is walked in seconds: the versions it says it will test, the document it rewrites after
each step, its progress, its table and conclusion, and its exit status. GOOD's overlay is a real
``pip install`` from a local wheelhouse, once per file."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER
from bloomperf.catalog import topology as topology_module
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.cli import bisect, build_parser, main
from bloomperf.cli.bisect import SKIPPED, Step
from bloomperf.harness.interleave import CYCLES
from bloomperf.harness.orphans import HELD_ENV
from bloomperf.harness.session import Session
from tests.nvml_replay import NvmlReplay
from tests.wheels import build_wheel, simple_index

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
        # A step is minutes of measurement: a version tested twice fails here, not at a timeout.
        assert version not in [s["version"] for s in json.loads(Path(results).read_text())["steps"]]
        assert (package, good.pins, settings.tolerance) == ("bpcmd", ("bpcmd==1.0",), 0.3)
        seen.append(json.loads(Path(results).read_text()))
        verdict = verdicts[version]
        if verdict in (SKIPPED,):
            return Step(version, verdict, message="did not install")
        ratio = {SLOWER: 1.5, SAME: 1.0, FASTER: 0.8, INCONCLUSIVE: 1.1}[verdict]
        return Step(version, verdict, ratio, ratio - 0.1, ratio + 0.1, 12, "accelerate-fp32-bs1")

    monkeypatch.setattr(bisect, "compare_version", scripted)
    tiny = str(resolve_model("tiny", None, None).path)
    argv = ["bisect", "bpcmd", "1.0", "1.7", "--find-links", str(house), "--model", tiny]
    argv += ["--cache-dir", str(cache), "--tolerance", "0.3", "--no-lock"]
    argv += ["--output", str(output)] if output is not None else []
    capsys.readouterr()  # a cold cache's "building tiny" line is the fixture's, not bisect's
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
    assert document["last_good"] == ("1.0" if "no culprit" in conclusion else "1.2")
    assert document["ambiguous"] == ([] if "no culprit" in conclusion else ["1.3", "1.4", "1.5"])


@pytest.mark.parametrize("locked", [True, False])
def test_each_step_gets_what_the_command_line_set_and_the_lock_is_held_while_it_runs(
    locked: bool,
    house: Path,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run on the recorded answers of a 4 x A100 machine with ``--device cpu``: the arms, the
    source, the cache, the session on the topology the command detected, the comparison's mode
    for the CPU, the GPUs' locks held during each step unless --no-lock, each progress line on
    disk before the step it announces, and the results on ``out``, never on stdout."""
    monkeypatch.setattr(topology_module, "load_nvml", lambda: NvmlReplay.load("4xA100-SXM4-80GB"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("BLOOMPERF_LOCK_DIR", str(tmp_path / "locks"))
    detected: list[Any] = []

    def detect() -> Any:
        detected.append(topology_module.detect_topology())
        return detected[-1]

    monkeypatch.setattr(bisect, "detect_topology", detect)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    build_wheel(tmp_path / "rc", "bpcmd", "1.4rc1", {"bpcmd/__init__.py": ""})
    output, err_path = tmp_path / "b.json", tmp_path / "err.log"
    seen: list[str] = []

    def scripted(*passed: Any) -> Step:
        package, version, good, source, cache_dir, session, settings, results, err = passed
        assert (package, good.name, good.pins) == ("bpcmd", "a", ("bpcmd==1.0",))
        assert good.python == str(venv / "bin" / "python")
        assert good.settings == {"K1": "one", "K2": "two"}
        assert source.find_links == (str(house), str(tmp_path / "rc"))
        assert cache_dir == cache and results == output
        assert isinstance(session, Session) and session.output is None
        (topology,) = detected
        assert session.topology is topology and session.device == "cpu"
        assert len(topology.gpus) == 4
        assert (settings.tolerance, settings.mode) == (0.3, CYCLES)
        held = os.environ.get(HELD_ENV)
        # --device cpu on the 4 GPUs: the CPU's lock, not the GPUs' (a key from the topology
        # alone, without the run's options, would be the GPUs').
        assert held == ("cpu" if locked else None)
        assert err is stderr
        assert version not in seen, f"{version} tested twice"
        on_disk = err_path.read_text().splitlines()
        assert on_disk[-1] == f"bloomperf bisect: testing bpcmd {version}"  # flushed
        seen.append(version)
        verdict = SLOWER if Version(version) >= Version("1.4rc1") else SAME
        ratio = 1.5 if verdict == SLOWER else 1.0
        return Step(version, verdict, ratio, ratio - 0.1, ratio + 0.1, 12, "accelerate-fp32-bs1")

    monkeypatch.setattr(bisect, "compare_version", scripted)
    argv = ["bisect", "bpcmd", "1.0", "1.7", "--find-links", str(house)]
    argv += ["--find-links", str(tmp_path / "rc"), "--pre", "--python", str(venv)]
    argv += ["--env", "K1=one", "--env", "K2=two", "--device", "cpu"]
    argv += ["--model", str(resolve_model("tiny", None, None).path), "--cache-dir", str(cache)]
    argv += ["--tolerance", "0.3", "--output", str(output), *([] if locked else ["--no-lock"])]
    args = build_parser().parse_args(argv)
    out = io.StringIO()
    with err_path.open("w") as stderr:
        code = bisect.bisect_command(args, out, stderr)
        last = err_path.read_text().splitlines()[-1]  # before the file is closed
    assert code == 0
    assert last.startswith(f"  {seen[-1]}: ")  # the last step's verdict, flushed
    document = json.loads(output.read_text())
    assert document["versions"] == [*VERSIONS[:4], "1.4rc1", *VERSIONS[4:]]
    assert document["first_slower"] == "1.4rc1"
    rows = [line for line in out.getvalue().splitlines() if re.match(r"\| 1\.\d", line)]
    assert [row.split("|")[1].strip() for row in rows] == sorted(seen, key=Version)
    assert out.getvalue().splitlines()[-2:] == [
        "first slower version of bpcmd: 1.4rc1 (last not slower: 1.3)",
        f"results: {output}",
    ]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--python", "/no/such/python"],
         "--python: /no/such/python is neither a Python interpreter nor a venv folder"),
        (["--env", "K1=one", "--env", "novalue"], "--env: 'novalue' is not KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_bad_interpreter_or_setting_is_refused_naming_its_option(
    option: list[str],
    message: str,
    house: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["bisect", "bpcmd", "1.0", "1.7", "--find-links", str(house), *option])
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"bloomperf: error: {message}"


def test_versions_come_from_the_index_asked_for_the_interpreter_under_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --index-url, pip lists the versions for --python's interpreter (a link to this
    one here); a pre-release between GOOD and BAD stays out without --pre."""
    index = simple_index(tmp_path / "idx", "bpidx", ["1.0", "1.1", "1.2rc1", "1.2", "1.3"])
    link = tmp_path / "python3"
    link.symlink_to(sys.executable)
    tested: list[str] = []

    def scripted(package: str, version: str, good: Any, *rest: Any) -> Step:
        assert good.python == str(link)
        tested.append(version)
        return Step(
            version, SLOWER if Version(version) >= Version("1.2") else SAME, 1, 1, 1, 8, "c"
        )

    monkeypatch.setattr(bisect, "compare_version", scripted)
    output = tmp_path / "b.json"
    argv = ["bisect", "bpidx", "1.0", "1.3", "--index-url", index, "--python", str(link)]
    argv += ["--model", str(resolve_model("tiny", None, None).path), "--no-lock"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--output", str(output)]
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    document = json.loads(output.read_text())
    assert document["versions"] == ["1.0", "1.1", "1.2", "1.3"]
    assert document["first_slower"] == "1.2" and "1.2rc1" not in tested
