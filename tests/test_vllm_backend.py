"""vLLM as a --backends backend: its traits (the serving venv's interpreter, no memory model),
its KV cache refusals classified as OOMs from the texts vLLM really raises (read from the
serving venv's installed sources), and one real run of the blog's cells on tiny-serving."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloomperf.backends import backend_class, backend_names
from bloomperf.catalog.failures import KV_CACHE_REFUSALS, classify_failure
from bloomperf.catalog.serving_venv import SERVING_PYTHON_ENV
from bloomperf.config.backend import BackendOptions
from bloomperf.harness.matrix import default_backends
from bloomperf.store.results import Outcome
from bloomperf.store.results.files import read_results

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-serving" / "bin" / "python"


def require_serving_venv() -> None:
    """Skip without the serving venv on a developer's machine; CI builds it, so fail there."""
    if PYTHON.exists():
        return
    if os.environ.get("CI") == "true":
        raise AssertionError(f"{PYTHON} is missing: BLOOMPERF_PROFILE=serving bash .ci/setup")
    pytest.skip("no serving venv (BLOOMPERF_PROFILE=serving bash .ci/setup)")


def test_vllm_is_a_built_in_whose_workers_run_the_serving_venvs_python(monkeypatch, tmp_path):
    vllm = backend_class("vllm")
    assert "vllm" in backend_names()
    assert vllm.memory_model is None  # never skipped on a prediction, only on a measured OOM
    assert vllm.default_on == ()  # a run without --backends does not need the serving venv
    assert all("vllm" not in default_backends(device) for device in ("cpu", "cuda"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(SERVING_PYTHON_ENV, raising=False)
    assert vllm.interpreter() == str(tmp_path / ".venv-serving" / "bin" / "python")
    reason = vllm.unmet_requirement("fp32", "cpu", BackendOptions())
    assert reason is not None and ".venv-serving/bin/python" in reason
    python = tmp_path / "python"
    python.touch()
    monkeypatch.setenv(SERVING_PYTHON_ENV, str(python))
    assert vllm.interpreter() == str(python)
    assert vllm.unmet_requirement("fp32", "cpu", BackendOptions()) is None
    assert "int8" in (vllm.unmet_requirement("int8", "cpu", BackendOptions()) or "")


def rendered_raises(source: str, exception: str) -> list[str]:
    """The messages of every ``raise <exception>("...")`` in ``source``, each f-string field
    filled with 1.5 (how the library's text reads once formatted)."""
    messages = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        call = node.exc
        if not (isinstance(call.func, ast.Name) and call.func.id == exception and call.args):
            continue
        text = call.args[0]
        if isinstance(text, ast.Constant) and isinstance(text.value, str):
            messages.append(text.value)
        elif isinstance(text, ast.JoinedStr):
            messages.append(
                "".join(
                    str(part.value) if isinstance(part, ast.Constant) else "1.5"
                    for part in text.values
                )
            )
    return messages


def vllm_source(relative: str) -> str:
    require_serving_venv()
    found = sorted((ROOT / ".venv-serving" / "lib").glob(f"python*/site-packages/vllm/{relative}"))
    assert found, f"vllm/{relative} is not in the serving venv"
    return found[0].read_text()


def test_vllms_kv_cache_refusals_are_ooms_and_its_other_value_errors_are_not():
    messages = rendered_raises(vllm_source("v1/core/kv_cache_utils.py"), "ValueError")
    refusals = [m for m in messages if any(text in m for text in KV_CACHE_REFUSALS)]
    # Each refusal text is one of vLLM's real messages (none matches nothing).
    assert all(any(text in m for m in refusals) for text in KV_CACHE_REFUSALS), refusals
    assert all(classify_failure(ValueError(m)) == "oom" for m in refusals)
    others = [m for m in messages if m not in refusals]
    assert len(others) >= 5  # layouts, prefix units...: configuration errors, not memory
    assert all(classify_failure(ValueError(m)) == "error" for m in others)
    # The startup check of free memory is about other processes, not this cell's size.
    startup = [
        m
        for m in rendered_raises(vllm_source("v1/worker/utils.py"), "ValueError")
        if "less than desired GPU memory utilization" in m
    ]
    assert len(startup) == 1 and classify_failure(ValueError(startup[0])) == "error"


def test_a_vllm_run_measures_the_blogs_cells_with_load_time_speed_and_memory(tmp_path):
    require_serving_venv()
    output = tmp_path / "r.json"
    # Batch 1 of tiny-serving's random weights repeats one token under any backend (the
    # output check's garbage), so the cells start at 2; one engine serves both.
    command = [
        *(sys.executable, "-m", "bloomperf", "run", "--model", "tiny-serving"),
        *("--backends", "vllm", "--dtypes", "fp32", "--batch-sizes", "2,4"),
        *("--new-tokens", "8", "--cycles", "1", "--allow-no-baseline", "--no-lock"),
        *("--output", str(output)),
    ]
    # 1 GiB of KV cache (vLLM's CPU default is a share of the host's RAM).
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    cells = read_results(output).cells
    assert [(c.backend, c.batch_size, c.outcome) for c in cells] == [
        ("vllm", 2, Outcome.OK),
        ("vllm", 4, Outcome.OK),
    ]
    for cell in cells:
        assert cell.load_time_s is not None and cell.load_time_s > 0
        assert cell.ms_per_token is not None and cell.ms_per_token > 0
        assert cell.generate_memory is not None and (cell.generate_memory.peak_bytes or 0) > 0
        assert cell.details["path"] == "vllm"
    assert cells[0].details["vllm"] == cells[1].details["vllm"]
    assert {c.details.get("load_count") for c in cells} == {1}  # loaded once for both
