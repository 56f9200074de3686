"""Rehearse one step of benchmarks/gpu_check.sh on this CPU against another machine's facts.

    python benchmarks/rehearse.py --facts benchmarks/h200-facts.json -- COMMAND...

gpu_check.sh under ``GPU_CHECK_REHEARSAL=h200`` puts this in front of every step's command line,
so the step's arguments are exactly the GPU run's. What needs no CUDA runs for real, through
bloomperf's own code, against the facts file (one place: the NVML answers in record_nvml.py's
format, the host's RAM, disk and cores, its packages and tools):

- ``-m bloomperf doctor|topology|predict ...``: the real command; NVML is the facts' replay
  (tests/nvml_replay.py) and the host figures are the facts'.
- ``-m bloomperf run ...``: the same arguments as ``run --dry-run`` (the plan: groups, skips,
  device maps on the replayed GPU), then the disk the checkpoint build needs and the host RAM
  each group's loading path holds, by bloomperf's own size functions. It stops before loading:
  that needs CUDA.
- ``benchmarks/record_nvml.py ...``: the recorder against the replayed NVML.
- ``-m pip install ... WHEELS``: pip's own resolution, ``--dry-run`` for Python 3.12 on
  manylinux x86-64, and each wheel's requirements against the packages the machine has.
- ``-c "...InferenceBuilder().load..."``: DeepSpeed's own arch flags under the step's
  TORCH_CUDA_ARCH_LIST; it stops before nvcc.
- ``-c "import transformers; ..."``: the version the reference kit puts first on the path.

Exit status: 0 the step would get past this on the machine; 1 it would not (why: one line);
2 bad usage or a command this rehearsal does not know.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the NVML replay lives with the CPU suite

from nvml_replay import NvmlReplay  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

import bloomperf.catalog.topology as topology_module  # noqa: E402
import bloomperf.doctor.nvml  # noqa: E402,F401
from bloomperf.catalog.topology import HOST_RAM_GIVEN, HostRam  # noqa: E402
from bloomperf.cli import build_parser  # noqa: E402
from bloomperf.cli import main as bloomperf_main  # noqa: E402
from bloomperf.cli.doctor import doctor_options, print_report, run_checks  # noqa: E402
from bloomperf.config.backend import BackendOptions  # noqa: E402
from bloomperf.doctor.host import HostFacts  # noqa: E402
from bloomperf.harness.options import resolve_options  # noqa: E402

STOPPED = "rehearse: stopped here on CPU:"


def load_facts(path: Path) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(path.read_text())
    for key in ("nvml", "host", "python", "packages", "tools", "libraries"):
        if key not in facts:
            raise SystemExit(f"rehearse: {path}: no {key!r} entry")
    return facts


# Modules that imported a seam by name: each gets the machine's answer too.
NVML_USERS = ("bloomperf.catalog.topology", "bloomperf.doctor.nvml")
# Modules that judge host RAM through catalog.topology.host_ram.
HOST_RAM_USERS = ("bloomperf.backends.ds_inference",)
VERSION_USERS = (
    "bloomperf.backends.compat",
    "bloomperf.backends.ds_inference",
    "bloomperf.backends.ds_ranks",
    "bloomperf.backends.ds_zero",
    "bloomperf.doctor.libraries",
)


def use_machine(facts: dict[str, Any], kit: dict[str, str]) -> None:
    """bloomperf's seams to a machine, given the facts' answers: the NVML module, the host's
    CPU/RAM figures, and the installed packages (the machine's, the kit's over them)."""
    replay = NvmlReplay(facts["nvml"])
    host = facts["host"]
    cpu = {"cpu_model": host["cpu_model"], "cpu_cores": host["cpu_cores"]}
    packages: dict[str, str | None] = {
        canonicalize_name(k): v for k, v in facts["packages"].items()
    }
    packages |= {k: v for k, v in kit.items() if "@" not in k}

    def load_nvml() -> Any:
        return replay

    def installed_version(distribution: str) -> str | None:
        name = canonicalize_name(distribution)
        return (packages[name] or "0") if name in packages else None

    for name in NVML_USERS:
        vars(sys.modules[name])["load_nvml"] = load_nvml
    for name in HOST_RAM_USERS:
        vars(importlib.import_module(name))["host_ram"] = lambda given=None: machine_ram(
            facts, given
        )
    for name in VERSION_USERS:
        vars(importlib.import_module(name))["installed_version"] = installed_version
    topology_module.cpu_facts = lambda: {**cpu, "ram_bytes": int(host["ram_bytes"])}


def machine_ram(facts: dict[str, Any], given: int | None) -> HostRam:
    """The RAM bloomperf would judge by there: ``--host-ram`` when given; else MemTotal, which
    the facts may put in doubt with no figure (a Firecracker guest's starts far lower than the
    machine's RAM and grows with use): then the cautious case, nothing."""
    if given:
        return HostRam(given, HOST_RAM_GIVEN)
    host = facts["host"]
    doubt = str(host.get("memtotal_doubt") or "")
    memtotal = host.get("memtotal_bytes", None if doubt else host["ram_bytes"])
    return HostRam(int(memtotal or 0), "MemTotal", doubt)


def host_facts(facts: dict[str, Any], given_ram: int | None) -> HostFacts:
    ram = machine_ram(facts, given_ram)
    return HostFacts(
        ram_bytes=ram.bytes,
        disk_free_bytes=int(facts["host"]["disk_bytes"]),
        ram_doubt=ram.doubt,
        ram_source=ram.source,
    )


# ---- bloomperf's own commands -------------------------------------------------------------


def rehearse_bloomperf(argv: list[str], facts: dict[str, Any], kit: dict[str, str]) -> int:
    use_machine(facts, kit)
    command = argv[0] if argv else ""
    if command == "doctor":
        args = build_parser().parse_args(argv)
        libraries = library_facts(facts, kit)
        options = doctor_options(args)
        host = host_facts(facts, options.host_ram)
        checks = run_checks(options, facts=libraries, host=host)
        return print_report(checks, args.format, args.device)
    if command in ("topology", "predict"):
        return bloomperf_main(argv)
    if command == "run":
        return rehearse_run(argv, facts)
    print(f"rehearse: bloomperf {command!r} has no rehearsal", file=sys.stderr)
    return 2


def library_facts(facts: dict[str, Any], kit: dict[str, str]) -> dict[str, Any]:
    """What doctor's library probe would find there once the kit is installed."""
    torch = facts["libraries"]["torch"]
    found: dict[str, Any] = {"torch": torch, "build_tree": facts["libraries"].get("build_tree")}
    if "deepspeed" in kit:
        nvcc = facts["tools"].get("nvcc")
        ds: dict[str, Any] = {"version": kit["deepspeed"], "ninja": bool(facts["tools"]["ninja"])}
        if nvcc:
            ds["nvcc"] = nvcc
            mismatch = deepspeed_cuda_mismatch(nvcc, torch["cuda"])
            if mismatch:
                ds["mismatch"] = mismatch
        else:
            ds["nvcc_error"] = "no nvcc on the machine"
        found["deepspeed"] = ds
    else:
        found["deepspeed"] = {"error": "ModuleNotFoundError: No module named 'deepspeed'"}
    if "bitsandbytes" in kit:
        found["bitsandbytes"] = bitsandbytes_library(kit, torch["cuda"])
    else:
        found["bitsandbytes"] = {"error": "ModuleNotFoundError: No module named 'bitsandbytes'"}
    return found


def deepspeed_cuda_mismatch(nvcc: str, torch_cuda: str) -> str | None:
    """DeepSpeed's rule (op_builder/builder.py assert_no_cuda_mismatch): equal major.minor, or
    both in its table of compatible minors for that major."""
    if nvcc == ".".join(torch_cuda.split(".")[:2]):
        return None
    from deepspeed.ops.op_builder.builder import cuda_minor_mismatch_ok

    major = int(nvcc.split(".")[0])
    allowed = cuda_minor_mismatch_ok.get(major, [])
    if nvcc in allowed and torch_cuda in allowed:
        return None
    return f"Installed CUDA version {nvcc} does not match the version torch was compiled with"


def bitsandbytes_library(kit: dict[str, str], torch_cuda: str) -> dict[str, Any]:
    """bitsandbytes loads libbitsandbytes_cuda<torch's CUDA>.so: is it in the kit's wheel?"""
    wheel = Path(kit["bitsandbytes@path"])
    wanted = f"libbitsandbytes_cuda{torch_cuda.replace('.', '')}.so"
    names = [Path(n).name for n in zipfile.ZipFile(wheel).namelist()]
    if wanted in names:
        return {"backend": "CUDA", "cuda_library": True, "library": wanted}
    return {
        "backend": "CUDA",
        "cuda_library": False,
        "library": "",
        "load": [f"{wheel.name} has no {wanted} (torch's CUDA {torch_cuda})"],
    }


def rehearse_run(argv: list[str], facts: dict[str, Any]) -> int:
    """The plan of this exact run on the replayed GPU, then its disk and RAM needs."""
    from bloomperf.cli.plan import run_dry

    args = build_parser().parse_args([*argv, "--dry-run", "--format", "json"])
    plan_text = io.StringIO()
    code = run_dry(args, out=plan_text)
    if code != 0:
        print(f"rehearse: the plan refused this run (exit {code})")
        return code
    plan = json.loads(plan_text.getvalue())
    options = resolve_options(vars(args)).backend_options()
    print(plan_summary(plan, options))
    failures = [
        *disk_needs(plan, facts, options),
        *ram_needs(plan),
        *group_ram(plan, facts, options),
    ]
    if not args.allow_incomplete:
        failures += nothing_measured(plan)
    for line in failures:
        print(f"rehearse: {line}")
    if any(line.startswith("fail") for line in failures):
        return 1
    print(f"{STOPPED} loading the model and generating need CUDA")
    return 0


def plan_summary(plan: dict[str, Any], options: BackendOptions) -> str:
    lines = [f"plan on {plan['topology']}, device {plan['device']}:"]
    for group in plan.get("groups", []):
        load = group_load(group, options)
        cells = group.get("cells", [])
        skipped = [c for c in cells if c.get("skip")]
        batches = ",".join(str(c["batch_size"]) for c in cells)
        lines.append(
            f"  {group.get('backend')} {group.get('dtype')} x{group.get('world_size')}: "
            f"batches {batches}, {len(skipped)} skipped"
            + (f" ({skipped[0]['skip']})" if skipped else "")
            + (f"; load {load}" if load else "")
        )
    return "\n".join(lines)


def group_load(group: dict[str, Any], options: BackendOptions) -> str | None:
    """How a DeepSpeed tensor-parallel group loads (backends/ds_inference.load_path), and
    whether that writes DeepSpeed's copy of the checkpoint first; None for other backends."""
    from bloomperf.backends import backend_class
    from bloomperf.backends.ds_inference import TensorParallelBackend, load_path

    cls = backend_class(str(group.get("backend")))
    if not issubclass(cls, TensorParallelBackend):
        return None
    path = load_path(cls.kernel_inject, int(group["world_size"]), options, str(group["dtype"]))
    return f"{path}, writes DeepSpeed's copy" if path == "unsharded" else f"{path}, no copy"


def disk_needs(plan: dict[str, Any], facts: dict[str, Any], options: BackendOptions) -> list[str]:
    """What the run writes on the machine's disk: the checkpoint build (catalog/checkpoints'
    own rule), and DeepSpeed's torch-pickle copy of it (as large again) where a group loads
    the ``unsharded`` way (backends/ds_checkpoint)."""
    from bloomperf.catalog.checkpoints import TORCH_BYTES, check_free_space
    from bloomperf.catalog.models import MODEL_SHAPES
    from bloomperf.core.errors import BloomperfError

    name, layers = plan["model"]["name"], int(plan["model"]["layers"])
    shape = MODEL_SHAPES.get(name)
    if shape is None:
        return [f"ok    disk: {name} is an existing checkpoint, nothing to build"]
    disk = int(facts["host"]["disk_bytes"])
    try:
        check_free_space(shape, layers, Path("/"), disk)
    except BloomperfError as exc:
        return [f"fail  disk: {exc}"]
    model = shape.parameters(layers) * TORCH_BYTES[shape.checkpoint_dtype]
    copies = [g for g in plan.get("groups", []) if "writes" in (group_load(g, options) or "")]
    need = model * (2 if copies else 1)
    what = f"{shape.name} with {layers} layers" + (" and DeepSpeed's copy" if copies else "")
    if need * 1.05 > disk:
        return [f"fail  disk: {what} need {need / 2**30:.1f} GiB of the {disk / 2**30:.0f} GiB"]
    return [f"ok    disk: {what} ({need / 2**30:.1f} GiB) fit the {disk / 2**30:.0f} GiB disk"]


def nothing_measured(plan: dict[str, Any]) -> list[str]:
    """A run whose every cell the plan skips measures nothing: bloomperf run exits 1 there."""
    cells = [c for g in plan.get("groups", []) for c in g.get("cells", [])]
    if cells and all(c.get("skip") for c in cells):
        return [f"fail  nothing measured: every cell skipped ({cells[0]['skip']})"]
    return []


def ram_needs(plan: dict[str, Any]) -> list[str]:
    """Cells the plan skips for host RAM on the facts' RAM would be skipped there too."""
    lines = []
    for group in plan.get("groups", []):
        for cell in group.get("cells", []):
            reason = str(cell.get("skip") or "")
            if "RAM" in reason:
                where = f"{group.get('backend')} {group.get('dtype')} batch {cell['batch_size']}"
                lines.append(f"fail  ram: {where}: {reason}")
    return lines


def group_ram(plan: dict[str, Any], facts: dict[str, Any], options: BackendOptions) -> list[str]:
    """Each DeepSpeed tensor-parallel group's host-RAM need on the machine, by bloomperf's own
    rule (ds_checkpoint.host_bytes_for, host_memory_reason) from the model's shape (the
    checkpoint is not built here), against the RAM bloomperf would judge by there: a group the
    machine would skip for host RAM fails the rehearsal."""
    from bloomperf.backends import backend_class
    from bloomperf.backends.ds_checkpoint import host_bytes_for, host_memory_reason
    from bloomperf.backends.ds_inference import TensorParallelBackend, load_path
    from bloomperf.catalog.dtypes import DTYPE_TABLE
    from bloomperf.catalog.models import MODEL_SHAPES
    from bloomperf.catalog.weights import embedding_bytes, layer_bytes

    shape = MODEL_SHAPES.get(plan["model"]["name"])
    if shape is None:
        return []
    layers = int(plan["model"]["layers"])
    ram = machine_ram(facts, options.host_ram)
    lines = []
    for group in plan.get("groups", []):
        cls = backend_class(str(group["backend"]))
        if not issubclass(cls, TensorParallelBackend):
            continue
        dtype, ranks = str(group["dtype"]), int(group["world_size"])
        path = load_path(cls.kernel_inject, ranks, options, dtype)
        total = shape.parameters(layers) * DTYPE_TABLE[dtype].load_bytes
        largest = max(embedding_bytes(shape, dtype), layer_bytes(shape, dtype))
        need = host_bytes_for(path, total, largest, ranks, not cls.kernel_inject)
        reason = host_memory_reason(need, ranks, path, ram.bytes, ram.doubt)
        where = f"{group['backend']} {dtype} x{ranks}"
        if reason:
            lines.append(f"fail  ram: {where} ({ram.describe()}): {reason}")
    return lines


# ---- the other steps ----------------------------------------------------------------------


def rehearse_record_nvml(argv: list[str], facts: dict[str, Any]) -> int:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import record_nvml

    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    replay = NvmlReplay(facts["nvml"])
    replay.nvmlInit()
    recording = record_nvml.record(replay)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(recording, indent=2) + "\n")
    total = recording["devices"][0]["memory_total"] // 2**20
    print(f"record_nvml: {recording['recorded']['gpus']} ({total} MiB) -> {args.output}")
    return 0


def kit_wheels(words: list[str]) -> list[Path]:
    return [Path(w) for w in words if w.endswith(".whl")]


def kit_versions(wheels: list[Path]) -> dict[str, str]:
    """name -> version of each wheel (and name@path -> the file)."""
    found: dict[str, str] = {}
    for wheel in wheels:
        name, version = wheel.name.split("-")[:2]
        found[canonicalize_name(name)] = version
        found[f"{canonicalize_name(name)}@path"] = str(wheel)
    return found


def rehearse_pip(argv: list[str], facts: dict[str, Any], python: str) -> int:
    """pip's own dry-run for the machine's Python and platform; then the kit's requirements."""
    wheels = kit_wheels(argv)
    absent = [str(w) for w in wheels if not w.is_file()]
    if not wheels or absent:
        where = absent[0] if absent else "the install's folder"
        print(f"rehearse: no kit wheels at {where}: the run fails there too")
        return 1
    version = facts["python"]["version"]
    short = "".join(version.split(".")[:2])
    command = [python, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps"]
    command += ["--only-binary=:all:", "--python-version", short, "--implementation", "cp"]
    command += ["--abi", f"cp{short}", "--abi", "abi3", "--abi", "none"]
    command += [f"--platform=manylinux_2_{n}_x86_64" for n in range(17, 40)]
    command += ["--target", tempfile.mkdtemp(prefix="rehearse-pip-"), "--quiet", "--report", "-"]
    done = subprocess.run(
        [*command, *map(str, wheels)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        print(f"rehearse: pip refuses the kit for Python {version}: {last_line(done.stderr)}")
        return 1
    report = json.loads(done.stdout)
    names = sorted(i["metadata"]["name"] for i in report["install"])
    print(f"pip (dry run, Python {version}, manylinux x86-64): would install {', '.join(names)}")
    problems = unmet_requirements(wheels, facts)
    for line in problems:
        print(f"rehearse: {line}")
    return 1 if problems else 0


def unmet_requirements(wheels: list[Path], facts: dict[str, Any]) -> list[str]:
    """Each wheel's Requires-Dist (for Python 3.12 on Linux) against the machine's packages and
    the kit's own wheels: the install is --no-deps, so a missing one fails only at import."""
    have: dict[str, str | None] = {canonicalize_name(k): v for k, v in facts["packages"].items()}
    have.update({k: v for k, v in kit_versions(wheels).items() if "@" not in k})
    env = {"python_version": ".".join(facts["python"]["version"].split(".")[:2])}
    env |= {"python_full_version": facts["python"]["version"], "sys_platform": "linux"}
    env |= {"platform_machine": "x86_64", "platform_system": "Linux", "extra": ""}
    env |= {"os_name": "posix", "implementation_name": "cpython"}
    problems = []
    for wheel in wheels:
        for requirement in wheel_requirements(wheel):
            if requirement.marker and not requirement.marker.evaluate(env):
                continue
            name = canonicalize_name(requirement.name)
            version = have.get(name, "absent")
            if version == "absent":
                problems.append(f"{wheel.name} needs {requirement}: not on the machine")
            elif version and not requirement.specifier.contains(
                base_version(version), prereleases=True
            ):
                problems.append(f"{wheel.name} needs {requirement}; the machine has {version}")
    return problems


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def base_version(version: str) -> str:
    return version.split("+")[0]


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def rehearse_jit() -> int:
    """DeepSpeed's InferenceBuilder as the step calls it, up to the flags it gives nvcc."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    jobs = os.environ.get("MAX_JOBS")
    if not arch or not jobs:
        print(f"rehearse: the JIT build needs TORCH_CUDA_ARCH_LIST and MAX_JOBS ({arch}, {jobs})")
        return 1
    # The CUDA builder the GPU's accelerator picks (this CPU's accelerator offers none).
    from deepspeed.ops.op_builder.transformer_inference import InferenceBuilder

    builder = InferenceBuilder()
    builder.jit_mode = True
    builder.compute_capability_args()
    built_for = os.environ["TORCH_CUDA_ARCH_LIST"]
    if not re.fullmatch(r"9\.0(\+PTX)?", built_for):
        print(f"rehearse: the JIT build targets {built_for}, not the H200's 9.0 alone")
        return 1
    print(f"JIT build: arch {built_for}, MAX_JOBS={jobs}, {len(builder.sources())} sources")
    print(f"{STOPPED} nvcc and the GPU are not here")
    return 0


def rehearse_python_c(code: str, kit: dict[str, str]) -> int:
    if "InferenceBuilder" in code:
        return rehearse_jit()
    if code.startswith("import transformers"):
        print(f"transformers {kit.get('transformers', 'not in the kit')}")
        return 0 if "transformers" in kit else 1
    print("rehearse: this python -c has no rehearsal", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", required=True, type=Path)
    parser.add_argument("--kit", action="append", default=[], type=Path, help="wheel folders")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    facts = load_facts(args.facts)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    kit = kit_versions([w for folder in args.kit for w in sorted(folder.glob("*.whl"))])
    python, rest = command[0], command[1:]
    if rest[:2] == ["-m", "bloomperf"]:
        return rehearse_bloomperf(rest[2:], facts, kit)
    if rest[:3] == ["-m", "pip", "install"]:
        return rehearse_pip(rest[3:], facts, python)
    if rest[:1] == ["benchmarks/record_nvml.py"]:
        return rehearse_record_nvml(rest[1:], facts)
    if rest[:1] == ["-c"] and len(rest) > 1:
        return rehearse_python_c(rest[1], kit)
    print(f"rehearse: no rehearsal for {' '.join(command)[:80]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
