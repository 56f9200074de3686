"""`bloomperf run --dry-run` in text says what its JSON says: every figure of the plan, stated here
line by line from the JSON of the same plan (GiB to one decimal, a GPU's prediction against its
limit, a CPU's against the process RSS, the device map per device, a refused or offloaded map)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bloomperf.cli import build_parser
from bloomperf.cli.plan import run_dry
from bloomperf.core.errors import BloomperfError

GiB = 1024**3


@pytest.fixture(autouse=True)
def _wide_and_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLOOMPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("COLUMNS", "2000")  # no line folded to the terminal


def plan_both(*argv: str) -> tuple[int, dict[str, Any], list[str], str]:
    """The same plan as JSON and as text, with the exit status and what went to stderr."""
    said = []
    for form in ("json", "text"):
        args = build_parser().parse_args(["run", "--dry-run", "--format", form, *argv])
        out, err = io.StringIO(), io.StringIO()
        said.append((run_dry(args, out, err), out.getvalue(), err.getvalue()))
    (code, text_json, err), (text_code, text, _) = said
    assert code == text_code
    # Each plan draws a free rendezvous port of its own: a thing the two may differ in.
    # So do a multi-node group's id and scratch folder.
    drawn = {
        r"(--master_port\W+)\d+": r"\1PORT",
        r"(BLOOMPERF_GROUP_ID\W+)[0-9a-f]+": r"\1ID",
        r"bloomperf-group-[\w-]+": "GROUP",
    }
    for pattern, replacement in drawn.items():
        text_json, text = (re.sub(pattern, replacement, t) for t in (text_json, text))
    return code, json.loads(text_json), text.rstrip("\n").split("\n"), err


def gib(value: int, places: int = 1) -> str:
    return f"{value / GiB:.{places}f}"


def expected_cell(cell: dict[str, Any]) -> list[str]:
    predicted = cell["predicted"]
    if "peak_per_gpu_bytes" in predicted:
        fits = "fits" if predicted["fits"] else f"OOM ({predicted['limit']})"
        said = f"predicted peak {gib(predicted['peak_per_gpu_bytes'])} GiB/GPU, {fits}; "
    elif "predicted_peak_bytes" in predicted:
        scope = predicted["predicted_peak_scope"]
        said = f"predicted peak {gib(predicted['predicted_peak_bytes'], 2)} GiB {scope}; "
    else:
        said = f"no prediction: {predicted['error']}; " if "error" in predicted else ""
    lines = [f"  bs{cell['batch_size']}: {said}{'skip' if cell['skip'] else 'run'}"]
    return lines + ([f"      skip: {cell['skip']}"] if cell["skip"] else [])


def expected_map(device_map: dict[str, Any] | None) -> list[str]:
    if device_map is None:
        return []
    if "error" in device_map:
        return [f"  device map: {device_map['error']}"]
    given = ", ".join(
        f"{k}: {gib(v) if isinstance(v, int) else v}" for k, v in device_map["max_memory"].items()
    )
    lines = [f"  max_memory (GiB, as passed): {given}"]
    for device, entry in device_map["devices"].items():
        modules = ", ".join(entry["modules"])
        lines.append(f"  device map {device}: {gib(entry['bytes'])} GiB: {modules}")
    if device_map["refused"]:
        lines.append(f"  transformers would refuse this map: {device_map['refused']}")
    elif device_map["offloaded"]:
        lines.append(f"  offloaded off the GPUs (slow): {len(device_map['offloaded'])} modules")
    return lines


def expected_text(plan: dict[str, Any]) -> list[str]:
    model = plan["model"]
    lines = [
        f"plan: {model['name']} ({model['layers']} layers, {model['parameters']:,} parameters) "
        f"on {plan['topology']} ({plan['planned_for']}), device {plan['device']}",
        f"{len(plan['groups'])} worker groups, one model load each",
    ]
    for group in plan["groups"]:
        devices = ",".join(map(str, group["devices"])) or {"cuda": "the hostfile's nodes"}.get(
            plan["device"], "cpu"
        )
        env = "".join(f"{k}={v} " for k, v in sorted(group["launch"]["env"].items()))
        lines += [
            "",
            f"{group['backend']} {group['dtype']}: {group['world_size']} rank(s), "
            f"devices {devices}",
            f"  launch: {env}{' '.join(group['launch']['argv'])}",
            *expected_map(group["device_map"]),
        ]
        for cell in group["cells"]:
            lines += expected_cell(cell)
    return lines


@pytest.mark.parametrize(
    "argv",
    [
        # accelerate's maps on 8 GPUs, bf16 and int8; one cell past the memory
        ["--model", "bloom-176b", "--topology", "8xA100-80GB", "--backends", "accelerate",
         "--dtypes", "bf16,int8", "--batch-sizes", "1,64"],
        # a map sent to disk in bf16 (slow, accepted)
        ["--model", "bloom-176b", "--topology", "8xA100-40GB", "--backends", "accelerate",
         "--dtypes", "bf16", "--batch-sizes", "1"],
        # a map transformers refuses: exit 1
        ["--model", "bloom-176b", "--topology", "8xA100-80GB", "--backends", "accelerate",
         "--dtypes", "int8", "--batch-sizes", "1",
         "--max-memory", ",".join(f"{i}:20GiB" for i in range(8))],
        # DeepSpeed's launch on the GPUs it names, a group per batch size where asked
        ["--topology", "8xA100-80GB", "--backends", "ds-autotp,ds-zero", "--dtypes", "fp16",
         "--batch-sizes", "1,8"],
        # a cell predicted out of memory, and a backend this transformers cannot run: skipped
        ["--topology", "4xA100-80GB", "--backends", "ds-inference", "--dtypes", "fp16",
         "--batch-sizes", "1"],
        # two nodes: the launch names no local GPU
        ["--model", "bloom-176b", "--topology", "2x8xA100-80GB", "--hostfile", "HOSTFILE",
         "--backends", "ds-zero", "--dtypes", "fp16", "--batch-sizes", "1"],
        # accelerate over two nodes: no map (one process drives every GPU)
        ["--model", "bloom-176b", "--topology", "2x8xA100-80GB", "--hostfile", "HOSTFILE",
         "--backends", "accelerate", "--dtypes", "bf16", "--batch-sizes", "1"],
        # this machine's CPU: the process RSS predicted
        ["--device", "cpu", "--backends", "accelerate", "--dtypes", "fp32",
         "--batch-sizes", "1,2"],
    ],
    ids=["maps", "disk", "refused", "deepspeed", "skipped", "two-nodes", "no-map", "cpu"],
)  # fmt: skip
def test_the_text_says_what_the_json_says(argv: list[str], tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-1 slots=8\nnode-2 slots=8\n")
    code, plan, text, err = plan_both(*(str(hostfile) if a == "HOSTFILE" else a for a in argv))
    assert text == expected_text(plan)
    where = argv[argv.index("--topology") + 1] if "--topology" in argv else None
    assert plan["planned_for"] == (f"--topology {where}" if where else "this machine")
    if plan["device"] == "cuda" and "accelerate" in argv and where and where.startswith("2x"):
        one_node = "Accelerate runs on one node only (one process drives every GPU)"
        assert [g["device_map"] for g in plan["groups"]] == [{"error": one_node}]
    assert plan["loads"] == len(plan["groups"])
    assert code == int(any((g["device_map"] or {}).get("refused") for g in plan["groups"]))
    for group in plan["groups"]:
        refused = (group["device_map"] or {}).get("refused")
        said = f"bloomperf: would not load: {group['backend']} {group['dtype']}: {refused}"
        assert (said in err) == bool(refused)
    assert err.startswith(
        f"bloomperf: planning {plan['model']['name']} ({plan['model']['layers']} layers) on "
        f"{plan['topology']}, "
    )


@pytest.mark.parametrize("nodes", [2, 3])
def test_a_plan_of_several_nodes_needs_their_hostfile(nodes: int) -> None:
    args = build_parser().parse_args(["run", "--dry-run", "--topology", f"{nodes}x8xA100-80GB"])
    with pytest.raises(BloomperfError) as refused:
        run_dry(args, io.StringIO(), io.StringIO())
    assert str(refused.value) == (
        f"--topology {nodes}x8xA100-80GB: {nodes} nodes are planned from a DeepSpeed hostfile: "
        "add --hostfile FILE (one line per node: HOST slots=GPUS)"
    )


def test_visible_devices_narrow_a_planned_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    argv = ["--model", "bloom-176b", "--topology", "8xA100-80GB", "--dtypes", "fp16"]
    _, plan, text, _ = plan_both(*argv, "--backends", "ds-zero", "--batch-sizes", "1")
    assert plan["gpus"] == [0, 1] and plan["groups"][0]["devices"] == [0, 1]
    assert text == expected_text(plan)


def test_max_memory_reaches_each_cells_prediction() -> None:
    argv = ["--model", "bloom-176b", "--topology", "8xA100-80GB", "--backends", "accelerate"]
    argv += ["--dtypes", "bf16", "--batch-sizes", "1"]
    caps = ",".join(f"{i}:50GiB" for i in range(8))
    _, default, _, _ = plan_both(*argv)
    _, capped, text, _ = plan_both(*argv, "--max-memory", caps)
    (before,), (after,) = (p["groups"][0]["cells"] for p in (default, capped))
    assert before["predicted"]["per_gpu_bytes"] != after["predicted"]["per_gpu_bytes"]
    assert text == expected_text(capped)
