"""The weekly mutation run (``tests/mutation/run.py``) cannot look greener than it is.

Every status mutmut gives a mutant is counted, and only a kill is a kill; a module in the
committed survivor list passes only with exactly its argued survivors; ``--shard`` splits a
layer the same way every time.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "mutation"))

from judge import Tally, judge, load_survivors, parse_shard, shard  # noqa: E402

MODULE = "bloomperf/analysis/planted.py"


def tally(**statuses: str) -> Tally:
    return Tally(MODULE, {f"planted.x_f__mutmut_{k}": s for k, s in statuses.items()}, 1.0)


@pytest.mark.parametrize(
    "status",
    ["timeout", "suspicious", "skipped", "segfault", "not checked", "no tests", "a new status"],
)
def test_only_a_kill_is_a_kill(status: str) -> None:
    """A mutant timed out (a slower runner times more out), suspicious, skipped, never checked
    or given a status mutmut adds later is left alive: it counts against the threshold."""
    run = tally(a="killed", b="caught by type check", c=status)
    assert run.killed == 2
    assert run.left == {"planted.x_f__mutmut_c": status}
    assert judge([run], {}, max_unlisted=0).failed
    assert not judge([run], {}, max_unlisted=1).failed


def test_the_printed_terms_add_up_to_the_mutants() -> None:
    run = tally(a="killed", b="timeout", c="suspicious", d="skipped", e="survived", f="odd")
    line = run.line()
    assert line.startswith(f"{MODULE}: 6 mutants = 1 killed + ")
    terms = line.split(" = ")[1].rsplit(" (", 1)[0].split(" + ")
    assert sum(int(term.split()[0]) for term in terms) == 6
    assert {t.split(" ", 1)[1] for t in terms} >= {"timeout", "suspicious", "skipped", "odd"}


def test_a_listed_module_passes_only_with_its_argued_survivors() -> None:
    """A new survivor fails even under a generous ``--max-survivors`` (that allowance is for
    modules with no list yet); a listed one now killed, or gone, is reported to be removed."""
    run = tally(a="killed", b="survived", c="timeout")
    listed = {MODULE: {"planted.x_f__mutmut_b": "equivalent", "planted.x_f__mutmut_c": "loop"}}
    verdict = judge([run], listed, max_unlisted=0)
    assert not verdict.failed and verdict.lines == ()
    del listed[MODULE]["planted.x_f__mutmut_c"]
    verdict = judge([run], listed, max_unlisted=99)
    assert verdict.failed
    assert verdict.lines == (
        "new survivor (timeout), not in the survivor list: planted.x_f__mutmut_c",
    )
    listed[MODULE].update({"planted.x_f__mutmut_a": "was alive", "planted.x_f__mutmut_z": "?"})
    listed[MODULE]["planted.x_f__mutmut_c"] = "loop"
    verdict = judge([run], listed, max_unlisted=0)
    assert not verdict.failed
    assert verdict.lines == (
        "listed survivor now killed: remove it from the list: planted.x_f__mutmut_a",
        "listed survivor now no longer a mutant: remove it from the list: planted.x_f__mutmut_z",
    )


def test_survivors_of_unlisted_modules_count_against_the_allowance_together() -> None:
    one, two = tally(a="survived"), Tally("bloomperf/other.py", {"o.x_g__mutmut_1": "timeout"}, 1)
    assert not judge([one, two], {}, max_unlisted=2).failed
    verdict = judge([one, two], {}, max_unlisted=1)
    assert verdict.failed
    assert verdict.lines == (
        "2 mutants left in modules with no survivor list, more than the 1 allowed",
    )


def test_the_shards_split_a_layer_whole_disjoint_and_even() -> None:
    """Every module in exactly one shard, the same split every time, each shard within one
    module's size of the others (largest first, to the lightest shard)."""
    sizes = {f"m{i:02d}.py": (i * 37) % 400 + 20 for i in range(29)}
    modules = sorted(sizes)
    shards = [shard(modules, sizes, k, 3) for k in (1, 2, 3)]
    assert sorted(m for s in shards for m in s) == modules
    assert shards == [shard(modules, sizes, k, 3) for k in (1, 2, 3)]
    totals = [sum(sizes[m] for m in s) for s in shards]
    assert max(totals) - min(totals) <= max(sizes.values())
    assert all(s == sorted(s) for s in shards)  # each keeps the given order
    assert shard(modules, sizes, 1, 1) == modules


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0", "-1/2", "/3"])
def test_a_shard_outside_one_to_n_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="K/N"):
        parse_shard(text)
    assert parse_shard("3/3") == (3, 3)


# The real run: mutmut over one small deciding module (78 mutants, 11-40 s on the shared
# 2-core machine) in a copy of the tree, with weaknesses planted in the copy; the thresholds
# and the failing tests on a two-line module planted in a copy (a few seconds a run).
REAL = "bloomperf/analysis/utilisation.py"
# No test calls it: its mutants (``>=`` for ``>``, ``2`` for ``1``) are reached by no test.
UNREACHED = "\n\ndef planted_unreached(x: int) -> bool:\n    return x > 1\n"


def load_runner() -> Any:
    """tests/mutation/run.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "tests/mutation/run.py")
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = runner  # dataclasses look their module up
    spec.loader.exec_module(runner)
    return runner


def copy_tree(target: Path) -> Path:
    """The tracked and untracked-unignored files (the runner's own copy), in a fresh git
    repository (the runner lists the tree with git)."""
    load_runner().copy_tree(target)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    return target


def mutate(tree: Path, *args: str, module: str = REAL) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "tests/mutation/run.py", module, "--max-children", "1", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GITHUB_OUTPUT")}
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)


def module_line(stdout: str, module: str = REAL) -> tuple[int, dict[str, int]]:
    """mutants and {status: count} from ``MODULE: N mutants = K killed + ... (T s)``."""
    line = next(x for x in stdout.splitlines() if x.startswith(f"{module}: "))
    head, _, terms = line.removeprefix(f"{module}: ").partition(" mutants = ")
    counts = {}
    for term in terms.rsplit(" (", 1)[0].split(" + "):
        number, _, status = term.partition(" ")
        counts[status] = int(number)
    return int(head), counts


def left_names(stdout: str) -> dict[str, str]:
    """The mutants printed as left alive: name -> status."""
    found = {}
    for line in stdout.splitlines():
        status, sep, name = line.strip().rpartition(": ")
        if line.startswith("  ") and sep and name.startswith("bloomperf."):
            found[name] = status
    return found


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = copy_tree(tmp_path_factory.mktemp("tree"))
    with (tree / REAL).open("a", encoding="utf-8") as handle:
        handle.write(UNREACHED)
    return tree


@pytest.fixture(scope="module")
def listed_run(planted: Path) -> subprocess.CompletedProcess[str]:
    """The planted module against the committed survivor list."""
    return mutate(planted)


def test_a_real_run_counts_every_mutant_and_holds_the_module_to_its_list(
    listed_run: subprocess.CompletedProcess[str],
) -> None:
    """The committed list argues every survivor of the real tests: the only new ones are the
    planted mutants no test reaches, and they fail the run. The printed terms add up, and each
    mutant left alive is printed by name."""
    out = listed_run.stdout
    assert listed_run.returncode == 1, out + listed_run.stderr
    mutants, counts = module_line(out)
    assert sum(counts.values()) == mutants > 0
    left = left_names(out)
    assert len(left) == mutants - counts["killed"] - counts["caught by type check"]
    planted_left = {n: s for n, s in left.items() if ".x_planted_unreached__mutmut_" in n}
    assert len(planted_left) >= 2 and set(planted_left.values()) == {"no tests"}
    new = [x for x in out.splitlines() if "not in the survivor list" in x]
    assert sorted(x.rpartition(": ")[2] for x in new) == sorted(planted_left), out
    assert f"mutation: {mutants} mutants, {counts['killed']} killed, {len(left)} left" in out


def plant_module(tree: Path, test_body: str) -> str:
    """A small deciding module and its test file in ``tree``: the edge of the tolerance is
    not tested, so ``<`` for ``<=`` survives."""
    module = "bloomperf/analysis/planted.py"
    (tree / module).write_text(
        "def within(ratio: float, tolerance: float) -> bool:\n"
        "    return abs(ratio - 1.0) <= tolerance\n"
    )
    (tree / "tests" / "test_planted.py").write_text(
        # Spelt in two parts: the runner picks a module's tests by this import's text, and this
        # file must not be one of them.
        f"from bloomperf.analysis.{'planted'} import within\n\n\n"
        f"def test_within() -> None:\n    {test_body}\n"
    )
    return module


def test_a_module_with_no_list_fails_below_its_count_of_survivors_and_passes_at_it(
    tmp_path: Path,
) -> None:
    tree = copy_tree(tmp_path)
    module = plant_module(tree, "assert within(1.05, 0.1) and not within(1.5, 0.1)")
    below = mutate(tree, "--max-survivors", "0", module=module)
    assert below.returncode == 1, below.stdout + below.stderr
    left = left_names(below.stdout)
    assert "bloomperf.analysis.planted.x_within__mutmut_" in " ".join(left)
    assert f"{len(left)} mutants left in modules with no survivor list" in below.stdout
    at = mutate(tree, "--max-survivors", str(len(left)), module=module)
    assert at.returncode == 0, at.stdout + at.stderr
    assert left_names(at.stdout) == left


def test_a_module_whose_tests_fail_without_a_mutant_fails_the_run(tmp_path: Path) -> None:
    """Even where every mutant left alive is allowed."""
    tree = copy_tree(tmp_path)
    module = plant_module(tree, "assert within(1.0, 0.1)\n    assert False")
    done = mutate(tree, "--max-survivors", "1000", module=module)
    assert done.returncode == 1, done.stdout + done.stderr
    # mutmut stops at its first pass over the tests (collecting which test reaches which
    # function), before any mutant: all are counted, unchecked.
    assert "mutmut failed" in done.stdout and "FAILED tests/test_planted.py::test_within" in (
        done.stdout
    )
    mutants, counts = module_line(done.stdout, module)
    assert counts["not checked"] == mutants > 0


def test_every_listed_survivor_is_a_mutant_of_its_module_with_a_reason() -> None:
    listed = load_survivors(ROOT / "tests" / "mutation" / "survivors.toml")
    assert listed, "the committed survivor list is empty"
    for module, survivors in listed.items():
        assert (ROOT / module).is_file(), module
        dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name, reason in survivors.items():
            # mutmut names a function's mutants x_NAME, a method's xǁCLASSǁNAME.
            own = name.startswith((f"{dotted}.x_", f"{dotted}.xǁ"))
            assert own and "__mutmut_" in name, name
            assert len(reason.split()) >= 4, f"{name}: argue it in a line, got {reason!r}"


def test_a_survivor_list_entry_without_its_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "survivors.toml"
    path.write_text(
        '["bloomperf/analysis/stats.py"]\n"bloomperf.analysis.stats.x_f__mutmut_1" = 1\n'
    )
    with pytest.raises(ValueError, match="must map each mutant name to its reason"):
        load_survivors(path)
    assert load_survivors(tmp_path / "absent.toml") == {}


def test_a_module_past_its_budget_fails_the_run_and_its_mutants_count(tmp_path: Path) -> None:
    """mutmut and its forked children are stopped at the budget; whatever it had listed is
    counted (unchecked mutants as left alive), and the run fails even with every one allowed."""
    tree = copy_tree(tmp_path)
    module = plant_module(tree, "assert within(1.05, 0.1) and not within(1.5, 0.1)")
    done = mutate(tree, "--budget", "1", "--max-survivors", "1000", module=module)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "over the budget of 1 s: fails the run" in done.stdout
    mutants, counts = module_line(done.stdout, module)
    assert sum(counts.values()) == mutants
    # Here: mutmut had written its 4 mutants and checked none (unless stopped even earlier).
    assert counts.get("not checked", 0) > 0 or mutants == 0
    assert len(left_names(done.stdout)) == mutants - counts["killed"]


def test_a_shard_outside_one_to_n_is_refused_on_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "tests/mutation/run.py", "--layer", "harness", "--shard", "4/3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--shard wants K/N with 1 <= K <= N" in done.stderr


def test_every_test_the_runner_leaves_out_exists() -> None:
    """A renamed test would stop being left out, and fail mutmut's first pass again."""
    runner = load_runner()
    for node in runner.DESELECT:
        path, _, name = node.partition("::")
        assert f"\ndef {name}(" in (ROOT / path).read_text(encoding="utf-8"), node


def test_a_module_of_only_its_docstring_has_no_mutant_and_runs_no_test() -> None:
    runner = load_runner()
    tally = runner.run_module("bloomperf/store/history/__init__.py", 1.0, 1, None)
    assert (tally.mutants, tally.problem) == (0, "")
    assert not runner.has_code("bloomperf/analysis/__init__.py")
    assert runner.has_code(REAL) and runner.has_code("bloomperf/store/baseline/__init__.py")


def test_a_command_run_through_the_clis_main_is_covered_by_the_tests_that_run_it() -> None:
    """The CLI's main called with a command's name reaches that command's module without
    naming it: its mutants must be run against those tests (diff's github format was tested
    only that way)."""
    covering = load_runner().covering_tests
    assert "tests/test_github_output.py" in covering("bloomperf/cli/diff.py")
    assert "tests/test_github_output.py" not in covering("bloomperf/cli/baseline.py")


def test_a_module_no_test_names_is_run_against_the_tests_of_the_modules_that_import_it() -> None:
    """The report's page is written through ``render.report`` and the history site, which
    their tests import: without that step the weekly run found no test for such a module and
    failed on it. A module some test names keeps its own tests only."""
    runner = load_runner()
    page = "bloomperf/render/report/page.py"
    assert runner.named_by(page) == ()
    importers = ["bloomperf/render/history/site.py", "bloomperf/render/report/__init__.py"]
    assert runner.importers(page) == importers
    assert (
        set(runner.covering_tests(page))
        == {test for module in importers for test in runner.named_by(module)}
        >= {"tests/test_report.py", "tests/test_site_pages.py"}
    )
    assert runner.covering_tests("bloomperf/catalog/sizes.py") == ("tests/test_sizes.py",)


def test_every_module_of_every_layer_has_tests_to_run_its_mutants_against() -> None:
    """The weekly run mutates each layer whole: a module with code and no covering test fails
    it ("no test file imports it") before any mutant is judged, unless it runs only in a process
    of its own, where no mutant can be switched on, and is named as such."""
    runner = load_runner()
    bare = [
        module
        for layer in runner.LAYERS
        for module in runner.layer_modules(layer)
        if runner.has_code(module) and not runner.covering_tests(module)
    ]
    assert bare == sorted(runner.OWN_PROCESS)
