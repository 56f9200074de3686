"""A serving sweep judged by the one gate, through the metric registry and no serving code of
its own: ``bloomperf serve``'s cell carries the registered ``serving_*`` figures, ``baseline
accept`` keeps them with their CPU tolerances, and ``diff`` judges them in their directions.
The figures are those measured on this machine (docs/serving.md); tests/test_serving.py does
the same from a real sweep."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bloomperf.analysis.compare import judge
from bloomperf.analysis.serving import effective_throughput
from bloomperf.render.comparison import render_comparison
from bloomperf.render.report import write_report
from bloomperf.render.report.curve import curve_of, plot_serving_curves
from bloomperf.render.report.trend import trend_panels
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.history.nights import load_history
from bloomperf.store.results import ModelInfo, RunResult
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from bloomperf.store.serving import (
    EFFECTIVE,
    ITL_P99,
    TTFT_P99,
    RateSummary,
    Sla,
    encode_rate,
    read_sweep,
    sweep_cell,
    sweep_workload,
)
from tests.builders import add_night, night, on_night

SLA = Sla()
SETTINGS = {
    "workload": "fastgen-1200-128", "max_model_len": 512, "engine_args": "",
    "rates": "2,4,8,16,inf", "requests": 40, "refine": 2, "burstiness": 1.0,
}  # fmt: skip


def measured(
    rate: float, rps: float, ttft: tuple[float, float], itl: tuple[float, float], met: float
) -> RateSummary:
    """A rate as docs/serving.md records it (p50/p99 in ms; p90 taken as the p99)."""
    return RateSummary(
        rate=rate, outcome="ok", message="", requests=40, completed=40, duration_s=40 / rps,
        request_throughput=rps, output_throughput=rps * 16,
        ttft_ms={"p50": ttft[0], "p90": ttft[1], "p99": ttft[1]}, tpot_ms={},
        itl_ms={"p50": itl[0], "p90": itl[1], "p99": itl[1]}, sla_met=met,
    )  # fmt: skip


# The default server, `bloomperf serve --rates 2,4,8,16,inf --requests 40 --refine 2`.
DEFAULT_SERVER = [
    measured(2, 1.82, (229, 385), (48, 175), 1.0),
    measured(4, 3.66, (332, 823), (55, 291), 1.0),
    measured(6, 4.87, (600, 1933), (98, 782), 1.0),
    measured(7, 3.83, (1421, 2159), (160, 1195), 0.65),
    measured(8, 5.39, (1472, 2830), (131, 1077), 0.60),
    measured(16, 7.24, (1111, 1942), (120, 899), 0.95),
    measured(math.inf, 6.02, (3085, 4172), (132, 947), 0.05),
]
# The same model served with --max-num-seqs 1 (--rates 2,4,8 --requests 40): only what the
# note recorded (the ITL was not, so the default server's stands in for it).
ONE_SEQUENCE = [
    measured(2, 1.19, (7300, 11900), (48, 175), 0.10),
    measured(4, 1.19, (7300, 11900), (48, 175), 0.68),
    measured(8, 1.19, (7300, 11900), (48, 175), 0.18),
]


def sweep_run(
    rates: list[RateSummary], sla: Sla = SLA, settings: dict[str, object] = SETTINGS
) -> RunResult:
    cell = sweep_cell(settings, sla, rates, effective_throughput(rates, sla))
    model = ModelInfo("tiny-serving", "", 2, 0)
    workload = sweep_workload(SETTINGS)
    return RunResult(model, workload, "cpu", {}, (cell,), "2026-12-03T00:00:00Z", "", True)


def scaled(run: RunResult, metric: str, factor: float) -> RunResult:
    (cell,) = run.cells
    figures = {**cell.figures, metric: tuple(v * factor for v in cell.figures[metric])}
    return replace(run, cells=(replace(cell, figures=figures),))


BASELINE = accept_run(sweep_run(DEFAULT_SERVER), None, source="default server")


def test_the_sweeps_cell_carries_the_registered_figures() -> None:
    (cell,) = sweep_run(DEFAULT_SERVER).cells
    assert cell.id == "serve-fastgen-1200-128-fp32-bs1"
    # 6/s met the SLA and 7/s did not: 16/s meeting it again does not count.
    assert cell.figures == {EFFECTIVE: (6.0,), TTFT_P99: (385.0,), ITL_P99: (175.0,)}
    (expected,) = BASELINE.cells
    assert expected.figure_tolerances == {EFFECTIVE: 0.4, TTFT_P99: 0.9, ITL_P99: 0.9}


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(0.05, 0.59))
def test_a_lower_effective_throughput_beyond_tolerance_fails(factor: float) -> None:
    verdict = judge(scaled(sweep_run(DEFAULT_SERVER), EFFECTIVE, factor), BASELINE)
    assert verdict.failed and verdict.cells[0].status == "regressed"


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(0.61, 20.0))
def test_an_effective_throughput_within_tolerance_or_higher_passes(factor: float) -> None:
    verdict = judge(scaled(sweep_run(DEFAULT_SERVER), EFFECTIVE, factor), BASELINE)
    assert not verdict.failed
    assert verdict.cells[0].status == ("improved" if factor > 1.4 else "same")


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(1.91, 50.0), metric=st.sampled_from((ITL_P99, TTFT_P99)))
def test_a_higher_p99_latency_beyond_tolerance_fails(factor: float, metric: str) -> None:
    verdict = judge(scaled(sweep_run(DEFAULT_SERVER), metric, factor), BASELINE)
    assert verdict.failed and verdict.cells[0].status == "regressed"


def bloomperf(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv], capture_output=True, text=True, timeout=300
    )


def test_the_planted_regression_fails_diff_against_the_default_servers_baseline(
    tmp_path: Path,
) -> None:
    """One sequence at a time: no rate meets the SLA (no effective throughput: a judged figure
    missing) and the p99 TTFT at 2/s is 31 times the baseline's: exit 1, named."""
    save_run(sweep_run(DEFAULT_SERVER), tmp_path / "default.json")
    save_run(sweep_run(ONE_SEQUENCE), tmp_path / "one.json")
    baselines = tmp_path / "baselines"
    accept = bloomperf(
        "baseline", "accept", str(tmp_path / "default.json"), "--baselines", str(baselines)
    )
    assert accept.returncode == 0, accept.stderr
    same = bloomperf("diff", str(tmp_path / "default.json"), "--baselines", str(baselines))
    assert same.returncode == 0, same.stdout + same.stderr
    done = bloomperf("diff", str(tmp_path / "one.json"), "--baselines", str(baselines))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "served TTFT p99 regressed" in " ".join(done.stdout.split())


def test_a_version_1_serving_file_still_reads_as_a_run(tmp_path: Path) -> None:
    """The sweep's former document (kind bloomperf-serving): its cell, figures and rates."""
    old = {
        "kind": "bloomperf-serving", "version": 1, "complete": True, "settings": SETTINGS,
        "sla": {"ttft_s": 2.0, "token_rate": 4.0, "attainment": 0.9}, "effective_rps": 6.0,
        "rates": [encode_rate(r) for r in DEFAULT_SERVER],
    }  # fmt: skip
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(old))
    run = read_results(path)
    (cell,) = run.cells
    assert run.topology == "unrecorded" and run.complete
    assert cell.figures == sweep_run(DEFAULT_SERVER).cells[0].figures
    assert read_sweep(cell.details) == (SLA, DEFAULT_SERVER, 6.0)
    report = bloomperf("diff", str(path), "--allow-no-baseline")
    assert report.returncode == 0, report.stdout + report.stderr


def test_the_report_draws_the_curve_against_the_baselines(tmp_path: Path) -> None:
    """The baseline keeps the sweep's rates; the report draws both curves from them."""
    path = tmp_path / "curve.png"
    drawn = plot_serving_curves(sweep_run(ONE_SEQUENCE), BASELINE, path)
    row = "serve-fastgen-1200-128 fp32"
    assert drawn == {row: curve_of(ONE_SEQUENCE), f"{row}, baseline": curve_of(DEFAULT_SERVER)}
    assert drawn[f"{row}, baseline"][0] == (1.82, 385, 175) and path.stat().st_size > 10_000
    assert not plot_serving_curves(replace(sweep_run([]), cells=()), BASELINE, tmp_path / "x.png")


def test_repeated_sweeps_give_one_sample_each_and_an_interval_with_a_spread() -> None:
    """`serve --repeat 3`: each figure has a sample per sweep (a sweep with no effective
    throughput adds none of it), every sweep's rows are kept, and the gate's bootstrap interval
    is no longer a single point."""
    again = [
        replace(r, ttft_ms={**r.ttft_ms, "p99": r.ttft_ms["p99"] * 1.2}) for r in DEFAULT_SERVER
    ]
    repeats = [(again, effective_throughput(again, SLA)), (ONE_SEQUENCE, 0.0)]
    cell = sweep_cell(SETTINGS, SLA, DEFAULT_SERVER, 6.0, repeats)
    assert cell.figures[EFFECTIVE] == (6.0, 6.0)
    assert cell.figures[TTFT_P99] == (385.0, 462.0, 11900.0)
    details = cell.details["serving"]
    assert [len(r["rates"]) for r in details["repeats"]] == [len(again), len(ONE_SEQUENCE)]
    assert read_sweep(cell.details) == (SLA, DEFAULT_SERVER, 6.0)  # the first sweep: the curve
    assert "repeats" not in sweep_cell(SETTINGS, SLA, DEFAULT_SERVER, 6.0).details["serving"]
    run = replace(sweep_run(DEFAULT_SERVER), cells=(cell,))
    ttft = judge(run, BASELINE).cells[0].metric(TTFT_P99)
    assert ttft is not None and ttft.estimate is not None
    assert ttft.estimate.low < ttft.estimate.high


def test_a_sweep_under_another_sla_or_design_is_incomparable_in_one_line(tmp_path: Path) -> None:
    """The effective throughput is the SLA's and the p99s are the lowest rate's: a sweep under
    another SLA, --rates, --requests, --refine or --burstiness is not judged against the
    baseline (neither passed nor failed on figures) and the comparison says why in one line;
    the gate then fails for want of a judged cell, and `diff BEFORE AFTER` refuses (exit 2)."""
    changes = [
        (sweep_run(DEFAULT_SERVER, sla=Sla(ttft_s=1.0)), "the sweep's SLA (TTFT <= 1 s, >= 4"),
        (sweep_run(DEFAULT_SERVER, sla=Sla(attainment=0.5)), "50%) is not the baseline's ("),
        (sweep_run(DEFAULT_SERVER, settings={**SETTINGS, "rates": "2,4"}), "--rates 2,4 is not"),
        (sweep_run(DEFAULT_SERVER, settings={**SETTINGS, "requests": 6}), "--requests 6 is not"),
        (sweep_run(DEFAULT_SERVER, settings={**SETTINGS, "refine": 0}), "--refine 0 is not"),
    ]
    for run, said in changes:
        verdict = judge(run, BASELINE)
        (cell,) = verdict.cells
        assert cell.status == "incomparable" and said in cell.message, cell.message
        assert verdict.failed and said in verdict.unjudged
        text = render_comparison(verdict)
        assert " ".join(text.split()).count(cell.message) == 1, text  # said once
        assert all(len(line) <= 100 for line in text.splitlines())
    # The same sweep, its rates written in another order: judged as before.
    same = sweep_run(DEFAULT_SERVER, settings={**SETTINGS, "rates": "inf, 16,8,4,2"})
    assert judge(same, BASELINE).cells[0].status == "same"
    # A baseline that kept no SLA or settings (accepted before they were compared) still judges.
    old = replace(BASELINE, cells=tuple(replace(c, details={}) for c in BASELINE.cells))
    assert judge(changes[0][0], old).cells[0].status == "same"
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    save_run(sweep_run(DEFAULT_SERVER), before)
    save_run(changes[0][0], after)
    done = bloomperf("diff", str(before), str(after))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
    assert "cannot judge these results: the sweep's SLA (TTFT <= 1 s" in done.stderr


def test_a_serving_report_draws_only_plots_with_data_and_its_trend(tmp_path: Path) -> None:
    """A serving-only run gets no ms/token, memory or load-time plot (it has none of those
    figures), and with a history its trend draws the sweep's judged figures over the nights:
    here the p99 TTFT 1.6 times higher from the sixth night on."""
    history = tmp_path / "history"
    for i in range(9):
        run = scaled(sweep_run(DEFAULT_SERVER), EFFECTIVE, 1 + 0.02 * (i % 3))
        run = scaled(run, TTFT_P99, 1.6 if i >= 5 else 1 - 0.02 * (i % 2))
        add_night(history, on_night(run, night(i)), tmp_path)
    report = write_report(run, BASELINE, tmp_path / "out", history)
    drawn = {p.name for p in report.plots}
    assert drawn == {"ratio_heatmap.png", "serving_curve.png", "trend.png"}, drawn
    assert {p.name for p in (tmp_path / "out").glob("*.png")} == drawn
    page = (tmp_path / "out" / "report.md").read_text()
    assert "## ms per token" not in page and "## Peak memory" not in page
    assert "## Load time" not in page and "(trend.png)" in page
    assert "## Time to first token" not in page and "## Energy per token" not in page
    nights = load_history(history)
    panels = [(cell.backend, metric) for cell, metric in trend_panels(nights)]
    assert panels == [("serve-fastgen-1200-128", m) for m in (EFFECTIVE, TTFT_P99, ITL_P99)]
    # The history's change detection watches the registry's watched metrics, these included:
    # the TTFT step is found at the sixth night, worse; nothing else moved.
    found = [(c.cell, c.metric, c.night, c.worse) for c in report.changes]
    assert found == [(run.cells[0].id, TTFT_P99, 5, True)], found
