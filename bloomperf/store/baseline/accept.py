"""``bloomperf baseline accept``: measured results written into a baseline.

The run's cells replace the baseline's; untouched cells keep their figures and provenance, and the
run becomes a provenance entry of its own (when, on what hardware and software).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import GIB, utc_now
from bloomperf.core.metrics import metrics
from bloomperf.store.baseline import (
    EXPECT_OK,
    EXPECT_OOM,
    Baseline,
    BaselineCell,
    Expected,
    Provenance,
    expected_figure,
    with_figures,
)
from bloomperf.store.results import CellResult, Outcome, RunResult, table_order

# The fingerprint keys a baseline's provenance keeps beside the package versions.
SOFTWARE_SYSTEM_KEYS = ("python", "driver", "cuda_driver", "cuda_torch", "nccl")
# And the bloomperf checkout it was measured with (from ``provenance.provenance``).
COMMIT_KEY = "bloomperf_commit"
DIRTY_KEY = "bloomperf_dirty"


def accept_run(
    run: RunResult,
    existing: Baseline | None,
    *,
    source: str,
    force: bool = False,
    now: str | None = None,
) -> Baseline:
    """A baseline with ``run``'s cells written over ``existing``'s (or a new one).

    Cells the run did not measure keep their figures and provenance. Cells that errored or timed
    out say nothing about what to expect: the run is refused unless ``force``, and then they are
    left out. Skipped cells are left out too.
    """
    bad = [c for c in run.cells if c.outcome in (Outcome.ERROR, Outcome.TIMEOUT)]
    if bad and not force:
        listed = ", ".join(f"{c.id} ({c.outcome.value})" for c in bad)
        raise BloomperfError(
            f"{source}: refusing cells that did not finish: {listed}; "
            "use --force to accept the rest"
        )
    if existing is not None and not existing.matches_model(run.model.name):
        raise BloomperfError(
            f"{source}: model {run.model.name!r} is not the baseline's {existing.model!r}"
        )
    provenance = provenance_of_run(run, source, now)
    base = existing if existing is not None else new_baseline(run)
    by_id = {c.id: c for c in base.cells}
    for cell in run.cells:
        if cell.outcome in (Outcome.OK, Outcome.OOM):
            by_id[cell.id] = baseline_cell_of(cell, by_id.get(cell.id), run.topology, provenance.id)
    cells = tuple(sorted(by_id.values(), key=table_order))
    used = {c.provenance for c in cells} | {lt.provenance for lt in base.load_times}
    kept = tuple(p for p in base.provenance if p.id in used and p.id != provenance.id)
    return replace(base, cells=cells, provenance=(*kept, provenance))


def new_baseline(run: RunResult) -> Baseline:
    return Baseline(
        topology=run.topology,
        topology_aliases=(),
        topology_description=describe_hardware(run.environment, run.topology),
        model=run.model.name,
        model_aliases=(),
        model_layers=run.model.layers or None,
        new_tokens=run.workload.new_tokens,
        provenance=(),
        cells=(),
    )


# A cell's details a baseline keeps for the report to draw against: a serving sweep's rates
# (the latency–throughput curve). The rest (device maps, predictions) describe one run only.
DRAWN_DETAILS = ("serving",)


def baseline_cell_of(
    cell: CellResult, old: BaselineCell | None, topology: str, provenance: str
) -> BaselineCell:
    """A measured cell as a baseline cell: every registered metric it measured, with the
    registry's tolerance for the topology or the one an existing cell gave it."""
    ok = cell.outcome == Outcome.OK
    cpu = topology.lower().startswith("cpu")
    figures: dict[str, Expected] = {}
    for metric in metrics():
        samples = metric.samples(cell)
        # An OOM cell expects no figure of its own, only its row's load.
        if not samples or not (ok or metric.per_row):
            continue
        kept = expected_figure(old, metric.name).tolerance if old is not None else None
        tolerance = kept if kept is not None else metric.tolerance_for(cpu)
        figures[metric.name] = Expected(statistics.median(samples), tolerance, samples)
    return with_figures(
        BaselineCell(
            backend=cell.backend,
            dtype=cell.dtype,
            batch_size=cell.batch_size,
            outcome=EXPECT_OK if ok else EXPECT_OOM,
            provenance=provenance,
            details={k: v for k, v in cell.details.items() if k in DRAWN_DETAILS},
        ),
        figures,
    )


def provenance_of_run(run: RunResult, source: str, now: str | None) -> Provenance:
    date = run.finished_at or run.started_at or now or utc_now()
    return Provenance(
        id=f"run-{date}",
        source=source,
        date=date,
        hardware=describe_hardware(run.environment, run.topology),
        software=describe_software(run.environment),
    )


def describe_hardware(environment: dict[str, Any], topology: str) -> str:
    """ "8 x NVIDIA A100-SXM4-80GB; AMD EPYC 7763, 256 cores, 2015 GiB RAM" from the fingerprint."""
    parts = []
    gpus = environment.get("gpus")
    if isinstance(gpus, list) and gpus:
        names = Counter(str(g) for g in gpus)
        parts.append(" + ".join(f"{n} x {name}" for name, n in names.items()))
    cpu = environment.get("cpu_model")
    if isinstance(cpu, str) and cpu:
        cores = environment.get("cpu_cores")
        ram = environment.get("ram_bytes")
        text = cpu + (f", {cores} cores" if isinstance(cores, int) else "")
        text += f", {ram / GIB:.0f} GiB RAM" if isinstance(ram, int) else ""
        parts.append(text)
    return "; ".join(parts) or topology


def describe_software(environment: dict[str, Any]) -> dict[str, str]:
    """Package versions, Python, driver and CUDA from the run's environment fingerprint."""
    packages = environment.get("packages")
    software = {str(k): str(v) for k, v in packages.items()} if isinstance(packages, dict) else {}
    for key in SOFTWARE_SYSTEM_KEYS:
        value = environment.get(key)
        if value not in (None, ""):
            software[key] = str(value)
    git = (environment.get("provenance") or {}).get("git") or {}
    if git.get("commit"):  # what the report's "What changed" compares a later run's with
        software[COMMIT_KEY] = str(git["commit"])
        if git.get("dirty") is not None:
            software[DIRTY_KEY] = "yes" if git["dirty"] else "no"
    return software


def software_environment(p: Provenance) -> dict[str, Any]:
    """A provenance entry's software as the fingerprint ``describe_software`` read it from (what
    ``provenance.what_changed`` compares): the system keys, and the rest as packages."""
    software = dict(p.software)
    commit, dirty = software.pop(COMMIT_KEY, None), software.pop(DIRTY_KEY, None)
    system = {k: v for k, v in software.items() if k in SOFTWARE_SYSTEM_KEYS}
    packages = {k: v for k, v in software.items() if k not in SOFTWARE_SYSTEM_KEYS}
    environment = {**system, "packages": packages}
    if commit:
        dirty_flag = None if dirty is None else dirty == "yes"
        environment["provenance"] = {"git": {"commit": commit, "dirty": dirty_flag}}
    return environment
