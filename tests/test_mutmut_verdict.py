"""The weekly mutation run (``tests/mutation/run.py``) cannot look greener than it is.

Every status mutmut gives a mutant is counted, and only a kill is a kill; a module in the
committed survivor list passes only with exactly its argued survivors; ``--shard`` splits a
layer the same way every time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "mutation"))

from judge import Tally, judge, parse_shard, shard  # noqa: E402

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
