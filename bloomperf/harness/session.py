"""A measurement run: plan the cells, serve each (backend, dtype) group from one worker group,
record every cell as soon as it is measured. Shared by ``bloomperf run`` and the pytest plugin.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bloomperf.analysis.roofline import efficiency
from bloomperf.analysis.scenario import SuiteCell
from bloomperf.analysis.suite_prediction import cell_prediction, predicted_skip_reason
from bloomperf.analysis.utilisation import cell_utilisation
from bloomperf.backends import backend_class
from bloomperf.backends.base import Backend
from bloomperf.catalog.checkpoints import PreparedModel, resolve_model
from bloomperf.catalog.devices import VisibleDevice, group_indices
from bloomperf.catalog.fingerprint import environment_fingerprint
from bloomperf.catalog.leftovers import owned_temp_folder, remove_dead_run_folders
from bloomperf.catalog.topology import Topology, detect_topology
from bloomperf.catalog.workload import PROMPTS
from bloomperf.config.backend import BackendOptions
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.core.formatting import utc_now
from bloomperf.core.jsonfile import remove_dead_temps
from bloomperf.harness.launch import GroupSpec
from bloomperf.harness.matrix import Cell, Group, plan_groups
from bloomperf.harness.runner import GroupRunner, Measure, measure_plainly
from bloomperf.harness.sinks import ResultsFile, Sink, tell
from bloomperf.store.baseline import Baseline, beyond_boundary, oom_boundary
from bloomperf.store.baseline.search import find_baseline, refuse_output_among_baselines
from bloomperf.store.results import CellResult, ModelInfo, Outcome, RunResult, WorkloadInfo
from bloomperf.store.results.output import keep_previous

DEFAULT_MODEL = {"cpu": "tiny", "cuda": "bloom-176b"}


def resolve_device(requested: str | None, topology: Topology) -> str:
    if requested in (None, "auto"):
        return topology.device
    return str(requested)


def backend_options(config: RunConfig) -> BackendOptions:
    """What the run's backends read; disk offload without a folder gets a temporary one."""
    folder = None
    if config.offload == "disk" and config.offload_folder is None:
        folder = owned_temp_folder("offload")
    return config.backend_options(folder)


@dataclass
class Session:
    """One run's state: the plan, a runner per group, and the results so far (saved each cell)."""

    options: RunConfig
    topology: Topology
    device: str
    model: PreparedModel
    groups: list[Group]
    run: RunResult
    output: Path | None = None

    @classmethod
    def prepare(
        cls,
        options: RunConfig,
        topology: Topology | None = None,
        model: PreparedModel | None = None,
        sinks: Sequence[Sink] = (),
    ) -> Session:
        """``model``: already resolved (``run --dry-run`` plans without building one);
        ``sinks``: told of each cell and of the finish, beside the results file."""
        if options.output is not None:  # bad usage, refused before any model is built
            refuse_output_among_baselines(options.output, options.baselines)
        if topology is None and options.hostfile is not None:
            from bloomperf.harness.nodes import read_cluster  # every node, read on the node

            topology, _ = read_cluster(options.launch_options())
        topology = topology or detect_topology()
        device = resolve_device(options.device, topology)
        if device == "cuda" and any(g.uuid for g in topology.gpus):  # detected, not planned
            refuse_own_cuda_context(topology)
        if model is None:
            name = options.model or DEFAULT_MODEL[device]
            model = resolve_model(name, options.layers, options.cache_dir)
        run = RunResult(
            model=ModelInfo(model.name, str(model.path), model.layers, model.parameters),
            workload=WorkloadInfo(
                new_tokens=options.new_tokens,
                cycles=options.cycles,
                warmup=options.warmup,
                prompts=PROMPTS,
            ),
            topology=topology.id,
            environment=environment_fingerprint(topology),
            started_at=utc_now(),
            synthetic=synthetic_reason(options),
        )
        groups = plan_groups(options, device)
        baseline = find_baseline(topology.id, model.name, options.baselines)
        session = cls(
            options,
            topology,
            device,
            model,
            groups,
            run,
            options.output,
            baseline,
            backend_options=backend_options(options),
            sinks=tuple(sinks),
        )
        remove_dead_run_folders()  # those of killed runs, in $TMPDIR
        if session.output is not None:
            remove_dead_temps(session.output.parent)  # any name: killed runs' names differ
        if session.output is not None and keep_previous(session.output) is None:
            # An unwritable output fails now, not after a cell; an existing one is kept aside
            # and left in place until this run's first cell.
            ResultsFile(session.output).save(run)
        return session

    baseline: Baseline | None = None
    backend_options: BackendOptions = field(default_factory=BackendOptions)
    active: GroupRunner | None = None
    active_batch: int | None = None  # the batch size the active group was started for
    oom_at: dict[tuple[str, str], int] = field(default_factory=dict)
    ok_at: dict[tuple[str, str], int] = field(default_factory=dict)  # largest batch that ran
    sinks: tuple[Sink, ...] = ()  # beside the results file (bloomperf.harness.sinks)
    sink_failures: list[str] = field(default_factory=list)  # one line each, reported at the end

    def runner(self, cell: Cell) -> GroupRunner:
        """The runner of the cell's group; the previous group's workers are stopped first, so
        two models never share the devices."""
        if self.active is not None and self.serves(self.active, cell):
            return self.active
        self.stop()
        spec = self.group_spec(cell)
        self.active = GroupRunner(
            spec, warmup=self.run.workload.warmup, cycles=self.run.workload.cycles
        )
        self.active_batch = cell.batch_size
        return self.active

    def serves(self, runner: GroupRunner, cell: Cell) -> bool:
        """Whether the running group may serve ``cell``: same (backend, dtype), and the same
        batch size where the backend needs a group per batch (Backend.group_per_batch)."""
        if runner.spec.group != cell.group:
            return False
        if not backend_class(cell.backend).group_per_batch(self.backend_options):
            return True
        return self.active_batch == cell.batch_size

    def group_spec(self, cell: Cell) -> GroupSpec:
        """How the worker group serving ``cell``'s (backend, dtype) is started: ranks, GPUs,
        options, timeouts."""
        backend = backend_class(cell.backend)
        world_size = self.world_size(backend)
        return GroupSpec(
            backend=cell.backend,
            dtype=cell.dtype,
            checkpoint=self.model.path,
            device=self.device,
            new_tokens=self.run.workload.new_tokens,
            world_size=world_size,
            options=self.backend_options,
            launch=self.options.launch_options(),
            memory_limit_bytes=self.options.memory_limit,
            slowdown_percent=self.options.slowdown_percent,
            load_timeout_s=self.options.load_timeout,
            cell_timeout_s=self.options.cell_timeout,
            devices=group_gpus(
                self.topology, self.device, self.multinode, cell.backend, world_size
            ),
            log_dir=logs_dir(self.output) if self.output is not None else None,
            python=backend.interpreter(),
        )

    def world_size(self, backend: type[Backend]) -> int:
        """Ranks of the backend's group: under a hostfile it may span every node's GPUs (the
        topology lists one node's)."""
        nodes = self.topology.nodes if self.multinode else 1
        visible = len(self.topology.gpus) * nodes
        return backend.world_size(self.device, visible, self.backend_options)

    @property
    def multinode(self) -> bool:
        return self.options.hostfile is not None

    def skip_reason(self, cell: Cell) -> str | None:
        """Why a cell is not run: the stack cannot, or it is beyond a known OOM boundary."""
        backend = backend_class(cell.backend)
        options = self.backend_options
        reason = backend.unmet_requirement(cell.dtype, self.device, options)
        reason = reason or backend.host_memory_reason(
            self.model.path, self.world_size(backend), cell.dtype, options
        )
        if reason or self.options.probe:
            return reason
        oom_at = self.oom_at.get(cell.group)
        if oom_at is not None and cell.batch_size > oom_at:
            return f"batch {oom_at} already ran out of memory (--probe runs it anyway)"
        if self.baseline is not None and beyond_boundary(
            self.baseline, cell.backend, cell.dtype, cell.batch_size
        ):
            boundary = oom_boundary(self.baseline, cell.backend, cell.dtype)
            return (
                f"beyond the baseline's OOM boundary (OOM at batch {boundary} in "
                f"{self.baseline.path}; --probe runs it anyway)"
            )
        if self.baseline is None:
            return predicted_skip_reason(
                self.suite_cell(cell.backend, cell.dtype, cell.batch_size),
                self.batch_sizes(cell.group),
                self.ok_at.get(cell.group),
            )
        return None

    def suite_cell(self, backend: str, dtype: str, batch: int) -> SuiteCell:
        """A cell of this session as the memory model and the roofline see it."""
        model, new_tokens = self.model, self.run.workload.new_tokens
        return SuiteCell(
            model.shape, model.layers, self.topology.id, backend, dtype, batch, new_tokens
        )

    def batch_sizes(self, group: tuple[str, str]) -> tuple[int, ...]:
        for planned in self.groups:
            if (planned.backend, planned.dtype) == group:
                return planned.batch_sizes
        return ()

    def measure_cell(self, cell: Cell, measure: Measure = measure_plainly) -> CellResult:
        """Measure (or skip) one cell and record it."""
        reason = self.skip_reason(cell)
        if reason:
            return self.record(skipped(cell, reason))
        result = self.runner(cell).run_cell(cell.batch_size, measure)
        result = self.record(with_prediction(result, self))
        if result.outcome is Outcome.OOM:
            self.oom_at.setdefault(cell.group, cell.batch_size)
        if result.outcome is Outcome.OK:
            self.ok_at[cell.group] = max(cell.batch_size, self.ok_at.get(cell.group, 0))
        return result

    def record(self, cell: CellResult) -> CellResult:
        """Keep the cell and rewrite the results file at once (a crash loses nothing measured),
        then tell the other sinks, whose failures are kept for the end."""
        self.run = self.run.with_cell(cell)
        if self.output is not None:
            ResultsFile(self.output).cell_recorded(cell, self.run)
        self.sink_failures += tell(self.sinks, "cell_recorded", cell, self.run)
        return cell

    def stop(self) -> None:
        if self.active is not None:
            self.active.stop()
        self.active = None

    def abort(self) -> None:
        """Interrupted (Ctrl-C, a signal): kill the group now; every measured cell is saved."""
        if self.active is not None:
            self.active.abort()
        self.active = None
        self.remove_scratch()

    def remove_scratch(self) -> None:
        """The temporary disk-offload folder this session made (a given one is the user's)."""
        made = self.backend_options.offload_folder
        if made and self.options.offload_folder is None:
            shutil.rmtree(made, ignore_errors=True)

    def finish(self) -> RunResult:
        """Stop the workers and mark the run complete; ``bloomperf.harness.finish`` saves it
        and tells the sinks."""
        self.stop()
        self.remove_scratch()
        self.run = replace(self.run, finished_at=utc_now(), complete=True)
        return self.run


def refuse_own_cuda_context(topology: Topology, nvml: Any = None) -> None:
    """The controller (bloomperf run, or the pytest process of the GPU matrix) must hold no CUDA
    context: NVML's device figures would then include it in every peak on that GPU. Whatever
    touches a GPU in the controller's process belongs in a child process."""
    from bloomperf.catalog.topology import load_nvml
    from bloomperf.measure.nvml_sampler import gpus_holding

    try:
        nvml = nvml if nvml is not None else load_nvml()
    except ImportError:
        return
    held = gpus_holding(nvml, os.getpid(), [g.index for g in topology.gpus])
    if held:
        raise BloomperfError(
            f"this process (PID {os.getpid()}) holds a CUDA context on GPU "
            f"{', '.join(map(str, held))}: every NVML peak there would include it; create "
            "no CUDA tensor in the controller or the pytest process (use a child process)"
        )


def logs_dir(output: Path) -> Path:
    """Every worker log of a run, in one folder beside its results (the nightly uploads it)."""
    return Path(f"{output}.logs")


def with_prediction(result: CellResult, session: Session) -> CellResult:
    """Add the memory model's prediction and the roofline efficiency to a measured cell."""
    cell = session.suite_cell(result.backend, result.dtype, result.batch_size)
    predicted = cell_prediction(cell)
    bound = predicted.get("roofline_ms_per_token")
    if bound and result.ms_per_token:
        predicted["efficiency_percent"] = efficiency(result.ms_per_token, bound)
    if result.outcome is Outcome.OK:
        steps = result.steps
        predicted |= cell_utilisation(
            cell,
            steps.ttft_ms if steps else None,
            steps.tpot_ms if steps else None,
        )
    factor = result.details.get("aggregate_batch_factor")
    if isinstance(factor, int) and factor > 1 and result.ms_per_token:
        # ZeRO ranks all ran the same batch in lock-step; given independent inputs each would
        # have produced its own tokens at the same cost (the blog's note on its ZeRO script).
        predicted["aggregate_ms_per_token"] = result.ms_per_token / factor
    return replace(result, details={**result.details, **predicted}) if predicted else result


def group_gpus(
    topology: Topology, device: str, multinode: bool, backend_name: str, world_size: int
) -> tuple[VisibleDevice, ...]:
    """This node's GPUs for one group: every visible one for accelerate, else one per rank
    (a multi-node group's ranks are placed by DeepSpeed's launcher from the hostfile)."""
    if device != "cuda" or not topology.gpus or multinode:
        return ()
    visible = [g.visible() for g in topology.gpus]
    spans = backend_class(backend_name).spans_visible_gpus
    chosen = group_indices([d.index for d in visible], world_size, spans)
    return tuple(d for d in visible if d.index in chosen)


def synthetic_reason(options: RunConfig) -> str:
    """Why this run's figures are not real measurements, recorded in its results."""
    percent = options.slowdown_percent
    return f"a {percent:g} % slowdown injected (--slowdown-percent)" if percent else ""


def lock_key(
    topology: Topology, options: RunConfig | None = None, device: str | None = None
) -> str:
    """The devices a run occupies: its GPUs by UUID (runs on disjoint GPUs do not block each
    other; a MIG instance locks its whole GPU), or the CPU. With ``options``: exactly the GPUs
    its groups use (``--tp 4`` on 8 visible GPUs leaves the other 4 to another run). With
    ``device`` and no groups to plan (a served comparison, whose vLLM takes every visible GPU):
    the CPU, or every GPU."""
    gpus = topology.gpus
    device = device or resolve_device(options.device if options else None, topology)
    if device == "cpu":
        return "cpu"  # a CPU run on a GPU host leaves its GPUs to the GPU runs
    if options is not None and options.hostfile is None:
        used: set[int] = set()
        for group in plan_groups(options, device):
            backend = backend_class(group.backend)
            world_size = backend.world_size(device, len(gpus), options.backend_options())
            used |= {
                d.index for d in group_gpus(topology, device, False, group.backend, world_size)
            }
        gpus = tuple(g for g in gpus if g.index in used)
    return ",".join(g.uuid or str(g.index) for g in gpus) or "cpu"


def skipped(cell: Cell, reason: str) -> CellResult:
    return CellResult(cell.backend, cell.dtype, cell.batch_size, Outcome.SKIPPED, message=reason)


def all_cells(session: Session) -> Iterator[Cell]:
    for group in session.groups:
        yield from group.cells()
