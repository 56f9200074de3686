"""A busy machine never makes a wrong verdict: what else ran during each cycle is read from /proc
(and NVML), pairs it disturbed are set aside, and too few clean pairs are *inconclusive: the
machine was busy*, never *slower*.

* The pair filter, by property: with no contention the verdict is the paired rule's own;
  contended pairs added anywhere never change the clean pairs' verdict; an A/A comparison whose
  cycles only lost time to waiting is never slower or faster, however the waits fall.
* The probe, on real processes: a worker sharing its CPU with two busy loops waited for it, and
  the loops' CPU time is the others'.
* `ab` and `bisect` on the tiny model, with a burst of load planted on one arm (two busy loops
  woken only while that arm's worker generates): the A/A is never *slower*, the bisect never
  names the version whose measurement the load hit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.contention import (
    LEAN_SHARE_OF_TOLERANCE,
    Busy,
    busy_figures,
    clean,
    clean_estimate,
    contended,
    lean,
)
from bloomperf.analysis.paired import (
    INCONCLUSIVE,
    SAME,
    SLOWER,
    estimate_paired,
    final_verdict,
)
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.cli import main
from bloomperf.cli.ab_report import render_table
from bloomperf.cli.bisect import search, step_from
from bloomperf.harness.interleave import Comparison, PairLog, Settings
from bloomperf.harness.matrix import Cell
from bloomperf.measure.contention import LoadProbe, cpu_ticks
from bloomperf.store.contention import CycleLoad, load_from_dict, load_to_dict
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.builders import BLOG_RESULTS
from tests.noise import HOOK, NOISE_ENV, plant_noise_hook, spinners
from tests.nvml_replay import NvmlReplay
from tests.wheels import build_wheel, slowdown_package

TOLERANCE = 0.05
SETTINGS = Settings(tolerance=TOLERANCE, confidence=0.95, min_pairs=8, max_pairs=400)
CELL = Cell("accelerate", "fp32", 1)

times = st.floats(0.5, 50.0)
waits = st.one_of(st.just(0.0), st.floats(0.0, 0.95))


def waited(work: float, share: float) -> tuple[float, CycleLoad]:
    """A cycle of ``work`` seconds that spent ``share`` of its wall time waiting for a CPU."""
    wall = work / (1.0 - share)
    return wall, CycleLoad(wall_s=wall, wait_s=share * wall)


def run_log(pairs: list[tuple[float, float, CycleLoad | None, CycleLoad | None]]) -> Comparison:
    """The pairs through the engine's own log, looking at the interval after each pair."""
    log = PairLog(CELL, SETTINGS)
    for a, b, load_a, load_b in pairs:
        loads = {"a": (load_a,), "b": (load_b,)} if load_a or load_b else None
        log.add_pair({"a": a, "b": b}, ("a", "b"), loads=loads)
        if log.decided():
            break
    return log.comparison("decided", 1.0, {})


@pytest.fixture(scope="module")
def tiny() -> str:
    return str(resolve_model("tiny", None, None).path)


def ab_args(tiny: str, tmp_path: Path) -> list[str]:
    return [
        "--model",
        tiny,
        "--cache-dir",
        str(tmp_path / "cache"),
        "--batch-sizes",
        "1",
        "--dtypes",
        "fp32",
        "--no-lock",
    ]


# ---- the pair filter, by property --------------------------------------------------------------


def judge(a: list[float], b: list[float], flags: list[bool], confidence: float, tol: float) -> str:
    """The verdict from the clean pairs by the paired rule, as ``PairLog`` gives it."""
    return final_verdict(clean_estimate(a, b, flags, confidence), tol)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(a=st.lists(times, min_size=1, max_size=40), data=st.data())
def test_with_no_contention_the_verdict_is_the_paired_rules_own(a: list[float], data) -> None:
    b = [v * data.draw(st.floats(0.5, 2.0)) for v in a]
    old = final_verdict(estimate_paired(a, b, 0.99), TOLERANCE)
    assert judge(a, b, [False] * len(a), 0.99, TOLERANCE) == old
    # Through the engine: cycles that waited alike (or not at all) set nothing aside.
    share = data.draw(waits)
    pairs = list(zip(a, b, strict=True))
    same_wait = [(x, y, CycleLoad(x, share * x), CycleLoad(y, share * y)) for x, y in pairs]
    plain = run_log([(x, y, None, None) for x, y in pairs])
    loaded = run_log(same_wait)
    assert (loaded.verdict, loaded.estimate) == (plain.verdict, plain.estimate)
    assert loaded.busy is not None and loaded.busy.set_aside == 0 and not loaded.busy_verdict


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    clean_pairs=st.lists(st.tuples(times, st.floats(0.5, 2.0)), min_size=0, max_size=30),
    busy_pairs=st.lists(st.tuples(times, st.floats(0.2, 20.0), waits), min_size=1, max_size=30),
    seed=st.randoms(use_true_random=False),
)
def test_contended_pairs_never_change_the_clean_pairs_verdict(
    clean_pairs: list[tuple[float, float]],
    busy_pairs: list[tuple[float, float, float]],
    seed,
) -> None:
    """However slow B looked in the pairs the load hit, and wherever they fall among the clean
    ones, the verdict and estimate are the clean pairs' alone: never *slower* by their doing."""
    clean = [(a, a * r, None, None) for a, r in clean_pairs]
    hit = []
    for a, r, share in busy_pairs:
        # B's cycle waited a share of its time that moves the pair by more than the limit.
        b_share = max(share, 1.0 - math.exp(-TOLERANCE)) if r >= 1 else 0.0
        a_share = 0.0 if r >= 1 else max(share, 1.0 - math.exp(-TOLERANCE))
        hit.append((a, a * r, CycleLoad(a, a * a_share), CycleLoad(a * r, a * r * b_share)))
    # Anywhere among the clean pairs, whose own order stays: the engine stops once decided, so
    # reordering the clean pairs themselves could change which of them it saw.
    mixed = list(clean)
    for pair in hit:
        mixed.insert(seed.randint(0, len(mixed)), pair)
    alone, together = run_log(clean), run_log(mixed)
    assert together.estimate == alone.estimate
    assert together.verdict == alone.verdict
    if alone.verdict != SLOWER:
        assert together.verdict != SLOWER
    flags = [load is not None for _, _, load, _ in mixed]
    values = ([a for a, *_ in mixed], [b for _, b, *_ in mixed])
    bare = ([a for a, *_ in clean], [b for _, b, *_ in clean])
    assert judge(*values, flags, 0.99, TOLERANCE) == (
        judge(*bare, [False] * len(clean), 0.99, TOLERANCE) if clean else INCONCLUSIVE
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(cycles=st.lists(st.tuples(times, waits, waits), min_size=1, max_size=60))
def test_an_a_a_comparison_that_only_waited_is_never_slower_or_faster(
    cycles: list[tuple[float, float, float]],
) -> None:
    """Both arms do the same work; each cycle waited for a CPU any share of its time, the
    bursts falling on either arm: whatever the waits, the A/A is same or inconclusive."""
    pairs = []
    for work, wait_a, wait_b in cycles:
        (a, load_a), (b, load_b) = waited(work, wait_a), waited(work, wait_b)
        pairs.append((a, b, load_a, load_b))
    comparison = run_log(pairs)
    assert comparison.verdict in (SAME, INCONCLUSIVE)
    if comparison.verdict == INCONCLUSIVE and comparison.busy and comparison.busy.set_aside:
        assert comparison.busy_verdict


@pytest.mark.parametrize("inside", [True, False])
def test_a_pair_is_set_aside_just_past_half_the_tolerance(inside: bool) -> None:
    limit = LEAN_SHARE_OF_TOLERANCE * TOLERANCE
    moved = limit * (1 - 1e-6) if inside else limit * (1 + 1e-6)
    share = 1.0 - math.exp(-moved)  # waiting that moves the ratio by exactly ``moved``
    a, b = CycleLoad(1.0, 0.0), CycleLoad(1.0, share)
    assert math.isclose(lean(a, b), moved, rel_tol=1e-9)
    assert contended((a,), (b,), TOLERANCE) is not inside
    assert contended((b,), (a,), TOLERANCE) is not inside  # either arm
    # Waiting alike cancels, however long: both cycles lost the same share.
    assert not contended((b,), (b,), TOLERANCE)
    # An unknown wait is not a reason to set a pair aside; a GPU neighbour always is.
    assert not contended((CycleLoad(1.0),), (b,), TOLERANCE)
    assert contended((CycleLoad(1.0, 0.0, gpu_others=1),), (a,), TOLERANCE)


def test_a_pair_that_leans_exactly_half_the_tolerance_is_kept() -> None:
    """Set aside only *beyond* half the tolerance: at it exactly, the pair is clean."""
    a, b = CycleLoad(1.0, 0.0), CycleLoad(1.0, 0.25)  # wait shares 0 and exactly 1/4
    tolerance = -math.log1p(-0.25) / LEAN_SHARE_OF_TOLERANCE
    assert not contended((a,), (b,), tolerance)
    assert contended((a,), (b,), tolerance * (1 - 1e-9))


def test_a_cycle_with_no_load_reading_leans_nowhere() -> None:
    hit = CycleLoad(1.0, 0.5)
    assert lean(None, hit) == lean(hit, None) == 0.0
    assert not contended((None,), (hit,), TOLERANCE)


def test_flags_that_do_not_match_the_pairs_are_refused() -> None:
    """A flag list of another length would pair values with the wrong flags: refused."""
    assert clean([1.0, 2.0, 3.0], [False, True, False]) == [1.0, 3.0]
    for flags in ([False], [False, False, False, False]):
        with pytest.raises(ValueError):
            clean([1.0, 2.0, 3.0], flags)


def test_the_clean_estimate_is_at_the_confidence_asked_for() -> None:
    a = [1.0 + 0.01 * (i % 7) for i in range(30)]
    b = [x * (1.02 + 0.004 * ((i * 3) % 5)) for i, x in enumerate(a)]
    flags = [i % 4 == 0 for i in range(30)]
    kept_a = [x for x, aside in zip(a, flags, strict=True) if not aside]
    kept_b = [x for x, aside in zip(b, flags, strict=True) if not aside]
    for confidence in (0.8, 0.99):
        estimate = clean_estimate(a, b, flags, confidence)
        assert estimate == estimate_paired(kept_a, kept_b, confidence)
    assert clean_estimate(a, b, flags, 0.8) != clean_estimate(a, b, flags, 0.99)
    assert clean_estimate(a, b, [True] * 30, 0.8) is None


@pytest.mark.parametrize(
    ("busy", "said"),
    [
        (Busy(2, 0, None, None, 0), "2 of 2 pairs clean"),
        (
            Busy(4, 1, 0.6, 1.5, 3),
            "3 of 4 pairs clean; workers waited up to 60 % of a cycle; "
            "others used 1.50 cores (median); 3 other processes on the GPU",
        ),
        (Busy(3, 3, 0.0, None, 0), "0 of 3 pairs clean; workers waited up to 0 % of a cycle"),
    ],
)
def test_a_busy_verdict_says_each_figure_it_has(busy: Busy, said: str) -> None:
    assert busy.describe() == said


def test_no_gpu_neighbour_seen_is_none_counted() -> None:
    quiet = [((CycleLoad(1.0, 0.0),), (CycleLoad(1.0, 0.0, gpu_others=0),))]
    assert busy_figures(quiet, [False]).gpu_neighbours == 0
    unread = busy_figures([((None,), (None,))], [False])
    assert (unread.gpu_neighbours, unread.max_wait_share, unread.median_other_cores) == (
        0,
        None,
        None,
    )


def test_groups_mode_weighs_every_cycle_of_one_arm_against_every_cycle_of_the_other() -> None:
    quiet, hit = CycleLoad(1.0, 0.0), CycleLoad(1.0, 0.5)
    assert not contended((quiet,) * 5, (quiet,) * 5, TOLERANCE)
    assert contended((quiet,) * 5, (quiet, quiet, hit, quiet, quiet), TOLERANCE)
    assert not contended((hit,) * 5, (hit,) * 5, TOLERANCE)


def test_busy_figures_and_their_stored_form() -> None:
    loads = [
        ((CycleLoad(0.1, 0.05, 0.2, 2),), (CycleLoad(0.1, 0.0, 0.1, 2),)),
        ((CycleLoad(0.1, 0.0, 0.0, 2, gpu_others=2),), (None,)),
    ]
    busy = busy_figures(loads, [True, True])
    assert (busy.pairs, busy.set_aside, busy.clean, busy.gpu_neighbours) == (2, 2, 0, 2)
    assert busy.max_wait_share == pytest.approx(0.25)  # 0.05 s of 0.1 s over 2 CPUs
    assert busy.median_other_cores == pytest.approx(1.0)
    assert "0 of 2 pairs clean" in busy.describe()
    for load in (loads[0][0][0], CycleLoad(2.0), None):
        assert load_from_dict(load_to_dict(load), "x") == load


def test_a_bisect_step_on_a_busy_machine_is_inconclusive_and_says_why() -> None:
    """Every pair set aside: no estimate, yet the step is inconclusive (busy), not a skip for
    "no cell was measured"; a busy BAD ends the search saying the machine was busy."""
    hit = (CycleLoad(1.0, 0.0),), (CycleLoad(1.0, 0.5),)
    log = PairLog(CELL, SETTINGS)
    for _ in range(12):
        log.add_pair({"a": 1.0, "b": 2.0}, ("a", "b"), loads={"a": hit[0], "b": hit[1]})
        log.decided()
    comparison = log.comparison("max-pairs", 1.0, {})
    assert comparison.estimate is None and comparison.busy_verdict
    step = step_from("1.3", [comparison], None)
    assert (step.verdict, step.busy) == (INCONCLUSIVE, True)
    assert step.message == "accelerate-fp32-bs1: machine busy, 0 of 12 pairs clean"
    finding, _ = search(["1.0", "1.3"], lambda version: step)
    assert finding.first_bad is None and "the machine was busy" in finding.reason
    table = render_table([comparison], SETTINGS)
    assert "inconclusive: busy" in table and "0 of 12 pairs clean" in table
    assert max(len(line) for line in table.splitlines()) <= 100


# ---- the probe, on real processes ---------------------------------------------------------------


def test_a_worker_sharing_its_cpu_with_busy_loops_waited_and_they_are_the_others() -> None:
    cpu = max(os.sched_getaffinity(0))
    code = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.monotonic() + 3\n"
    worker = subprocess.Popen([sys.executable, "-c", code + "while time.monotonic() < end: pass"])
    try:
        probe = LoadProbe(lambda: [worker.pid])
        time.sleep(0.3)  # the worker is up and spinning
        with spinners(2, limit_s=30):
            time.sleep(0.2)
            before = probe.snapshot()
            time.sleep(1.0)
            load = probe.between(before, probe.snapshot())
    finally:
        worker.kill()
        worker.wait()
    # Three busy loops on one CPU: the worker ran about a third of the time, at most.
    assert load.wait_share is not None and load.wait_share > 0.4, load
    assert load.other_cores is not None and load.other_cores > 0.4, load
    assert load.gpu_others is None and probe.gpu_note == "cpu: no GPU to share"
    assert (cpu_ticks([os.getpid()]) or 0) > 0 and cpu_ticks([2**22 + 7]) is None


def test_gpu_neighbours_are_the_processes_nvml_lists_that_are_not_ours() -> None:
    nvml = NvmlReplay.load("4xA100-SXM4-80GB")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        probe = LoadProbe(lambda: [worker.pid], gpus=[0, 1], nvml=nvml)
        nvml.set_processes(0, [(worker.pid, 1 << 30), (os.getpid(), None)])
        assert probe.snapshot().gpu_others == 0  # the worker and this controller
        nvml.set_processes(1, [(4_000_001, 1 << 20)])
        before = probe.snapshot()
        nvml.set_processes(1, [])
        load = probe.between(before, probe.snapshot())
        assert load.gpu_others == 1  # seen at the cycle's start
        # Inside a PID namespace NVML lists host pids, none of them ours: on each GPU all but
        # one count.
        nvml.set_processes(0, [(4_000_002, None), (4_000_003, None)])
        nvml.set_processes(1, [(4_000_002, None)])
        assert probe.snapshot().gpu_others == 1
    finally:
        worker.kill()
        worker.wait()
    assert not probe.gpu_note
    broken = LoadProbe(lambda: [os.getpid()], gpus=[7], nvml=nvml)  # no such GPU
    assert broken.snapshot().gpu_others is None and broken.gpu_note.startswith("nvml: ")


def test_a_run_records_each_timed_cycles_load_and_reads_it_back(tiny: str, tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    args = ["run", *ab_args(tiny, tmp_path), "--new-tokens", "4", "--cycles", "3"]
    assert main([*args, "--allow-no-baseline", "--output", str(output)]) == 0
    (cell,) = read_results(output).cells
    assert len(cell.loads) == len(cell.samples_ms_per_token) == 3  # the timed cycles only
    for load, ms in zip(cell.loads, cell.samples_ms_per_token, strict=True):
        # The reads bracket the worker's timed region: the wall time they span covers it.
        assert load.wall_s * 1000 >= ms * 4 and load.wait_s is not None
        assert load.other_cpu_s is not None and load.gpu_others is None
    stored = json.loads(output.read_text())["cells"][0]["loads"]
    assert [load_from_dict(d, "x") for d in stored] == list(cell.loads)


def test_a_version_1_results_file_reads_with_no_loads_and_is_written_as_version_2(
    tmp_path: Path,
) -> None:
    raw = json.loads(BLOG_RESULTS.read_text())
    assert raw["schema_version"] == 1 and all("loads" not in c for c in raw["cells"])
    run = read_results(BLOG_RESULTS)
    assert run.cells and all(cell.loads == () for cell in run.cells)
    save_run(run, tmp_path / "v2.json")
    written = json.loads((tmp_path / "v2.json").read_text())
    assert written["schema_version"] == 2 and all(c["loads"] == [] for c in written["cells"])
    assert read_results(tmp_path / "v2.json").cells == run.cells


# ---- ab and bisect with a burst of load planted on one arm ---------------------------------------


def test_an_a_a_comparison_with_load_on_arm_b_only_is_never_slower(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two busy loops run on the workers' CPU only while arm B generates: every B cycle is
    slower, by the machine's doing. Those pairs are set aside and the cell is inconclusive
    (busy), its cycles' loads in the results; it is never *slower*."""
    hook = plant_noise_hook(tmp_path / "hook")
    output = tmp_path / "ab.json"
    with spinners(2, limit_s=240, stopped=True) as pgid:
        monkeypatch.setenv(NOISE_ENV, str(pgid))
        code = main(
            [
                "ab",
                *ab_args(tiny, tmp_path),
                "--new-tokens",
                "5",
                "--b-env",
                f"PYTHONPATH={hook}",
                "--tolerance",
                "0.1",
                "--max-pairs",
                "20",
                "--max-time",
                "60",
                "--output",
                str(output),
            ]
        )
    (cell,) = json.loads(output.read_text())["cells"]
    assert cell["verdict"] != SLOWER and code == 0, cell
    assert cell["pairs_set_aside"] > cell["pairs_measured"] / 2, cell
    if cell["verdict"] == INCONCLUSIVE:
        assert cell["busy_verdict"] and cell["busy"]["set_aside"] == cell["pairs_set_aside"]
    b_waits = [
        s["load"]["wait_s"] / s["load"]["wall_s"] for s in cell["samples"] if s["arm"] == "b"
    ]
    assert max(b_waits) > 0.3  # the loops took B's CPU and the record says so


def test_a_bisect_never_names_the_version_a_burst_of_load_hit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.3 is the first slow version; 1.2's measurement is hit by load (its package wakes two
    busy loops on the workers' CPU while it generates). Without the pair filter the bisect
    names 1.2; with it, 1.2 is inconclusive (busy) and skipped: 1.3 or "one of 1.2, 1.3" (or,
    on a machine too busy to judge even BAD, no culprit, and it says the machine was busy)."""
    house = tmp_path / "wheels"
    for minor in range(4):
        slowdown_package(house, "bpnoisy", f"1.{minor}", slow=minor >= 3)
    noisy = house / "bpnoisy-1.2-py3-none-any.whl"
    noisy.unlink()
    # The version whose measurement the load hits: its package wakes the loops as it generates.
    build_wheel(
        house,
        "bpnoisy",
        "1.2",
        {"bpnoisy/__init__.py": HOOK, "bpnoisy-hook.pth": "import bpnoisy\n"},
    )
    output = tmp_path / "bisect.json"
    tiny = str(resolve_model("tiny", None, None).path)
    with spinners(2, limit_s=300, stopped=True) as pgid:
        monkeypatch.setenv(NOISE_ENV, str(pgid))
        code = main(
            [
                "bisect",
                "bpnoisy",
                "1.0",
                "1.3",
                "--find-links",
                str(house),
                *ab_args(tiny, tmp_path),
                "--new-tokens",
                "8",
                "--tolerance",
                "0.3",
                "--confidence",
                "0.95",
                "--max-pairs",
                "40",
                "--max-time",
                "60",
                "--output",
                str(output),
            ]
        )
    document = json.loads(output.read_text())
    steps = {s["version"]: s for s in document["steps"]}
    assert document["first_slower"] in ("1.3", None), document["steps"]
    noisy_step = steps.get("1.2", {})
    assert noisy_step.get("verdict") != SLOWER, steps
    if noisy_step.get("verdict") == INCONCLUSIVE:
        assert "busy" in steps["1.2"]["message"] and document["ambiguous"] == ["1.2"]
        assert code == 1
    if document["first_slower"] is None:  # a machine too busy to judge even BAD: said so
        assert steps["1.3"]["verdict"] == INCONCLUSIVE and "busy" in steps["1.3"]["message"]
    else:
        assert steps["1.3"]["verdict"] == SLOWER


@settings(max_examples=60, deadline=None)
@given(
    waits=st.tuples(st.floats(0.0, 5.0), st.floats(0.0, 5.0)),
    others=st.tuples(st.floats(0.0, 4.0), st.floats(0.0, 4.0)),
    cpus=st.integers(1, 64),
)
def test_a_served_sweep_is_judged_by_the_others_share_of_its_cpus_not_by_its_wait(
    waits: tuple[float, float], others: tuple[float, float], cpus: int
) -> None:
    """A served sweep's processes (server threads, client) wait for each other as much as for
    others, so with ``cpus`` set the wait leans nowhere: the others' CPU share of those CPUs
    does, as a wait of that share would (and it is capped below 1 as a wait is)."""
    a = CycleLoad(1.0, waits[0], others[0], 2, None, cpus)
    b = CycleLoad(1.0, waits[1], others[1], 2, None, cpus)
    shares = [min(o / cpus, 0.99) for o in others]
    assert math.isclose(lean(a, b), abs(math.log1p(-shares[1]) - math.log1p(-shares[0])))
    alike = CycleLoad(1.0, waits[1], others[0], 2, None, cpus)  # another wait, the same others
    assert lean(a, alike) == 0.0 and not contended((a,), (alike,), TOLERANCE)
    unknown = CycleLoad(1.0, waits[1], None, 2, None, cpus)
    assert lean(a, unknown) == 0.0


def test_a_served_pair_with_one_arm_under_a_burst_is_set_aside() -> None:
    """Figures of the kind measured (docs/serving.md): a client's run of 0.5 s, two CPUs; the
    others took a core during B's run and nothing during A's. Waits of our own, however they
    differ, do not set it aside; a tenth of a core either way does not either."""
    quiet = CycleLoad(0.5, 0.2, 0.0, 2, None, 2)
    burst = CycleLoad(0.5, 0.2, 0.5, 2, None, 2)  # 1 core of 2 for the whole run
    assert contended((quiet,), (burst,), 0.4) and contended((burst,), (quiet,), 0.9)
    own = CycleLoad(0.5, 0.49, 0.0, 2, None, 2)
    assert not contended((quiet,), (own,), 0.4)
    light = CycleLoad(0.5, 0.2, 0.05, 2, None, 2)  # 0.1 core
    assert not contended((quiet,), (light,), 0.4)
