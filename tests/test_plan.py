"""`bloomperf run --dry-run`: the plan from the config alone, through the libraries' planners."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from bloomperf.catalog.devices import plan_visible
from bloomperf.cli import build_parser
from bloomperf.cli.plan import run_dry
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import backend_options

REFUSAL = "Some modules are dispatched on the CPU or the disk"


def dry_run(*argv: str) -> tuple[int, dict[str, Any], str]:
    args = build_parser().parse_args(["run", "--dry-run", "--format", "json", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = run_dry(args, out, err)

    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return code, json.loads(out.getvalue(), parse_constant=refuse), err.getvalue()


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("BLOOMPERF_CACHE", str(cache))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return cache


@pytest.mark.parametrize(
    "where", [["--topology", "8xA100-80GB"], ["--topology", "1xH200-141GB", "--layers", "2"]]
)
def test_accelerate_plans_keep_every_module_on_a_gpu(where: list[str], tmp_path: Path) -> None:
    code, plan, err = dry_run(
        "--model", "bloom-176b", *where, "--backends", "accelerate", "--dtypes", "bf16,int8"
    )
    assert code == 0, err
    assert (plan["kind"], plan["schema_version"]) == ("bloomperf-plan", 1)
    assert [(g["backend"], g["dtype"]) for g in plan["groups"]] == [
        ("accelerate", "bf16"),
        ("accelerate", "int8"),
    ]
    for group in plan["groups"]:
        device_map = group["device_map"]
        assert device_map["offloaded"] == [] and device_map["refused"] == ""
        assert set(device_map["devices"]) <= {str(g) for g in plan["gpus"]}
        placed = sum(entry["bytes"] for entry in device_map["devices"].values())
        if group["dtype"] == "bf16":
            assert placed == plan["model"]["parameters"] * 2
        else:  # more than a byte per parameter: the embedding stays fp16
            assert placed > plan["model"]["parameters"] * 1
        assert group["launch"]["argv"][-2:] == ["-m", "bloomperf.harness.worker"]
        for cell in group["cells"]:
            assert len(cell["predicted"]["per_gpu_bytes"]) == len(plan["gpus"])
    assert "device map on the meta device" in err
    assert not (tmp_path / "cache").exists()  # nothing built: the plan comes from the config


def test_a_map_transformers_would_refuse_is_shown_and_exits_1() -> None:
    code, plan, err = dry_run(
        "--model", "bloom-176b", "--topology", "8xA100-80GB", "--backends", "accelerate",
        "--dtypes", "int8", "--max-memory", ",".join(f"{i}:20GiB" for i in range(8)),
    )  # fmt: skip
    assert code == 1
    device_map = plan["groups"][0]["device_map"]
    assert device_map["refused"].startswith(REFUSAL)
    assert "disk" in device_map["devices"] and device_map["offloaded"]
    assert f"would not load: accelerate int8: {REFUSAL}" in err


def test_a_map_larger_than_the_gpus_is_lowered_as_on_the_machine() -> None:
    # 8 x 40 GB hold bloom-176b in int8, not in bf16: accelerate (on the machine, where each GPU
    # offers its free memory) sends the last blocks to disk, which bf16 tolerates (slowly).
    code, plan, _ = dry_run(
        "--model", "bloom-176b", "--topology", "8xA100-40GB", "--backends", "accelerate",
        "--dtypes", "bf16,int8", "--batch-sizes", "1",
    )  # fmt: skip
    assert code == 0
    bf16, int8 = (g["device_map"] for g in plan["groups"])
    assert "disk" in bf16["devices"] and bf16["refused"] == ""
    assert int8["offloaded"] == []
    assert max(e["bytes"] for e in int8["devices"].values()) < 40 * 2**30


def test_deepspeed_groups_launch_on_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    code, plan, _ = dry_run(
        "--topology", "8xA100-80GB", "--backends", "ds-autotp", "--dtypes", "fp16"
    )
    assert code == 0
    (group,) = plan["groups"]
    assert group["world_size"] == 4 and group["devices"] == [4, 5, 6, 7]
    argv = group["launch"]["argv"]
    assert argv[argv.index("-m") + 1] == "deepspeed.launcher.runner"
    assert argv[argv.index("--include") + 1] == "localhost:4,5,6,7"  # not --num_gpus 4
    assert group["device_map"] is None
    assert [c["batch_size"] for c in group["cells"]] == [1, 8, 16, 32, 64, 128, 256, 512]


def test_visible_devices_are_parsed_as_cuda_does() -> None:
    assert plan_visible(4, None) == [0, 1, 2, 3]
    assert plan_visible(8, "4,5") == [4, 5]
    assert plan_visible(8, "1,9,2") == [1]  # stops at the first GPU the node lacks
    assert plan_visible(8, "3,3") == [3]
    assert plan_visible(8, "-1") == []


def test_the_cpu_plan_of_this_machine_needs_no_topology() -> None:
    code, plan, _ = dry_run("--device", "cpu", "--backends", "accelerate", "--dtypes", "fp32")
    assert code == 0
    assert plan["device"] == "cpu" and plan["planned_for"] == "this machine"
    (group,) = plan["groups"]
    assert group["device_map"] is None and group["devices"] == []
    assert all(c["predicted"]["predicted_peak_scope"] == "process RSS" for c in group["cells"])


def test_an_unknown_topology_is_a_usage_error() -> None:
    with pytest.raises(BloomperfError, match="--topology: unknown value 'Z80'"):
        dry_run("--topology", "8xZ80")


def test_sharded_and_load_are_options_in_every_spelling(tmp_path: Path) -> None:
    shards = tmp_path / "tp2"
    shards.mkdir()
    (shards / "bloomperf-shard.json").write_text('{"tp": 2, "kernel_inject": false}')
    cli = resolve_options({"sharded": str(shards), "load": "hf"}, env={})
    env = resolve_options({}, env={"BLOOMPERF_SHARDED": str(shards), "BLOOMPERF_LOAD": "hf"})
    ini = resolve_options({}, ini={"sharded": str(shards), "load": "hf"}, env={})
    assert cli.sharded == env.sharded == ini.sharded == shards
    assert backend_options(cli).sharded == str(shards) and backend_options(ini).load == "hf"
    with pytest.raises(BloomperfError, match=r"--bloomperf-sharded: .*shard.json missing"):
        resolve_options({"sharded": str(tmp_path)}, env={}, flag_style="pytest")
    with pytest.raises(BloomperfError, match="environment variable BLOOMPERF_LOAD: unknown value"):
        resolve_options({}, env={"BLOOMPERF_LOAD": "lazy"})


@pytest.mark.parametrize("load_once", [False, True])
def test_the_dry_run_shows_every_group_the_run_starts(load_once: bool) -> None:
    """ds-inference starts a fresh group per batch size (Backend.group_per_batch) unless
    --ds-load-once: the plan lists those groups, and the loads they cost, as the run starts them."""
    from bloomperf.cli.plan import render_text

    batches = [1, 8, 64]
    argv = ["--topology", "8xA100-80GB", "--backends", "ds-inference,ds-autotp"]
    argv += ["--dtypes", "fp16", "--batch-sizes", ",".join(map(str, batches))]
    code, plan, err = dry_run(*argv, *(["--ds-load-once"] if load_once else []))
    assert code == 0, err
    served = [(g["backend"], [c["batch_size"] for c in g["cells"]]) for g in plan["groups"]]
    inference = [b for name, b in served if name == "ds-inference"]
    assert inference == ([batches] if load_once else [[b] for b in batches])
    assert [b for name, b in served if name == "ds-autotp"] == [batches]
    assert plan["loads"] == len(plan["groups"]) == (2 if load_once else 4)
    assert f"{plan['loads']} worker groups, one model load each" in render_text(plan)
