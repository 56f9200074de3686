"""The report's TTFT, TPOT, percentile and energy plots draw the cells' own stored figures.

The fixture is a real CPU run of the tiny model (``bloomperf run --batch-sizes 1,8``): its
figures are checked against the results JSON as written, not against the code that plots them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from bloomperf.cli.report import write_report
from bloomperf.render.report.latency import write_latency_plots
from bloomperf.store.baseline.accept import accept_run
from bloomperf.store.results import EnergyReading
from bloomperf.store.results.files import read_results
from bloomperf.store.telemetry import Telemetry
from tests.builders import RESULTS, scaled_run

RUN = RESULTS / "cpu.tiny.steps.results.json"
PNG = b"\x89PNG\r\n\x1a\n"


def stored(field: str) -> dict[str, list[tuple[int, float]]]:
    """{row label: [(batch, the field as the JSON file stores it)]}."""
    labels = {"fp32": "Accelerate fp32", "bf16": "Accelerate bf16", "int8": "Accelerate int8"}
    rows: dict[str, list[tuple[int, float]]] = {}
    for cell in json.loads(RUN.read_text())["cells"]:
        rows.setdefault(labels[cell["dtype"]], []).append((cell["batch_size"], cell[field]))
    return {label: sorted(points) for label, points in rows.items()}


def test_ttft_tpot_and_percentiles_plot_the_stored_fields(tmp_path: Path) -> None:
    run = read_results(RUN)
    baseline = accept_run(scaled_run(run, 0.7), None, source="test", now="2026-12-01")
    plots = write_latency_plots(run, baseline, tmp_path)
    assert set(plots.paths) == {"ttft", "tpot", "tail"}
    for path in plots.paths.values():
        data = path.read_bytes()
        assert data[:8] == PNG and len(data) > 20_000, path  # drawn, not an empty frame
    ttft, tpot, tail = plots.series["ttft"], plots.series["tpot"], plots.series["tail"]
    for label, points in stored("ttft_ms").items():
        assert ttft[label] == points
        # The baseline line: the median prefill of the accepted (0.7×) cycles, per batch size.
        cells = sorted(
            (c for c in run.cells if label.endswith(c.dtype)), key=lambda c: c.batch_size
        )
        expected = [
            (c.batch_size, statistics.median(s[0] * 0.7 for s in c.samples_step_ms)) for c in cells
        ]
        got = ttft[f"{label} (baseline)"]
        assert [b for b, _ in got] == [b for b, _ in expected]
        assert all(abs(g - e) < 1e-9 * e for (_, g), (_, e) in zip(got, expected, strict=True))
    for label, points in stored("tpot_ms").items():
        assert tpot[label] == points
        assert tail[f"{label} p50"] == points
    for field, tag in (("tpot_p90_ms", "p90"), ("tpot_p99_ms", "p99")):
        for label, points in stored(field).items():
            assert tail[f"{label} {tag}"] == points


def test_energy_is_skipped_with_the_reason_on_cpu_and_plotted_when_measured(
    tmp_path: Path,
) -> None:
    run = read_results(RUN)
    plots = write_latency_plots(run, None, tmp_path / "cpu")
    assert "energy" not in plots.paths
    assert not (tmp_path / "cpu" / "energy_per_token.png").exists()
    reason = run.cells[0].energy.reason if run.cells[0].energy else ""
    assert reason and reason in plots.notes["energy"]

    measured = replace(
        run,
        cells=tuple(
            replace(c, energy=EnergyReading("rapl", 0.5 * c.batch_size, 1.0, 100 * c.batch_size))
            for c in run.cells
        ),
    )
    plots = write_latency_plots(measured, None, tmp_path / "rapl")
    assert plots.paths["energy"].read_bytes()[:8] == PNG
    assert plots.series["energy"]["Accelerate bf16"] == [(1, 0.005), (8, 0.005)]


def test_the_report_shows_the_plots_the_energy_note_and_the_flags(tmp_path: Path) -> None:
    run = read_results(RUN)
    flagged = replace(run.cells[0], telemetry=Telemetry(samples=3, flags=("thermal-throttled",)))
    report = write_report(run.with_cell(flagged), None, tmp_path)
    markdown = report.markdown.read_text()
    for name in ("ttft.png", "tpot.png", "tpot_percentiles.png"):
        assert f"({name})" in markdown
        assert tmp_path / name in report.plots
    assert "No energy plot" in markdown
    assert f"{flagged.id}: telemetry flags: thermal-throttled" in markdown
    assert "thermal-throttled" in report.html.read_text()
