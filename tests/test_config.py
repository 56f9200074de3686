"""Typed configuration: every option of the table reaches a typed field, every option a backend
or the launcher reads is one the table defines, reading an undefined one is a mypy error, and
the worker spec survives its trip to the worker."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from bloomperf.config.backend import (
    AccelerateOptions,
    BackendOptions,
    DsZeroOptions,
    TensorParallelOptions,
)
from bloomperf.config.run import LaunchOptions, RunConfig
from bloomperf.harness.matrix import Cell
from bloomperf.harness.multinode import encode_spec
from bloomperf.harness.options import OPTIONS, resolve_options
from bloomperf.harness.protocol import MalformedMessage, WorkerSpec
from bloomperf.harness.session import Session
from bloomperf.harness.worker import SPEC_DATA_ENV, SPEC_ENV, read_spec

ROOT = Path(__file__).resolve().parents[1]
RUN_FIELDS = get_type_hints(RunConfig)


def test_every_option_of_the_table_is_a_run_config_field_of_its_parsers_type() -> None:
    assert sorted(o.name for o in OPTIONS) == sorted(f.name for f in fields(RunConfig))
    for option in OPTIONS:
        parsed = get_type_hints(option.parse)["return"]
        field_type = RUN_FIELDS[option.name]
        # The field is the parser's type, or that type or None where the device decides.
        assert field_type in (parsed, parsed | None), (option.name, parsed, field_type)


def test_the_help_states_the_default_run_config_holds() -> None:
    """Each default is RunConfig's; the help's "[default]" must say the same."""
    for option in OPTIONS:
        default = getattr(RunConfig(), option.name)
        if default is None or isinstance(default, bool):
            continue  # decided by the device, or a switch: the help says what it does
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        assert f"[{shown}" in option.help, (option.name, shown, option.help)


@pytest.mark.parametrize(
    "part", [AccelerateOptions, TensorParallelOptions, DsZeroOptions, BackendOptions, LaunchOptions]
)
def test_every_option_a_backend_or_the_launcher_reads_is_defined(part: type) -> None:
    names = {f.name for f in fields(part)}
    assert names <= set(RUN_FIELDS), names - set(RUN_FIELDS)


def every_option_set(tmp_path: Path) -> RunConfig:
    """A RunConfig with every backend and launch option off its default."""
    shards = tmp_path / "tp2"
    shards.mkdir()
    (shards / "bloomperf-shard.json").write_text('{"tp": 2, "kernel_inject": false}')
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3}}')
    (tmp_path / "hosts").write_text("n1 slots=2\n")
    return resolve_options(
        {
            "max_memory": "even",
            "offload": "disk",
            "offload_folder": str(tmp_path / "offload"),
            "tp": "2",
            "sharded": str(shards),
            "load": "hf",
            "ds_load_once": "1",
            "host_ram": "128GiB",
            "zero_offload": "nvme",
            "nvme_path": str(tmp_path),
            "ds_config": str(tmp_path / "ds.json"),
            "threads": "3",
            "hostfile": str(tmp_path / "hosts"),
            "num_nodes": "1",
            "launcher": "slurm",
            "launcher_args": "--exclusive",
            "ssh_port": "2222",
            "include": "n1",
            "exclude": "n2",
            "master_addr": "n1",
            "control_addr": "10.0.0.1",
        },
        env={},
    )


def test_the_backends_and_the_launcher_get_every_value_the_run_was_given(tmp_path: Path) -> None:
    config = every_option_set(tmp_path)
    for part, defaults in (
        (config.backend_options(), BackendOptions()),
        (config.launch_options(), LaunchOptions()),
    ):
        for f in fields(part):
            value, given = getattr(part, f.name), getattr(config, f.name)
            # Paths travel to the worker as text (JSON); the launcher keeps them as paths.
            assert value in (given, str(given) if isinstance(given, Path) else given), f.name
            assert value != getattr(defaults, f.name), f"{f.name}: the default, not the value"


MYPY_CASES = {
    # An option forwarded but never defined (accelerate once read "cpu_memory").
    "request.options.cpu_memory": '"BackendOptions" has no attribute "cpu_memory"',
    # A backend's own options hold only what it reads.
    "AccelerateOptions().zero_offload": '"AccelerateOptions" has no attribute "zero_offload"',
    # ds-zero once read "ranks", dslaunch "num_gpus": neither is an option.
    "spec.options.ranks": '"BackendOptions" has no attribute "ranks"',
    "LaunchOptions().num_gpus": '"LaunchOptions" has no attribute "num_gpus"',
    "RunConfig().sharded_dir": '"RunConfig" has no attribute "sharded_dir"',
    # The controls: defined options type-check.
    "request.options.zero_offload": None,
    "(spec.options.sharded, spec.memory_limit_bytes, RunConfig().slowdown_percent)": None,
}


def test_reading_an_undefined_option_is_a_mypy_error(tmp_path: Path) -> None:
    """mypy on the real modules (others' imports skipped, so it takes a second)."""
    pytest.importorskip("mypy")
    lines = [
        "from bloomperf.backends.base import LoadRequest",
        "from bloomperf.config.backend import AccelerateOptions",
        "from bloomperf.config.run import LaunchOptions, RunConfig",
        "from bloomperf.harness.protocol import WorkerSpec",
        "def read(request: LoadRequest, spec: WorkerSpec) -> None:",
        *(f"    print({expression})" for expression in MYPY_CASES),
    ]
    snippet = tmp_path / "reads.py"
    snippet.write_text("\n".join(lines) + "\n")
    modules = ["config/backend.py", "backends/base.py", "config/run.py", "harness/protocol.py"]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-site-packages", "--follow-imports=skip"]
        + ["--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(snippet)]
        + [str(ROOT / "bloomperf" / m) for m in modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = done.stdout.splitlines()
    for number, message in enumerate(MYPY_CASES.values(), start=len(lines) - len(MYPY_CASES) + 1):
        found = [e for e in errors if e.startswith(f"{snippet}:{number}:")]
        if message is None:
            assert found == [], found
        else:
            assert len(found) == 1 and message in found[0], (number, errors)
    assert len(errors) == sum(m is not None for m in MYPY_CASES.values()), errors


def full_spec() -> WorkerSpec:
    return WorkerSpec(
        backend="ds-zero",
        dtype="bf16",
        checkpoint="/models/bloom",
        device="cuda",
        new_tokens=100,
        control="127.0.0.1:4242",
        options=BackendOptions(
            tp=8, zero_offload="cpu", ds_config={"zero_optimization": {"stage": 3}}, load="hf"
        ),
        memory_limit_bytes=6 * 2**30,
        slowdown_percent=10.0,
    )


def test_the_worker_spec_round_trips_by_file_and_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = full_spec()
    assert WorkerSpec.from_json(spec.to_json()) == spec
    (tmp_path / "spec.json").write_text(spec.to_json())
    monkeypatch.delenv(SPEC_DATA_ENV, raising=False)
    monkeypatch.setenv(SPEC_ENV, str(tmp_path / "spec.json"))
    assert read_spec() == spec
    monkeypatch.setenv(SPEC_DATA_ENV, encode_spec(spec.to_json().encode()))  # other nodes
    assert read_spec() == spec


@pytest.mark.parametrize(
    "change",
    [
        {"ranks": 2},  # a field this version does not know
        {"options": {"cpu_memory": "10GiB"}},  # an option no backend defines
    ],
)
def test_an_unknown_field_in_a_worker_spec_is_refused(change: dict[str, Any]) -> None:
    import json

    data = {**json.loads(full_spec().to_json()), **change}
    with pytest.raises(MalformedMessage, match=r"worker spec: .*unexpected keyword"):
        WorkerSpec.from_json(json.dumps(data))


def test_a_sessions_group_spec_carries_the_options_to_the_worker(tmp_path: Path) -> None:
    config = resolve_options(
        {
            "zero_offload": "cpu",
            "tp": "2",
            "threads": "2",
            "memory_limit": "6GiB",
            "slowdown_percent": "5",
            "load_timeout": "60",
            "output": str(tmp_path / "r.json"),
        },
        env={},
    )
    session = Session.prepare(config)
    spec = session.group_spec(Cell("ds-zero", "fp32", 1))
    assert (spec.options.zero_offload, spec.options.tp, spec.world_size) == ("cpu", 2, 2)
    assert (spec.launch.threads, spec.load_timeout_s, spec.cell_timeout_s) == (2, 60.0, 1800.0)
    assert (spec.memory_limit_bytes, spec.slowdown_percent) == (6 * 2**30, 5.0)
