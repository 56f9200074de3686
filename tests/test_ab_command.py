"""`bloomperf ab` as a command, in process: each group's comparison comes from a script instead of
interleaved runs (``test_ab.py`` runs real ones on the tiny model), so every path of the command is
walked in seconds: the settings each comparison gets, the cells it plans and the ones it skips, the
results document it rewrites after each cell and at each look, its progress and table, and its exit
status over mixed verdicts."""

from __future__ import annotations

import functools
import io
import json
import os
import platform
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.analysis.paired import FASTER, INCONCLUSIVE, SAME, SLOWER, PairedEstimate
from bloomperf.catalog import topology as topology_module
from bloomperf.catalog.checkpoints import default_cache_dir, resolve_model
from bloomperf.cli import ab, build_parser, main
from bloomperf.cli.ab import MAX_PAIRS, comparison_settings, missing_module_hint
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.interleave import CYCLES, GROUPS, Comparison, PairLog, Settings
from bloomperf.harness.matrix import Cell
from bloomperf.harness.orphans import HELD_ENV
from bloomperf.harness.overlay import Arm, PackageSource, prepare_arm
from bloomperf.harness.session import Session
from bloomperf.store.results import Outcome
from tests.nvml_replay import NvmlReplay

BATCHES = (1, 2, 4)
RATIOS = {SLOWER: 1.5, SAME: 1.0, FASTER: 0.7, INCONCLUSIVE: 1.1}


@pytest.fixture(scope="module")
def tiny() -> str:
    return str(resolve_model("tiny", None, None).path)


def scripted_comparison(cell: Cell, verdict: str | None, settings: Settings) -> Comparison:
    """A judged cell (verdict), or a failed one (None): the outcome a real run gives."""
    if verdict is None:
        return Comparison(cell, Outcome.ERROR, None, None, (), 2.0, "failed", message="boom\nx")
    ratio = RATIOS[verdict]
    estimate = PairedEstimate(ratio, ratio - 0.05, ratio + 0.05, 9, settings.confidence)
    return Comparison(cell, Outcome.OK, verdict, estimate, (), 2.0, "decided")


class Script:
    """compare_group's stand-in: what each call got, and the document on disk at each step."""

    def __init__(self, verdicts: dict[int, str | None], output: Path) -> None:
        self.verdicts = verdicts
        self.output = output
        self.calls: list[tuple[dict[str, Any], Any, Settings]] = []
        self.before_cell: list[dict[str, Any]] = []
        self.at_look: list[dict[str, Any]] = []
        self.first: list[dict[str, Any]] = []

    def __call__(self, specs: Any, group: Any, settings: Settings, progress: Any) -> Iterator[Any]:
        self.calls.append((specs, group, settings))
        for cell in group.cells():
            self.before_cell.append(json.loads(self.output.read_text()))
            self.verdicts.setdefault(cell.batch_size, SAME)
            log = PairLog(cell, settings)
            log.add_pair({"a": 10.0, "b": 10.0 * RATIOS[SLOWER]}, ("a", "b"))
            progress(log, 7.0)
            self.at_look.append(json.loads(self.output.read_text()))
            yield scripted_comparison(cell, self.verdicts[cell.batch_size], settings)


@functools.cache
def prepared(name: str, python: str, env: tuple[tuple[str, str], ...], *rest: Any) -> Arm:
    return prepare_arm(name, python, dict(env), *rest)


def prepared_once(name: str, python: str, env: dict[str, str], *rest: Any) -> Arm:
    """The real arm, prepared once per input: its fingerprint is a subprocess (0.25 s)."""
    return prepared(name, python, tuple(sorted(env.items())), *rest)


def run_ab(
    argv: list[str],
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    skipped: dict[Any, str] | None = None,
) -> tuple[int, str, str]:
    monkeypatch.setattr(ab, "compare_group", script)
    monkeypatch.setattr(ab, "prepare_arm", prepared_once)
    reasons = skipped or {}
    real = Session.skip_reason

    def skip_reason(self: Session, cell: Cell) -> str | None:
        if isinstance(script, Script) and not script.first and script.output.is_file():
            # The document as written before any cell is judged.
            script.first.append(json.loads(script.output.read_text()))
        found = reasons.get(cell.batch_size) or reasons.get((cell.dtype, cell.batch_size))
        return found or real(self, cell)

    monkeypatch.setattr(Session, "skip_reason", skip_reason)
    capsys.readouterr()  # a cold cache's "building tiny" line is the fixture's
    code = main(["ab", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def base_argv(tiny: str, output: Path) -> list[str]:
    return [
        "--model", tiny, "--dtypes", "fp32", "--batch-sizes", "1,2,4", "--new-tokens", "4",
        "--output", str(output), "--no-lock",
    ]  # fmt: skip


VERDICTS = st.sampled_from([SLOWER, SAME, FASTER, INCONCLUSIVE, None])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    verdicts=st.tuples(VERDICTS, VERDICTS, VERDICTS),
    skipped=st.sets(st.sampled_from(BATCHES), max_size=3),
    fail_inconclusive=st.booleans(),
)
def test_the_exit_status_and_the_document_follow_every_cells_verdict(
    verdicts: tuple[str | None, ...],
    skipped: set[int],
    fail_inconclusive: bool,
    tiny: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch_module: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 1 when any judged cell is slower or failed, or is inconclusive under
    --fail-inconclusive; skipped cells are never compared and never fail; each cell is in the
    document in order, with its verdict, before the next one is compared."""
    output = tmp_path_factory.mktemp("ab") / "ab.json"
    script = Script(dict(zip(BATCHES, verdicts, strict=True)), output)
    reasons = {batch: f"scripted skip of batch {batch}" for batch in skipped}
    argv = base_argv(tiny, output) + (["--fail-inconclusive"] if fail_inconclusive else [])
    with monkeypatch_module.context() as patch:
        code, out, _err = run_ab(argv, script, patch, capsys, reasons)
    judged = [v for b, v in zip(BATCHES, verdicts, strict=True) if b not in skipped]
    failing = {SLOWER, None} | ({INCONCLUSIVE} if fail_inconclusive else set())
    assert code == (1 if any(v in failing for v in judged) else 0)
    document = json.loads(output.read_text())
    assert document["complete"] and document["finished_at"] >= document["started_at"]
    (first,) = script.first  # before any cell: no cell, not finished
    assert (first["cells"], first["finished_at"], first["complete"]) == ([], None, False)
    cells = document["cells"]
    assert [c["batch_size"] for c in cells] == list(BATCHES)
    for cell, batch, verdict in zip(cells, BATCHES, verdicts, strict=True):
        if batch in skipped:
            assert (cell["outcome"], cell["verdict"]) == ("skipped", None)
            assert cell["message"] == f"scripted skip of batch {batch}"
            assert cell["stopped"] == "skipped" and cell["pairs"] == 0
            assert cell["elapsed_s"] == 0.0 and cell["samples"] == []
        elif verdict is None:
            assert (cell["outcome"], cell["verdict"], cell["message"]) == ("error", None, "boom\nx")
        else:
            assert (cell["outcome"], cell["verdict"]) == ("ok", verdict)
            assert cell["ratio"] == RATIOS[verdict] and cell["pairs"] == 9
    # Only the runnable cells were planned, in one comparison of their group; none when the
    # whole group is skipped.
    runnable = tuple(b for b in BATCHES if b not in skipped)
    assert [call[1].batch_sizes for call in script.calls] == ([runnable] if runnable else [])
    # Before each cell the document held the cells compared before it and every skipped one (at
    # once: an interrupted comparison keeps why), in cell order, and no cell in progress; at each
    # look it held that cell's pairs so far.
    for before, at_look, batch in zip(script.before_cell, script.at_look, runnable, strict=True):
        earlier = [b for b in BATCHES if b < batch or b in skipped]
        assert [c["batch_size"] for c in before["cells"]] == earlier
        assert "in_progress" not in before and not before["complete"]
        progress = at_look["in_progress"]
        assert (progress["batch_size"], progress["pairs"], progress["pairs_set_aside"]) == (
            batch,
            1,
            0,
        )
        assert [s["ms_per_token"] for s in progress["samples"]] == [10.0, 15.0]
    assert "in_progress" not in document
    # The table has a row per cell and the results line comes last, on stdout.
    rows = [line for line in out.splitlines() if line.startswith("| accelerate-fp32-bs")]
    assert len(rows) == len(BATCHES)
    assert out.splitlines()[-1] == f"results: {output}"


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_every_comparison_setting_reaches_the_comparison_and_the_document(
    tiny: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "ab.json"
    script = Script(dict.fromkeys(BATCHES, SAME), output)
    argv = base_argv(tiny, output)
    argv += ["--tolerance", "0.2", "--confidence", "0.9", "--min-pairs", "3", "--max-pairs", "7"]
    argv += ["--max-time", "33", "--seed", "5", "--warmup", "2", "--cycles", "3"]
    argv += ["--b-env", "BP_K=v", "--b-env", "BP_J=w", "--a-env", "BP_J=u"]
    code, out, err = run_ab(argv, script, monkeypatch, capsys)
    assert code == 0, err
    ((specs, group, passed),) = script.calls
    assert passed == Settings(
        tolerance=0.2,
        confidence=0.9,
        min_pairs=3,
        max_pairs=7,
        max_time_s=33.0,
        warmup=2,
        cycles_per_round=3,
        mode=CYCLES,
        seed=5,
    )
    assert (group.backend, group.dtype, group.batch_sizes) == ("accelerate", "fp32", BATCHES)
    # Each arm's spec is the session's group spec with the arm's interpreter and settings.
    assert set(specs) == {"a", "b"}
    assert specs["a"].python == specs["b"].python == sys.executable
    assert specs["a"].env["BP_J"] == "u" and "BP_K" not in specs["a"].env
    assert (specs["b"].env["BP_K"], specs["b"].env["BP_J"]) == ("v", "w")
    assert replace(specs["a"], env={}) == replace(specs["b"], env={})
    spec = specs["a"]
    assert (spec.backend, spec.dtype, spec.device, spec.new_tokens) == (
        "accelerate",
        "fp32",
        "cpu",
        4,
    )
    assert spec.checkpoint == Path(tiny)
    document = json.loads(output.read_text())
    assert (document["kind"], document["schema_version"]) == ("bloomperf-ab", 1)
    assert document["settings"] == {
        "tolerance": 0.2,
        "confidence": 0.9,
        "look_confidence": passed.look_confidence,
        "min_pairs": 3,
        "max_pairs": 7,
        "max_time_s": 33.0,
        "warmup": 2,
        "mode": CYCLES,
        "cycles_per_round": 3,
        "seed": 5,
    }
    assert document["model"] == {"name": Path(tiny).name, "layers": 2}  # tiny's own 2
    assert document["workload"] == {"new_tokens": 4}
    assert document["topology"] == "cpu"
    assert set(document["machine"]) == {"hostname", "cpu_model", "gpus", "driver"}
    assert document["machine"]["hostname"] == platform.node()
    assert document["arms"]["a"]["python"] == document["arms"]["b"]["python"] == sys.executable
    assert document["arms"]["a"]["settings"] == {"BP_J": "u"}
    assert document["differences"]["settings"] == {
        "BP_J": {"a": "u", "b": "w"},
        "BP_K": {"a": None, "b": "v"},
    }
    assert document["arms"]["b"]["settings"] == {"BP_K": "v", "BP_J": "w"}
    lines = err.splitlines()
    assert lines[:2] == ["bloomperf ab: preparing arm A", "bloomperf ab: preparing arm B"]
    assert (
        "  differs: env: BP_J=u -> BP_J=w" in lines and "  differs: env: (unset) -> BP_K=v" in lines
    )
    header = next(line for line in lines if line.startswith("bloomperf ab: ") and " mode" in line)
    name = document["model"]["name"]
    assert (
        header == f"bloomperf ab: {name} on cpu, cycles mode, tolerance 20 %, up to 33 s per cell"
    )
    assert "(intervals at" in out and "90 % over all the looks" in out


def test_arms_alike_say_no_difference(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "ab.json"
    code, _out, err = run_ab(
        base_argv(tiny, output), Script(dict.fromkeys(BATCHES, SAME), output), monkeypatch, capsys
    )
    assert code == 0 and "  differs: (no difference)" in err.splitlines()
    document = json.loads(output.read_text())
    assert document["differences"] == {"packages": {}, "settings": {}}


def test_without_output_the_document_goes_under_results_named_by_the_time(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [
        a for a in base_argv(tiny, tmp_path / "x") if a not in ("--output", str(tmp_path / "x"))
    ]
    placed: list[Path] = []

    def script(specs: Any, group: Any, settings: Settings, progress: Any) -> Iterator[Any]:
        placed.extend(Path("results").glob("bloomperf-ab-*.json"))
        for cell in group.cells():
            yield scripted_comparison(cell, SAME, settings)

    code, out, _err = run_ab(argv, script, monkeypatch, capsys)  # type: ignore[arg-type]
    (written,) = placed  # written before the first cell: an unwritable place fails at once
    assert code == 0 and re.fullmatch(r"bloomperf-ab-\d{8}-\d{6}\.json", written.name)
    assert out.splitlines()[-1] == f"results: {written}"
    assert json.loads(written.read_text())["complete"]


def test_an_unwritable_output_fails_before_any_cell_is_compared(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "taken"
    folder.mkdir()  # a folder where the file should go
    script = Script(dict.fromkeys(BATCHES, SAME), folder)
    code, _out, err = run_ab(base_argv(tiny, folder), script, monkeypatch, capsys)
    assert code == 2 and script.calls == [], err
    assert str(folder) in err.strip().splitlines()[-1]


@pytest.mark.parametrize("locked", [True, False])
def test_the_lock_is_held_while_the_cells_are_compared_unless_no_lock(
    locked: bool, tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the recorded answers of a 4 x A100 machine with --device cpu: the session on the
    topology the command detected, cycles mode for the CPU, the GPUs' lock held meanwhile."""
    monkeypatch.setattr(topology_module, "load_nvml", lambda: NvmlReplay.load("4xA100-SXM4-80GB"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("BLOOMPERF_LOCK_DIR", str(tmp_path / "locks"))
    detected: list[Any] = []

    def detect() -> Any:
        detected.append(topology_module.detect_topology())
        return detected[-1]

    monkeypatch.setattr(ab, "detect_topology", detect)
    held: list[str | None] = []
    sessions: list[Session] = []
    prepare = Session.prepare

    def prepared_session(options: Any, topology: Any) -> Session:
        sessions.append(prepare(options, topology))
        return sessions[-1]

    monkeypatch.setattr(Session, "prepare", prepared_session)

    def script(specs: Any, group: Any, settings: Settings, progress: Any) -> Iterator[Any]:
        held.append(os.environ.get(HELD_ENV))
        assert settings.mode == CYCLES
        for cell in group.cells():
            progress(PairLog(cell, settings), 4.0)
            yield scripted_comparison(cell, SAME, settings)

    monkeypatch.setattr(ab, "compare_group", script)
    output = tmp_path / "ab.json"
    argv = [a for a in base_argv(tiny, output) if a != "--no-lock"] + ["--device", "cpu"]
    args = build_parser().parse_args(["ab", *argv, *([] if locked else ["--no-lock"])])
    out, err = io.StringIO(), io.StringIO()
    code = ab.ab_command(args, out, err)
    assert code == 0
    (topology,) = detected
    # --device cpu on the 4 GPUs: the CPU's lock (the topology alone would give the GPUs').
    expected = "cpu" if locked else None
    assert held == [expected] and os.environ.get(HELD_ENV) is None
    assert json.loads(output.read_text())["topology"] == topology.id
    # The session is the detected topology's, and writes no results file of its own.
    ((session,),) = [sessions]
    assert session.topology is topology and session.output is None
    # Progress and the header on the command's err, the table and results line on its out.
    said = err.getvalue().splitlines()
    assert said[0] == "bloomperf ab: preparing arm A" and "  differs: (no difference)" in said
    assert any(line.startswith("bloomperf ab: ") and " cycles mode" in line for line in said)
    assert [line.split()[0] for line in said if "no interval yet" in line] == [
        f"accelerate-fp32-bs{b}" for b in BATCHES
    ]
    shown = out.getvalue().splitlines()
    assert shown[0].startswith("| cell |") and shown[-1] == f"results: {output}"


# ---- the settings, each checked with its option named ---------------------------------------


def settings_from(*argv: str, device: str = "cpu") -> Settings:
    args = build_parser().parse_args(["ab", *argv])
    from bloomperf.harness.options import resolve_options

    return comparison_settings(args, resolve_options(vars(args)), device)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tolerance", "0"], "--tolerance: must be between 0 and 1, found 0.0"),
        (["--tolerance", "1"], "--tolerance: must be between 0 and 1, found 1.0"),
        (["--tolerance", "-0.1"], "--tolerance: must be between 0 and 1, found -0.1"),
        (["--confidence", "0"], "--confidence: must be between 0 and 1, found 0.0"),
        (["--confidence", "1"], "--confidence: must be between 0 and 1, found 1.0"),
        (["--min-pairs", "0"], "--min-pairs: "),
        (["--max-pairs", "0"], "--max-pairs: "),
        (["--max-time", "0"], "--max-time: "),
        (["--max-time", "-3"], "--max-time: "),
        (["--max-time", "nan"], "--max-time: "),
        (
            ["--min-pairs", "8", "--max-pairs", "7"],
            "--min-pairs 8: above --max-pairs 7; no verdict could ever be reached",
        ),
        ([f"--max-pairs={MAX_PAIRS + 1}"], f"--max-pairs: at most {MAX_PAIRS}, found 100001"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_naming_its_option(
    argv: list[str], message: str
) -> None:
    with pytest.raises(BloomperfError) as caught:
        settings_from(*argv)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_settings_at_their_bounds_are_accepted_and_the_default_tolerance_is_five_percent() -> None:
    edge = settings_from("--tolerance", "0.999", "--confidence", "0.001", "--min-pairs", "7")
    assert (edge.tolerance, edge.confidence, edge.min_pairs) == (0.999, 0.001, 7)
    most = settings_from("--min-pairs", str(MAX_PAIRS), f"--max-pairs={MAX_PAIRS}")
    assert most.min_pairs == most.max_pairs == MAX_PAIRS
    default = settings_from()
    assert (default.tolerance, default.confidence) == (0.05, 0.99)
    assert (default.min_pairs, default.max_pairs, default.max_time_s) == (10, 2000, 600.0)
    assert settings_from("--tolerance", "0.3").tolerance == 0.3


@pytest.mark.parametrize(
    ("mode", "device", "expected"),
    [
        ("auto", "cpu", CYCLES),
        ("auto", "cuda", GROUPS),
        (CYCLES, "cuda", CYCLES),
        (GROUPS, "cpu", GROUPS),
    ],
)
def test_auto_mode_is_cycles_on_a_cpu_and_groups_on_a_gpu(
    mode: str, device: str, expected: str
) -> None:
    assert settings_from("--mode", mode, device=device).mode == expected


# ---- the hint for a pin installed without its dependencies ---------------------------------


def arm(name: str, pins: tuple[str, ...] = ()) -> Arm:
    return Arm(name, sys.executable, {}, pins, None, {})


def failed(message: str) -> Comparison:
    return Comparison(Cell("accelerate", "fp32", 1), Outcome.ERROR, None, None, (), 1.0, "failed",
                      message=message)  # fmt: skip


@pytest.mark.parametrize("name", ["a", "b"])
def test_an_arm_whose_pins_lack_a_module_is_told_to_use_with_deps(name: str) -> None:
    pinned = arm(name, ("transformers==4.46.0", "tokenizers==0.20.0"))
    other = arm("b" if name == "a" else "a")
    arms = [pinned, other] if name == "a" else [other, pinned]
    lost = failed(f"arm {name.upper()}: ModuleNotFoundError: No module named 'requests'")
    hint = missing_module_hint([failed("arm X: other"), lost], arms, with_deps=False)
    assert hint == (
        f"bloomperf ab: arm {name.upper()} lacks the module 'requests': its pins "
        "(transformers==4.46.0 tokenizers==0.20.0) were installed without their dependencies; "
        "run again with --with-deps"
    )
    assert missing_module_hint([lost], arms, with_deps=True) == ""
    # An arm without pins, or a failure of the other arm, or another error: no hint.
    assert missing_module_hint([lost], [arm("a"), arm("b")], with_deps=False) == ""
    other_arm = failed(f"arm {other.name.upper()}: No module named 'requests'")
    assert missing_module_hint([other_arm], arms, with_deps=False) == ""
    assert missing_module_hint([failed(f"arm {name.upper()}: boom")], arms, False) == ""


def test_a_group_skipped_whole_is_written_and_the_next_group_still_compared(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "ab.json"
    script = Script({}, output)
    argv = [*base_argv(tiny, output), "--dtypes", "fp32,bf16"]
    reasons = {("fp32", b): "fp32 scripted away" for b in BATCHES}
    code, _out, _err = run_ab(argv, script, monkeypatch, capsys, reasons)
    assert code == 0
    assert [(call[1].dtype, call[1].batch_sizes) for call in script.calls] == [("bf16", BATCHES)]
    cells = json.loads(output.read_text())["cells"]
    assert [(c["dtype"], c["batch_size"], c["outcome"]) for c in cells] == [
        *[("fp32", b, "skipped") for b in BATCHES],
        *[("bf16", b, "ok") for b in BATCHES],
    ]


def test_pins_their_source_and_cache_reach_each_arm_and_a_missing_module_gets_the_hint(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each arm is prepared with its pins, the package source and the cache (the overlay's
    install itself: test_ab.py); B's cell failing on a module its pins went without prints the
    hint, unless --with-deps."""
    calls: list[tuple[Any, ...]] = []

    def prepare(name: str, python: str, env: dict[str, str], pins: Any, *rest: Any) -> Arm:
        calls.append((name, python, env, pins, *rest))
        return Arm(name, python, env, pins, None, {}, {"python": "3"})

    lost = "arm B: ModuleNotFoundError: No module named 'requests'"

    def script(specs: Any, group: Any, settings: Settings, progress: Any) -> Iterator[Any]:
        for cell in group.cells():
            yield Comparison(cell, Outcome.ERROR, None, None, (), 1.0, "failed", message=lost)

    cache = tmp_path / "cache"
    hint = "bloomperf ab: arm B lacks the module 'requests': its pins (x==1 y==2) were installed"
    for with_deps in (False, True):
        calls.clear()
        output = tmp_path / f"ab-{with_deps}.json"
        argv = [*base_argv(tiny, output), "--b-pin", "x==1", "--b-pin", "y==2"]
        argv += ["--index-url", "http://127.0.0.1:9/simple", "--find-links", "/w1"]
        argv += ["--find-links", "/w2", "--cache-dir", str(cache)]
        argv += ["--with-deps"] if with_deps else []
        monkeypatch.setattr(ab, "compare_group", script)
        monkeypatch.setattr(ab, "prepare_arm", prepare)
        capsys.readouterr()
        code = main(["ab", *argv])
        err = capsys.readouterr().err
        assert code == 1
        source = PackageSource("http://127.0.0.1:9/simple", ("/w1", "/w2"), with_deps)
        assert calls == [
            ("a", sys.executable, {}, (), source, cache),
            ("b", sys.executable, {}, ("x==1", "y==2"), source, cache),
        ]
        assert "bloomperf ab: preparing arm B (x==1 y==2)" in err.splitlines()
        assert (hint in err) is not with_deps
        if not with_deps:
            assert err.strip().splitlines()[-1].startswith(hint)
    # Without --cache-dir the arms use the default cache, and without pins no source is asked.
    monkeypatch.setenv("BLOOMPERF_CACHE", str(tmp_path / "default-cache"))
    calls.clear()
    main(["ab", *base_argv(tiny, tmp_path / "ab.json")])
    assert [c[5] for c in calls] == [default_cache_dir()] * 2
    assert calls[0][4] == PackageSource()


def test_each_arm_runs_the_interpreter_it_is_given_and_a_bad_one_is_refused(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    output = tmp_path / "ab.json"
    script = Script({}, output)
    code, _out, err = run_ab(
        [*base_argv(tiny, output), "--b", str(venv)], script, monkeypatch, capsys
    )
    assert code == 0, err
    ((specs, _group, _settings),) = script.calls
    assert (specs["a"].python, specs["b"].python) == (sys.executable, str(venv / "bin" / "python"))
    for argv, message in [
        (["--a", str(tmp_path / "none")], f"--a: {tmp_path / 'none'} is neither"),
        (["--b", str(tmp_path / "none")], f"--b: {tmp_path / 'none'} is neither"),
        (["--a-env", "NOEQUALS"], "--a-env: 'NOEQUALS' is not KEY=VALUE"),
        (["--b-env", "=v"], "--b-env: '=v' is not KEY=VALUE"),
    ]:
        code, _out, err = run_ab([*base_argv(tiny, output), *argv], script, monkeypatch, capsys)
        last = err.strip().splitlines()[-1]
        assert code == 2 and message in last and last.startswith("bloomperf"), err
        assert len(script.calls) == 1  # nothing compared


@pytest.mark.parametrize("fail_inconclusive", [False, True])
def test_serve_hands_the_whole_command_to_the_serving_comparison(
    fail_inconclusive: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bloomperf.cli import ab_serve

    got: list[tuple[Any, ...]] = []
    cell = Cell("vllm", "fp32", 1)
    found = [
        Comparison(cell, Outcome.OK, SAME, None, (), 1.0, "decided"),
        Comparison(cell, Outcome.OK, INCONCLUSIVE, None, (), 1.0, "max-pairs"),
    ]

    def serving(*passed: Any) -> list[Comparison]:
        got.append(passed)
        return found

    monkeypatch.setattr(ab_serve, "serving_ab_command", serving)
    monkeypatch.setattr(ab, "compare_group", lambda *a: pytest.fail("no pair of runs for --serve"))
    argv = ["ab", "--serve", "--tolerance", "0.3", "--find-links", "/w", "--no-lock"]
    args = build_parser().parse_args(argv + (["--fail-inconclusive"] if fail_inconclusive else []))
    out, err = io.StringIO(), io.StringIO()
    code = ab.ab_command(args, out, err)
    assert code == (1 if fail_inconclusive else 0)
    ((passed_args, options, topology, settings, source, streams),) = got
    assert passed_args is args and options.no_lock and topology.id == "cpu"
    assert settings.tolerance == 0.3 and source == PackageSource(None, ("/w",), False)
    assert streams == (out, err)


def test_a_mode_that_is_not_one_of_the_three_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt mode must not fall through to cycles mode unnoticed."""
    monkeypatch.setattr(ab, "compare_group", lambda *a: pytest.fail("compared in a bad mode"))
    assert main(["ab", "--mode", "group", "--no-lock"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        last == "bloomperf ab: error: --mode: unknown value 'group' (valid: auto, cycles, groups)"
    )
