"""A measurement run: plan the cells, serve each (backend, dtype) group from one worker group,
record every cell as soon as it is measured. Shared by ``bloomperf run`` and the pytest plugin.
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from bloomperf.backends import backend_class
from bloomperf.launch import GroupSpec
from bloomperf.matrix import Cell, Group, plan_groups
from bloomperf.models import PreparedModel, resolve_model
from bloomperf.options import add_cli_options, resolve_options
from bloomperf.results import (
    CellResult,
    ModelInfo,
    Outcome,
    RunResult,
    WorkloadInfo,
    save_run,
)
from bloomperf.runner import GroupRunner, Measure, measure_plainly
from bloomperf.table import render_run_table
from bloomperf.topology import Topology, detect_topology, environment_fingerprint
from bloomperf.workload import PROMPTS

DEFAULT_MODEL = {"cpu": "tiny", "cuda": "bloom-176b"}
# Options that travel to the worker (and its backend) in the worker spec.
WORKER_OPTIONS = (
    "max_memory",
    "offload",
    "offload_folder",
    "memory_limit",
    "tp",
    "zero_offload",
    "nvme_path",
    "hostfile",
    "num_nodes",
    "slowdown_percent",
)


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def resolve_device(requested: str | None, topology: Topology) -> str:
    if requested in (None, "auto"):
        return topology.device
    return str(requested)


def worker_options(options: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready backend options: paths as strings, the memory cap under its worker name."""
    selected: dict[str, Any] = {}
    for name in WORKER_OPTIONS:
        value = options.get(name)
        if value is None:
            continue
        selected[name] = str(value) if isinstance(value, Path) else value
    if "memory_limit" in selected:
        selected["memory_limit_bytes"] = selected.pop("memory_limit")
    if selected.get("offload") == "disk" and "offload_folder" not in selected:
        selected["offload_folder"] = tempfile.mkdtemp(prefix="bloomperf-offload-")
    return selected


@dataclass
class Session:
    """One run's state: the plan, a runner per group, and the results so far (saved each cell)."""

    options: dict[str, Any]
    topology: Topology
    device: str
    model: PreparedModel
    groups: list[Group]
    run: RunResult
    output: Path | None = None

    @classmethod
    def prepare(cls, options: dict[str, Any], topology: Topology | None = None) -> Session:
        topology = topology or detect_topology()
        device = resolve_device(options.get("device"), topology)
        name = options.get("model") or DEFAULT_MODEL[device]
        model = resolve_model(name, options.get("layers"), options.get("cache_dir"))
        run = RunResult(
            model=ModelInfo(model.name, str(model.path), model.layers, model.parameters),
            workload=WorkloadInfo(
                new_tokens=options.get("new_tokens") or 100,
                cycles=options.get("cycles") or 5,
                warmup=options.get("warmup") or 1,
                prompts=PROMPTS,
            ),
            topology=topology.id,
            environment=environment_fingerprint(topology),
            started_at=utc_now(),
        )
        groups = plan_groups(options, device)
        return cls(options, topology, device, model, groups, run, options.get("output"))

    def runner(self, group: Group) -> GroupRunner:
        backend = backend_class(group.backend)
        visible = len(self.topology.gpus)
        spec = GroupSpec(
            backend=group.backend,
            dtype=group.dtype,
            checkpoint=self.model.path,
            device=self.device,
            new_tokens=self.run.workload.new_tokens,
            world_size=backend.world_size(self.device, visible, self.options),
            options=worker_options(self.options),
            load_timeout_s=self.options.get("load_timeout") or 1800.0,
            cell_timeout_s=self.options.get("cell_timeout") or 1800.0,
        )
        return GroupRunner(spec, warmup=self.run.workload.warmup, cycles=self.run.workload.cycles)

    def skip_reason(self, group: Group) -> str | None:
        backend = backend_class(group.backend)
        return backend.unmet_requirement(group.dtype, self.device, worker_options(self.options))

    def record(self, cell: CellResult) -> CellResult:
        """Keep the cell and rewrite the results file at once: a crash loses nothing measured."""
        self.run = self.run.with_cell(cell)
        if self.output is not None:
            save_run(self.run, self.output)
        return cell

    def finish(self) -> RunResult:
        self.run = replace(self.run, finished_at=utc_now(), complete=True)
        if self.output is not None:
            save_run(self.run, self.output)
        return self.run


def skipped(cell: Cell, reason: str) -> CellResult:
    return CellResult(cell.backend, cell.dtype, cell.batch_size, Outcome.SKIPPED, message=reason)


def run_group(
    session: Session, group: Group, measure: Measure = measure_plainly, probe: bool = False
) -> Iterator[CellResult]:
    """Measure a group's cells in ascending batch size on one worker group, yielding each."""
    reason = session.skip_reason(group)
    if reason:
        for cell in group.cells():
            yield session.record(skipped(cell, reason))
        return
    runner = session.runner(group)
    oom_at: int | None = None
    try:
        for cell in group.cells():
            if oom_at is not None and not probe:
                yield session.record(skipped(cell, f"batch {oom_at} already ran out of memory"))
                continue
            result = session.record(runner.run_cell(cell.batch_size, measure))
            if result.outcome is Outcome.OOM:
                oom_at = oom_at or cell.batch_size
            yield result
    finally:
        runner.stop()


# ---- `bloomperf run` ----------------------------------------------------------------------


def describe(cell: CellResult) -> str:
    if cell.outcome is Outcome.OK and cell.ms_per_token is not None:
        return f"{cell.ms_per_token:.3f} ms/token"
    first_line = cell.message.splitlines()[0] if cell.message else ""
    return f"{cell.outcome.value.upper()} {first_line}".strip()


def run_command(args: Any, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    options = resolve_options(vars(args))
    if options.get("output") is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        options["output"] = Path("results") / f"bloomperf-{stamp}.json"
    from bloomperf.lock import hold_device_lock

    session = Session.prepare(options)
    total = sum(len(g.batch_sizes) for g in session.groups)
    print(
        f"bloomperf: {session.model.name} ({session.model.parameters:,} parameters, "
        f"{session.model.layers} layers) on {session.topology.id}, {total} cells",
        file=err,
    )
    done = 0
    with hold_device_lock(session.topology.id, enabled=not options.get("no_lock")):
        try:
            for group in session.groups:
                for cell in run_group(session, group, probe=bool(options.get("probe"))):
                    done += 1
                    print(
                        f"  [{done}/{total}] {cell.id:<28} {describe(cell)}", file=err, flush=True
                    )
        except KeyboardInterrupt:
            print(f"bloomperf: interrupted; {done} cells saved in {session.output}", file=err)
            return 130
    run = session.finish()
    print(render_run_table(run), file=out)
    print(f"results: {session.output}", file=out)
    failed = [c for c in run.cells if c.outcome in (Outcome.ERROR, Outcome.TIMEOUT)]
    return 1 if failed else 0


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="measure the matrix (tiny model on CPU without a GPU) and print the table",
        description="Measure load time, ms/token and peak memory for backend × dtype × batch.",
    )
    add_cli_options(parser)
    parser.set_defaults(func=run_command)
