"""A rank of a test group: runs DeepSpeed backends on the tiny model and compares their greedy
tokens with the plain model's (not a test; tests/test_ds_backends.py starts it).

Env: BLOOMPERF_PROBE_MODEL (checkpoint folder), BLOOMPERF_PROBE_CASES (JSON list of
[backend, options]), BLOOMPERF_PROBE_DIR (where each rank writes rank<N>.json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bloomperf.backends import backend_class
from bloomperf.backends.base import LoadRequest
from bloomperf.catalog.workload import build_inputs
from bloomperf.config.backend import BackendOptions
from bloomperf.harness.rankenv import adopt_launcher_rank

NEW_TOKENS = 12
BATCHES = (1, 8)


def reference_outputs(model_dir: Path) -> dict[int, tuple[Any, Any]]:
    """Inputs and plain-model greedy outputs, computed before any DeepSpeed config exists
    (ZeRO's HfDeepSpeedConfig would otherwise partition this model too)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    plain = AutoModelForCausalLM.from_pretrained(str(model_dir))
    cases = {}
    for batch in BATCHES:
        inputs = build_inputs(tokenizer, batch, plain.device)
        cases[batch] = (inputs, plain.generate(**inputs, **generate_kwargs()))
    return cases


def generate_kwargs() -> dict[str, Any]:
    return {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}


def run_case(name: str, options: dict[str, Any], model_dir: Path, refs: dict[int, Any]) -> dict:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    backend = backend_class(name)()
    request = LoadRequest(model_dir, "fp32", "cpu", rank, world, BackendOptions(**options))
    backend.prepare(request)
    backend.load(request)
    result: dict[str, Any] = {
        "backend": name,
        "options": options,
        "details": backend.details(),
        **where(),
        # The rendezvous port names the group's shared-memory segments (a 1-rank group picks
        # its own, once joined): the test looks for leftovers of this port only.
        "master_port": os.environ["MASTER_PORT"],
    }
    for batch, (inputs, expected) in refs.items():
        output = backend.generate(inputs["input_ids"], inputs["attention_mask"], generate_kwargs())
        new = output[:, -NEW_TOKENS:]
        result[f"bs{batch}"] = {
            "equal": bool(output.shape == expected.shape and (output == expected).all()),
            "distinct_new_tokens": len(set(new[0].tolist())),
        }
    if os.environ.get("BLOOMPERF_PROBE_CHECKS"):  # test_ds_backends' one-node groups
        # The output check's forward pass, run after the generates as every cell runs it.
        logits = backend.next_token_logits(inputs["input_ids"], inputs["attention_mask"])
        result["check_logits_finite"] = bool(logits.isfinite().all())
        if name == "ds-zero" and result["details"]["zero_stage"] == 3:
            result["zero3_after_generate"] = zero3_state(backend.model)
    backend.close()
    return result


def zero3_state(model: Any) -> dict[str, int]:
    """What ZeRO-3 left after generate: parameters still gathered, and parameters whose
    (released, empty) data is an inference tensor, which autograd refuses afterwards."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    parameters = list(model.parameters())
    return {
        "parameters": len(parameters),
        "gathered": sum(p.ds_status != ZeroParamStatus.NOT_AVAILABLE for p in parameters),
        "inference_tensors": sum(
            p.data.is_inference() or p.ds_tensor.is_inference() for p in parameters
        ),
    }


def read_cases_file() -> str:
    """Multi-node groups pass the cases as a file: a JSON value cannot travel in .deepspeed_env."""
    return Path(os.environ["BLOOMPERF_PROBE_CASES_FILE"]).read_text()


def where() -> dict[str, str]:
    """The address this rank's ssh session arrived at (the hostfile entry it was started for)."""
    ssh = os.environ.get("SSH_CONNECTION", "").split()
    return {
        "ssh_to": ssh[2] if len(ssh) == 4 else "-",
        "node_rank": os.environ.get("CROSS_RANK") or os.environ.get("SLURM_NODEID", ""),
        "slurm_node": os.environ.get("SLURMD_NODENAME", "-"),
    }


def main() -> None:
    adopt_launcher_rank()  # srun sets SLURM_PROCID, not RANK
    model_dir = Path(os.environ["BLOOMPERF_PROBE_MODEL"])
    cases = json.loads(os.environ.get("BLOOMPERF_PROBE_CASES") or read_cases_file())
    refs = reference_outputs(model_dir)
    results = [run_case(name, options, model_dir, refs) for name, options in cases]
    rank = int(os.environ.get("RANK", "0"))
    out = Path(os.environ["BLOOMPERF_PROBE_DIR"]) / f"rank{rank}.json"
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
