"""A gate that says pass has measured and compared something.

Driven through the real CLI (``cli.main``) on the committed fixtures, edited as a hostile user
would edit them: figures deleted, fields retyped, keys and cells doubled, samples multiplied,
messages carrying workflow commands and HTML, baselines that judge nothing, names that collide.
docs/gate.md is the decision these tests hold the code to.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bloomperf.catalog.names import MODEL_NAME, TOPOLOGY_ID
from bloomperf.store.baseline import BaselineCell
from bloomperf.store.baseline.codec import save_baseline
from bloomperf.store.baseline.search import baseline_file_name
from bloomperf.store.results import MAX_CYCLES
from bloomperf.store.results.files import read_results
from tests.builders import BASELINES, BLOG_BASELINE, BLOG_RESULTS, RESULTS, cpu_baseline
from tests.fuzzing import FUZZ, retyped, run_cli, with_duplicate_key

PLUGIN_BENCHMARK = RESULTS / "cpu.tiny.plugin-benchmark.json"
CPU_STEPS = RESULTS / "cpu.tiny.steps.results.json"


def blog() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(BLOG_RESULTS.read_text())
    return data


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def diff_json(*args: object) -> tuple[int, dict[str, Any] | None, str]:
    code, out, err = run_cli("diff", *args, "--format", "json")
    return code, (json.loads(out) if code in (0, 1) else None), err


def one_line(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


# ---- a judged figure that is missing fails the cell -----------------------------------------

OK_CELLS = [i for i, c in enumerate(blog()["cells"]) if c["outcome"] == "ok"]


@FUZZ
@given(chosen=st.sets(st.sampled_from(OK_CELLS), min_size=1, max_size=4), slower=st.booleans())
def test_deleting_a_gpu_cells_ms_per_token_samples_never_passes(
    tmp_path_factory: pytest.TempPathFactory, chosen: set[int], slower: bool
) -> None:
    """On a GPU ms/token is judged: an ok cell without its samples is `not-measured` and fails,
    whether or not it was slower (deleting them must not turn a FAIL into a PASS)."""
    data = blog()
    for i in chosen:
        cell = data["cells"][i]
        if slower:
            cell["samples_ms_per_token"] = [s * 1.5 for s in cell["samples_ms_per_token"]]
        cell["samples_ms_per_token"] = []
        cell.pop("ms_per_token", None)
    path = write(tmp_path_factory.mktemp("r") / "r.json", data)
    code, verdict, _ = diff_json(path, "--baseline", BLOG_BASELINE)
    assert code == 1 and verdict is not None
    ids = {data["cells"][i]["id"] for i in chosen}
    statuses = {c["id"]: c["status"] for c in verdict["cells"]}
    assert {statuses[i] for i in ids} == {"not-measured"}
    assert all(c["fails"] for c in verdict["cells"] if c["id"] in ids)


@pytest.mark.parametrize("reading", ["load_memory", "generate_memory", "both"])
def test_a_cpu_cell_without_memory_readings_is_not_same(tmp_path: Path, reading: str) -> None:
    """On CPU peak memory is the one judged figure: a cell without it must fail, not read as
    `same` on the figures nobody judges."""
    data = json.loads(CPU_STEPS.read_text())
    assert run_cli("diff", CPU_STEPS, "--baselines", BASELINES)[0] == 0
    for cell in data["cells"]:
        for key in ("load_memory", "generate_memory") if reading == "both" else (reading,):
            cell[key] = None
        cell.pop("peak_memory_bytes", None)
    code, verdict, _ = diff_json(write(tmp_path / "r.json", data), "--baselines", BASELINES)
    if reading != "both":
        return  # the other phase's peak still measures the cell
    assert code == 1 and verdict is not None
    ok = [c for c in verdict["cells"] if c["measured_outcome"] == "ok"]
    assert ok and all(c["status"] == "not-measured" for c in ok)
    assert all("peak memory" in c["fails"] for c in ok)


# ---- judging nothing never passes silently --------------------------------------------------


def test_nothing_judged_exits_1_bad_named_input_2_and_the_opt_in_passes(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    allow = "--allow-no-baseline"
    # An empty baselines folder: every cell no-baseline.
    code, verdict, _ = diff_json(BLOG_RESULTS, "--baselines", empty)
    assert code == 1 and verdict is not None and verdict["unjudged"].startswith("nothing judged")
    assert diff_json(BLOG_RESULTS, "--baselines", empty, allow)[0] == 0
    # A baseline that has none of the run's cells.
    data = json.loads(BLOG_BASELINE.read_text())
    data["cells"] = [c | {"batch_size": c["batch_size"] + 1000} for c in data["cells"]]
    only = tmp_path / "other-cells"
    only.mkdir()
    write(only / "b.json", data)
    assert diff_json(BLOG_RESULTS, "--baselines", only)[0] == 1
    # Another topology's baseline, named: bad input.
    cpu = BASELINES / "cpu.tiny.json"
    code, _, err = run_cli("diff", BLOG_RESULTS, "--baseline", cpu)
    one_line(code, err, f"--baseline {cpu}", "topology")
    assert diff_json(BLOG_RESULTS, "--baseline", cpu, allow)[0] == 0


@pytest.mark.parametrize("cells", ["none", "errors only", "skipped only"])
def test_a_before_file_that_measured_nothing_is_bad_input(tmp_path: Path, cells: str) -> None:
    data = blog()
    if cells == "none":
        data["cells"] = []
    else:
        outcome = "error" if cells == "errors only" else "skipped"
        data["cells"] = [c | {"outcome": outcome} for c in data["cells"]]
    before = write(tmp_path / "before.json", data)
    for extra in ((), ("--allow-no-baseline",)):
        code, _, err = run_cli("diff", before, BLOG_RESULTS, *extra)
        one_line(code, err, str(before), "measured no cell")


def test_before_and_after_of_another_gpu_is_bad_input(tmp_path: Path) -> None:
    before = write(tmp_path / "before.json", blog() | {"topology": "8xH100-SXM5-80GB"})
    code, _, err = run_cli("diff", before, BLOG_RESULTS)
    one_line(code, err, str(before), "8xH100-SXM5-80GB")


# ---- every field is typed; nothing is coerced -----------------------------------------------


@FUZZ
@given(document=retyped(blog(), skip=("kind", "schema_version")))
def test_a_field_of_the_wrong_json_type_is_refused_never_coerced(
    tmp_path_factory: pytest.TempPathFactory, document: Any
) -> None:
    target = write(tmp_path_factory.mktemp("r") / "r.json", document)
    code, _, err = run_cli("diff", target, "--baseline", BLOG_BASELINE)
    one_line(code, err, str(target))


@pytest.mark.parametrize("complete", ["false", "true", 0, 1, "no"])
def test_complete_as_text_or_number_is_refused(tmp_path: Path, complete: Any) -> None:
    target = write(tmp_path / "r.json", blog() | {"complete": complete})
    code, _, err = run_cli("diff", target, "--baseline", BLOG_BASELINE)
    one_line(code, err, "'complete'", "true or false")


# ---- one duplicate rule for every format ----------------------------------------------------


@FUZZ
@given(
    source=st.sampled_from([BLOG_RESULTS, PLUGIN_BENCHMARK, BLOG_BASELINE]),
    data=st.data(),
)
def test_a_key_named_twice_anywhere_is_refused(
    tmp_path_factory: pytest.TempPathFactory, source: Path, data: Any
) -> None:
    document = json.loads(source.read_text())
    path = tmp_path_factory.mktemp("d") / source.name
    path.write_bytes(data.draw(with_duplicate_key(document)))
    if source == BLOG_BASELINE:
        code, _, err = run_cli("diff", BLOG_RESULTS, "--baseline", path)
    else:
        code, _, err = run_cli("diff", path, "--baselines", BASELINES)
    one_line(code, err, "appears twice")


@pytest.mark.parametrize("fmt", ["native", "pytest-benchmark"])
def test_a_cell_twice_is_refused_in_every_format(tmp_path: Path, fmt: str) -> None:
    if fmt == "native":
        data = blog()
        data["cells"].append(copy.deepcopy(data["cells"][3]))
    else:
        data = json.loads(PLUGIN_BENCHMARK.read_text())
        data["benchmarks"].append(copy.deepcopy(data["benchmarks"][2]))
    target = write(tmp_path / "r.json", data)
    code, _, err = run_cli("diff", target, "--baselines", BASELINES, "--allow-incomplete")
    one_line(code, err, "appears twice")


# ---- the statistics' work is bounded --------------------------------------------------------


@pytest.mark.parametrize("where", ["samples_ms_per_token", "samples_step_ms", "baseline"])
def test_more_samples_than_the_statistics_afford_are_refused(tmp_path: Path, where: str) -> None:
    data = blog()
    cell = data["cells"][0]
    many = [cell["samples_ms_per_token"][0]] * (MAX_CYCLES + 1)
    if where == "baseline":
        baseline = json.loads(BLOG_BASELINE.read_text())
        baseline["cells"][0]["ms_per_token_samples"] = many
        named = write(tmp_path / "b.json", baseline)
        code, _, err = run_cli("diff", BLOG_RESULTS, "--baseline", named)
    else:
        cell[where] = many if where == "samples_ms_per_token" else [[1.0]] * (MAX_CYCLES + 1)
        code, _, err = run_cli("diff", write(tmp_path / "r.json", data), "--baselines", BASELINES)
    one_line(code, err, f"over {MAX_CYCLES}")


def test_many_cells_at_the_limit_together_are_refused(tmp_path: Path) -> None:
    data = blog()
    cell = data["cells"][0]
    cells = []
    for batch in range(1, 22):
        cells.append(cell | {"batch_size": batch, "samples_ms_per_token": [1.0] * MAX_CYCLES})
    data["cells"] = cells
    code, _, err = run_cli("diff", write(tmp_path / "r.json", data), "--baselines", BASELINES)
    one_line(code, err, "timed samples in all")


# ---- text from a results file stays text ----------------------------------------------------

HOSTILE = (
    "boom\n::error file=x::forged",
    "  ::set-output name=verdict::pass",
    "x\r\n::add-mask::y",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "a | b | c",
    "`code` <script>alert(1)</script>",
    "::stop-commands::token",
)


# Raw HTML, or a link, that no backslash escapes.
RAW = re.compile(r"(?<!\\)<(img|script)|(?<!\\)\]\(javascript")


def lines_starting_commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("::")]


@pytest.mark.parametrize("outcome", ["error", "ok"])
def test_a_hostile_message_never_becomes_a_workflow_command_or_html(
    tmp_path: Path, outcome: str
) -> None:
    """Each cell carries another hostile message, and so do the environment's versions: the
    terminal, the runner's log, the step summary's markdown and the report stay inert."""
    folder = tmp_path
    data = blog()
    for i, message in enumerate(HOSTILE):
        data["cells"][i] = data["cells"][i] | {"outcome": outcome, "message": message}
    data["environment"] = {
        "packages": {f"pkg{i}": m for i, m in enumerate(HOSTILE)},
        "python": HOSTILE[0],
    }
    path = write(folder / "r.json", data)
    before = write(folder / "before.json", blog() | {"environment": {"python": "3.11"}})
    for args in (
        ("--baseline", BLOG_BASELINE, "--format", "github"),
        ("--baseline", BLOG_BASELINE, "--format", "markdown"),
        ("--baseline", BLOG_BASELINE),
    ):
        _, out, _ = run_cli("diff", path, *args)
        own = re.compile(r"::(error|warning) file=[^:\n]*,title=[^:\n]*::[^\n]*")
        assert all(own.fullmatch(line) for line in lines_starting_commands(out)), out
        assert "markdown" not in args or not RAW.search(out)  # a step summary's markdown
    _, out, _ = run_cli("diff", before, path, "--format", "markdown")
    assert not lines_starting_commands(out) and not RAW.search(out)
    report = folder / "report"
    run_cli("report", path, "--out", report, "--baseline", BLOG_BASELINE)
    markdown = (report / "report.md").read_text()
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", markdown) and not RAW.search(markdown)
    assert not lines_starting_commands(markdown)
    page = (report / "index.html").read_text()
    assert "<img src=x" not in page and "<script>alert" not in page


# ---- section 4: baseline names and files map one to one -------------------------------------

topologies = st.from_regex(TOPOLOGY_ID, fullmatch=True)
models = st.from_regex(MODEL_NAME, fullmatch=True)


@FUZZ
@given(a=st.tuples(topologies, models), b=st.tuples(topologies, models))
@example(a=("a.b", "c"), b=("a", "b.c"))  # the "." between the parts must stay the only bare one
@example(a=("cpu", "org/x"), b=("cpu", "org--x"))  # a hub id's "/" written as "--" collides
def test_two_pairs_never_share_a_baseline_file_name(a: tuple[str, str], b: tuple[str, str]) -> None:
    if a != b:
        assert baseline_file_name(*a) != baseline_file_name(*b)


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a.b", "c"), ("a", "b.c")), (("cpu", "org/x"), ("cpu", "org--x"))],
)
def test_accepting_one_pair_never_replaces_anothers_baseline(
    tmp_path: Path, first: tuple[str, str], second: tuple[str, str]
) -> None:
    folder = tmp_path / "baselines"
    for (topology, model), name in ((first, "1.json"), (second, "2.json")):
        data = json.loads(CPU_STEPS.read_text())
        data |= {"topology": topology, "model": data["model"] | {"name": model}}
        path = write(tmp_path / name, data)
        assert run_cli("baseline", "accept", path, "--baselines", folder)[0] == 0
    kept = {json.loads(p.read_text())["topology"]["id"] for p in folder.glob("*.json")}
    models_kept = {json.loads(p.read_text())["model"]["name"] for p in folder.glob("*.json")}
    assert len(list(folder.glob("*.json"))) == 2
    assert kept == {first[0], second[0]} and models_kept == {first[1], second[1]}


def test_a_file_of_another_pair_at_the_target_name_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "baselines"
    folder.mkdir()
    other = json.loads((BASELINES / "cpu.tiny.json").read_text())
    other["topology"]["id"] = "gpu"
    held = write(folder / baseline_file_name("cpu", "tiny"), other)
    text = held.read_text()
    code, _, err = run_cli("baseline", "accept", CPU_STEPS, "--baselines", folder)
    one_line(code, err, str(held), "gpu / tiny")
    assert held.read_text() == text


# ---- a first run: nothing judged fails unless opted in; accepting it makes the next judged ---


def test_a_first_run_fails_unjudged_passes_opted_in_and_its_baseline_judges_the_next(
    tmp_path: Path,
) -> None:
    """The real `bloomperf run` on the tiny model (its own processes), against an empty
    baselines folder: exit 1 "nothing judged"; with --allow-no-baseline 0; accepted, the same
    run is judged and passes."""
    folder = tmp_path / "baselines"
    folder.mkdir()
    quick = ["--batch-sizes", "1", "--dtypes", "fp32", "--new-tokens", "4", "--cycles", "2"]
    quick += ["--no-lock", "--baselines", str(folder)]

    def run(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "bloomperf", "run", *quick, "--output", str(tmp_path / name)]
        return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=600)

    first = run("first.json")
    assert first.returncode == 1, first.stderr
    assert "FAILED nothing judged" in first.stdout and "--allow-no-baseline" in first.stdout
    assert f"no baseline for cpu / tiny; baselines searched: {folder}" in first.stdout
    opted = run("opted.json", "--allow-no-baseline")
    assert opted.returncode == 0, opted.stdout + opted.stderr
    assert run_cli("baseline", "accept", tmp_path / "opted.json", "--baselines", folder)[0] == 0
    judged = run("judged.json")
    assert judged.returncode == 0, judged.stdout + judged.stderr
    assert "baseline:" in judged.stdout and "nothing judged" not in judged.stdout


PLUGIN_TEST = """
import pytest

@pytest.mark.cpu
def test_cpu(bloomperf_cell, bloomperf, benchmark):
    bloomperf.check(bloomperf_cell, benchmark)
"""


def test_the_plugin_fails_a_session_that_judged_nothing(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The same rule in the pytest plugin: every cell passes its own test (nothing to compare
    it with), but the session fails unless --bloomperf-allow-no-baseline."""
    folder = tmp_path / "empty"
    folder.mkdir()
    pytester.makepyfile(test_matrix=PLUGIN_TEST)
    argv = ["-m", "cpu", "--bloomperf-new-tokens=4", "--bloomperf-cycles=2"]
    argv += ["--bloomperf-dtypes=fp32", "--bloomperf-batch-sizes=1", "--bloomperf-no-lock"]
    argv += [f"--bloomperf-baselines={folder}", f"--bloomperf-output={tmp_path / 'r.json'}"]
    failed = pytester.runpytest_subprocess(*argv)
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.stdout.fnmatch_lines(["*bloomperf: FAILED: nothing judged*", "*1 passed*"])
    allowed = pytester.runpytest_subprocess(*argv, "--bloomperf-allow-no-baseline")
    assert allowed.ret == pytest.ExitCode.OK


def test_a_baselines_own_words_never_become_workflow_commands(tmp_path: Path) -> None:
    data = json.loads(BLOG_BASELINE.read_text())
    data["notes"] = list(HOSTILE)
    data["provenance"][0]["source"] = HOSTILE[0]
    data["provenance"][0]["hardware"] = HOSTILE[1]
    path = write(tmp_path / "b.json", data)
    code, out, err = run_cli("baseline", "show", path)
    assert code == 0, err
    assert not lines_starting_commands(out), out


def test_a_baseline_that_judges_no_figure_judges_nothing(tmp_path: Path) -> None:
    """Every tolerance null: each cell reads `same` having compared nothing; the run fails as
    judged nothing, until one figure has a tolerance."""
    baseline = json.loads(BLOG_BASELINE.read_text())
    for cell in baseline["cells"]:
        for key in ("ms_per_token_tolerance", "peak_memory_tolerance", "load_time_tolerance"):
            cell[key] = None
    for load in baseline["load_times"]:
        load["tolerance"] = None
    named = write(tmp_path / "b.json", baseline)
    data = blog()
    data["cells"] = [c for c in data["cells"] if c["outcome"] == "ok"]
    results = write(tmp_path / "r.json", data)
    code, verdict, _ = diff_json(results, "--baseline", named)
    assert code == 1 and verdict is not None and "gives no figure" in verdict["unjudged"]
    assert {c["status"] for c in verdict["cells"]} == {"same"}
    baseline["cells"][0]["ms_per_token_tolerance"] = 0.05
    write(named, baseline)
    assert diff_json(results, "--baseline", named)[0] == 0


def run_against_an_oom_at_batch_2(
    pytester: pytest.Pytester, tmp_path: Path, batch_sizes: str, *extra: str
) -> pytest.RunResult:
    """The plugin on the tiny model against a baseline that ran out of memory at batch 2 and
    gives no figure a tolerance (so nothing is judged, which these sessions allow)."""
    folder = tmp_path / "baselines"
    folder.mkdir()
    baseline = cpu_baseline(
        BaselineCell("accelerate", "fp32", 1, "ok", ms_per_token=5.0),
        BaselineCell("accelerate", "fp32", 2, "oom"),
    )
    save_baseline(baseline, folder / baseline_file_name("cpu", "tiny"))
    pytester.makepyfile(test_matrix=PLUGIN_TEST)
    argv = ["-m", "cpu", "--bloomperf-new-tokens=4", "--bloomperf-cycles=2", "-rs"]
    argv += ["--bloomperf-dtypes=fp32", f"--bloomperf-batch-sizes={batch_sizes}"]
    argv += ["--bloomperf-no-lock", f"--bloomperf-baselines={folder}"]
    argv += [f"--bloomperf-output={tmp_path / 'r.json'}", "--bloomperf-allow-no-baseline"]
    return pytester.runpytest_subprocess(*argv, *extra)


def test_the_plugin_skips_a_cell_beyond_the_baselines_oom_boundary(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A cell the session does not run (here: beyond the OOM boundary the baseline records) is
    a skipped test saying why, never a passed one."""
    result = run_against_an_oom_at_batch_2(pytester, tmp_path, "1,4")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*beyond the baseline's OOM boundary (OOM at batch 2*"])
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize("strict", [False, True])
def test_the_plugins_cell_test_fails_a_moved_boundary_only_under_strict(
    pytester: pytest.Pytester, tmp_path: Path, strict: bool
) -> None:
    """The baseline ran out of memory at batch 2; the tiny model runs it now: its boundary
    moved up, which fails that cell's test under --bloomperf-strict only (as run and diff)."""
    result = run_against_an_oom_at_batch_2(
        pytester, tmp_path, "1,2", *(["--bloomperf-strict"] if strict else [])
    )
    result.assert_outcomes(passed=1 if strict else 2, failed=1 if strict else 0)


def test_the_plugin_loads_each_group_once_for_all_its_cells(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Three batch sizes of one (backend, dtype) are three tests served by one load: the group
    stops after its last cell only."""
    pytester.makepyfile(test_matrix=PLUGIN_TEST)
    out = tmp_path / "r.json"
    argv = ["-m", "cpu", "--bloomperf-new-tokens=4", "--bloomperf-cycles=2"]
    argv += ["--bloomperf-dtypes=fp32", "--bloomperf-batch-sizes=1,2,3", "--bloomperf-no-lock"]
    argv += [f"--bloomperf-output={out}", "--bloomperf-allow-no-baseline"]
    result = pytester.runpytest_subprocess(*argv)
    result.assert_outcomes(passed=3)
    # The start line only: a slow load also prints "loading accelerate fp32: N s" heartbeats.
    assert sum(line.endswith("loading accelerate fp32 ...") for line in result.outlines) == 1
    cells = read_results(out).cells
    assert [c.details["load_count"] for c in cells] == [1, 1, 1]
    assert len({c.load_time_s for c in cells}) == 1
