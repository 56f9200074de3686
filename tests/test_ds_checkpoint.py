"""DeepSpeed-Inference's checkpoint path for bloomperf's own checkpoints, on CPU, through the
installed DeepSpeed: what its meta-device loader reads, the host-RAM skip with bloom-176b's real
file layout, the int8 rule tied to DeepSpeed's source, and that imports, the rank rendezvous and
JIT op builds happen before the worker's load clock starts. (Tokens of the meta-device load
against the plain model, with 2 ranks: tests/test_ds_backends.py.)"""

from __future__ import annotations

import inspect
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bloomperf.backends import backend_class
from bloomperf.backends.compat import dtype_argument
from bloomperf.backends.ds_checkpoint import (
    checkpoints_json,
    host_bytes_per_rank,
    host_memory_reason,
)
from bloomperf.backends.ds_inference import INT8_NEEDS_CHECKPOINT, load_path
from bloomperf.catalog.caches import build_lock, extensions_dir, worker_caches
from bloomperf.catalog.checkpoint_builder import split_shards, tensor_specs, write_tokenizer
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.models import MODEL_SHAPES, bloom_config
from bloomperf.catalog.topology import host_ram
from bloomperf.config.backend import BackendOptions
from bloomperf.harness.protocol import WorkerSpec

deepspeed = pytest.importorskip("deepspeed")
GIB = 2**30

HF_LOAD = BackendOptions(load="hf")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("models")).path


def test_deepspeed_reads_the_checkpoints_json_and_its_files(tiny: Path, tmp_path: Path) -> None:
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.runtime.state_dict_factory import SDLoaderFactory

    # A copy, without any DeepSpeed copy yet: its weights get rewritten below.
    fresh = shutil.ignore_patterns("deepspeed")
    tiny = Path(shutil.copytree(tiny, tmp_path / "tiny", ignore=fresh))
    description, seconds = checkpoints_json(tiny)
    assert seconds > 0
    # DeepSpeed's own reader: a BLOOM description comes back as the dict its loaders walk.
    data = SDLoaderFactory.get_sd_loader_json(str(description), TorchCheckpointEngine())
    assert (data["type"], data["version"]) == ("BLOOM", 1.0)
    original = load_file(str(tiny / "model.safetensors"))
    loaded: dict[str, torch.Tensor] = {}
    for name in data["checkpoints"]:
        # DeepSpeed's kernel-injection loader (replace_module.py) unpickles each file freely;
        # a file that loads with weights_only=True holds only tensors, so it loads there too.
        path = os.path.join(data["base_dir"], name)
        loaded.update(torch.load(path, map_location="cpu", weights_only=True))
    # BLOOM's original names, which auto-TP's loader looks up (skip_level_0_prefix).
    assert sorted(loaded) == sorted(k.removeprefix("transformer.") for k in original)
    assert all(torch.equal(loaded[k.removeprefix("transformer.")], v) for k, v in original.items())
    # Written once: the next rank (or run) reuses it; a changed checkpoint gets a fresh copy.
    assert checkpoints_json(tiny) == (description, 0.0)
    changed = {**original, "extra": torch.zeros(3)}
    save_file(changed, str(tiny / "model.safetensors"))
    assert checkpoints_json(tiny)[1] > 0
    assert "extra" in torch.load(Path(data["base_dir"]) / "model.pt", weights_only=True)


def bloom_176b_layout(folder: Path) -> Path:
    """bloom-176b's checkpoint as bloomperf writes it (same shards, same sizes) as sparse files:
    the RAM rule reads only file sizes, and this takes no disk."""
    shape = MODEL_SHAPES["bloom-176b"]
    folder.mkdir(exist_ok=True)
    shards = split_shards(tensor_specs(shape, shape.n_layer), 2)
    for i, specs in enumerate(shards):
        with open(folder / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors", "wb") as f:
            f.truncate(sum(s.numel for s in specs) * 2)
    (folder / "config.json").write_text(json.dumps(bloom_config(shape, shape.n_layer)))
    write_tokenizer(folder, shape.vocab_size)
    return folder


def test_ranks_times_weights_beyond_host_ram_is_skipped_with_the_figures(tmp_path: Path) -> None:
    folder = bloom_176b_layout(tmp_path)
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert 327 * GIB < weights < 329 * GIB  # 176.2 G parameters in bf16
    one_tib = 1024 * GIB  # the host RAM of a typical 8 x A100 machine
    hf = host_bytes_per_rank("hf", folder, 8, 1.0, share_on_host=True)
    assert hf == weights
    assert host_memory_reason(hf, 8, "hf", one_tib) == (
        f"host RAM: 8 ranks x {weights / GIB:.1f} GiB host memory each (hf load) = "
        f"{8 * weights / GIB:.1f} GiB > 1024.0 GiB RAM: it would swap; drop --load hf: the "
        "checkpoints-JSON load reads one file at a time"
    )
    # A RAM figure in doubt (a Firecracker guest's MemTotal grows with use) is named.
    doubted = host_memory_reason(hf, 8, "hf", one_tib, doubt="a Firecracker guest")
    assert doubted is not None and doubted.endswith(
        "(the RAM figure may read low: a Firecracker guest)"
    )
    # The blog's path: one file at a time, plus the share for auto-TP, which fills it on the host.
    largest = max(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert largest < 7 * GIB  # the 7.2 GB embedding, alone in its file
    kernels = host_bytes_per_rank("unsharded", folder, 8, 1.0, share_on_host=False)
    autotp = host_bytes_per_rank("unsharded", folder, 8, 1.0, share_on_host=True)
    assert (kernels, autotp) == (largest, int(weights / 8 + largest))
    assert host_memory_reason(autotp, 8, "unsharded", one_tib) is None
    # Through the backends, with this machine's RAM: from_pretrained on 8 ranks does not fit.
    for name in ("ds-inference", "ds-autotp"):
        reason = backend_class(name).host_memory_reason(folder, 8, "fp16", HF_LOAD)
        assert reason is not None and f"{host_ram().bytes / GIB:.1f} GiB RAM" in reason
    # fp32 from a bf16 checkpoint doubles the figure.
    reason = backend_class("ds-autotp").host_memory_reason(folder, 2, "fp32", HF_LOAD)
    assert reason is not None and f"2 ranks x {2 * weights / GIB:.1f} GiB" in reason


def test_a_small_model_is_not_skipped(tiny: Path) -> None:
    for options in (BackendOptions(), HF_LOAD):
        assert backend_class("ds-autotp").host_memory_reason(tiny, 2, "fp32", options) is None


def test_int8_needs_a_checkpoint_load_as_deepspeed_quantizes_only_there() -> None:
    source = Path(deepspeed.__file__).parent / "module_inject"
    # The facts the skip reason states, read in the installed DeepSpeed.
    assert "#self.apply_weight_quantization()" in (source / "containers/base.py").read_text()
    assert "weight_quantizer.quantize(" in (source / "policy.py").read_text()
    ds_inference = backend_class("ds-inference")
    reason = ds_inference.unmet_requirement("int8", "cuda", HF_LOAD)
    assert reason == f"{INT8_NEEDS_CHECKPOINT}; --load hf gives it none"
    assert "commented out in module_inject/containers/base.py" in reason
    # From the checkpoints JSON or a pre-sharded folder, DeepSpeed quantizes as it loads.
    for options in (BackendOptions(), BackendOptions(sharded="/data/bloom-tp8-int8")):
        unmet = ds_inference.unmet_requirement("int8", "cuda", options)
        assert unmet is None or "transformers" in unmet  # only the profile's own reason


# Runs the worker's real load path in a fresh process (nothing imported yet) and reports what
# was already done when the load clock started: the clock starts right before backend.load.
CLOCK_PROBE = """
import json, sys
from bloomperf.harness.protocol import WorkerSpec
from bloomperf.harness.worker import Worker
spec = WorkerSpec.from_json(sys.argv[1])
worker = Worker(spec)
seen = {}
real_load = worker.backend.load
def load(request):
    from deepspeed.ops.op_builder.builder import OpBuilder
    seen["deepspeed_imported"] = "deepspeed" in sys.modules
    seen["built_ops"] = sorted(OpBuilder._loaded_ops)
    return real_load(request)
worker.backend.load = load
try:
    seen["load_s"] = worker.load()
    seen["details"] = worker.backend.details()
except Exception as exc:
    seen["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(seen))
"""


def run_clock_probe(tiny: Path, backend: str, dtype: str) -> dict[str, object]:
    spec = WorkerSpec(backend, dtype, str(tiny), "cpu", new_tokens=4, control="")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "MASTER_ADDR")}
    # The caches a group's worker gets (bloomperf's extensions folder, where CI built the op):
    # without them DeepSpeed built its op afresh in ~/.cache on a new machine, for 90 s. Under
    # the folder's build lock, as a group loads: another worker's run takes torch's ``lock`` file
    # in that folder for a killed build's when nobody holds the build lock, and removed it from
    # under this probe once in CI (FileNotFoundError at the probe's release).
    with build_lock(extensions_dir(), 600):
        result = subprocess.run(
            [sys.executable, "-c", CLOCK_PROBE, spec.to_json()],
            env={**env, **worker_caches(), "CUDA_VISIBLE_DEVICES": ""},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    seen: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize("backend", ["ds-autotp", "ds-zero"])
def test_load_clock_starts_after_import_rendezvous_and_op_builds(tiny: Path, backend: str) -> None:
    seen = run_clock_probe(tiny, backend, "fp32")
    assert "error" not in seen, seen["error"]
    assert seen["deepspeed_imported"] is True
    # DeepSpeed's CPU accelerator JIT-builds its shared-memory all-reduce while joining the
    # rank group: done, and timed apart, before the clock.
    assert "deepspeed_shm_comm" in seen["built_ops"]  # type: ignore[operator]
    prepare = seen["details"]["prepare_s"]  # type: ignore[index]
    assert set(prepare) == {"import_s", "rendezvous_s"}
    assert prepare["import_s"] > 0.05  # a real first import, not a cached module


def test_fused_kernels_are_built_before_the_load_clock(tiny: Path) -> None:
    # The fused kernels' builder is called in prepare: on CPU, DeepSpeed's accelerator has no
    # InferenceBuilder and its stand-in raises, before the load clock ever starts.
    seen = run_clock_probe(tiny, "ds-inference", "fp16")
    assert seen["error"] == "ValueError: This op had not been implemented on CPU backend."
    assert "deepspeed_imported" not in seen  # backend.load was never entered


def run_shard_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", "shard", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_shard_refuses_what_would_swap_or_save_nothing(tmp_path: Path) -> None:
    folder = bloom_176b_layout(tmp_path / "bloom")
    out = str(tmp_path / "out")
    # Auto-TP fills each rank's share on the host even on the meta-device path.
    share = host_bytes_per_rank("unsharded", folder, 8, 1.0, share_on_host=True) / GIB
    result = run_shard_command("--tp", "8", "--model", str(folder), "--out", out)
    assert result.returncode == 2
    assert f"--tp 8: host RAM: 8 ranks x {share:.1f} GiB host memory each (unsharded load)" in (
        result.stderr
    )
    assert f"{host_ram().bytes / GIB:.1f} GiB RAM: it would swap" in result.stderr
    result = run_shard_command("--tp", "1", "--model", str(folder), "--out", out)
    assert result.returncode == 2
    assert "auto-TP saves no shards at TP=1" in result.stderr
    assert not (tmp_path / "out").exists()


def test_the_run_plan_skips_a_group_that_would_swap_with_the_figures(tmp_path: Path) -> None:
    from bloomperf.cli import build_parser
    from bloomperf.cli.plan import run_dry

    folder = bloom_176b_layout(tmp_path / "bloom")
    plans = {}
    for load in ("hf", "unsharded"):
        argv = ["run", "--dry-run", "--format", "json", "--topology", "8xA100-80GB"]
        argv += ["--model", str(folder), "--backends", "ds-autotp,ds-inference"]
        argv += ["--dtypes", "fp16", "--batch-sizes", "1", "--load", load]
        out = io.StringIO()
        run_dry(build_parser().parse_args(argv), out, io.StringIO())
        plans[load] = {
            g["backend"]: g["cells"][0]["skip"] for g in json.loads(out.getvalue())["groups"]
        }
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    ram = f"GiB > {host_ram().bytes / GIB:.1f} GiB RAM: it would swap"
    assert plans["hf"]["ds-autotp"].startswith(
        f"host RAM: 8 ranks x {weights / GIB:.1f} GiB host memory each (hf load)"
    )
    assert ram in plans["hf"]["ds-autotp"]
    # The checkpoints-JSON load: auto-TP's share plus one file per rank is still too much here.
    share = host_bytes_per_rank("unsharded", folder, 8, 1.0, share_on_host=True) / GIB
    assert plans["unsharded"]["ds-autotp"].startswith(
        f"host RAM: 8 ranks x {share:.1f} GiB host memory each"
    )


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_tp1_loads_the_checkpoint_itself_and_writes_no_deepspeed_copy(dtype: str, tp: int) -> None:
    """At TP=1 both DeepSpeed backends load with from_pretrained (no 17 GB DeepSpeed copy);
    int8 with kernels needs the checkpoint load (DeepSpeed quantizes only there); more ranks
    keep the meta-device load, one file at a time, or what was asked."""
    for kernel_inject in (True, False):
        path = load_path(kernel_inject, tp, BackendOptions(), dtype)
        needs_copy = tp > 1 or (kernel_inject and dtype == "int8")
        assert path == ("unsharded" if needs_copy else "hf"), (kernel_inject, tp, dtype)
        assert load_path(kernel_inject, tp, HF_LOAD, dtype) == "hf"
        assert load_path(kernel_inject, tp, BackendOptions(sharded="x"), dtype) == "pre-sharded"


def test_kernel_injection_takes_the_real_weights_of_a_loaded_model(tiny: Path) -> None:
    """What ds-inference at TP=1 relies on, read in the installed DeepSpeed and run where a CPU
    allows: with no ``checkpoint=`` the engine reads no file, and BLOOM's injection policy hands
    the container the loaded model's own tensors (the fused kernels themselves need CUDA)."""
    from deepspeed.inference.engine import InferenceEngine
    from deepspeed.module_inject.containers.bloom import BLOOMLayerPolicy
    from transformers import AutoModelForCausalLM

    engine = inspect.getsource(InferenceEngine._apply_injection_policy)
    assert "if checkpoint_dir is not None else None" in engine
    replace = (Path(deepspeed.__file__).parent / "module_inject/replace_module.py").read_text()
    assert "if checkpoint_dict is not None and config.replace_with_kernel_inject:" in replace
    assert "_container.copy_data_to_new_module()" in replace
    model = AutoModelForCausalLM.from_pretrained(str(tiny), **dtype_argument(torch.float16))
    block = model.transformer.h[0]
    policy = BLOOMLayerPolicy(block, inference=True)
    qkvw, _, dense_w, _ = policy.attention()
    h4h_w, _, _4hh_w, _ = policy.mlp()
    given = (qkvw, dense_w, h4h_w, _4hh_w)
    own = (
        block.self_attention.query_key_value.weight,
        block.self_attention.dense.weight,
        block.mlp.dense_h_to_4h.weight,
        block.mlp.dense_4h_to_h.weight,
    )
    for tensor, weight in zip(given, own, strict=True):
        assert not tensor.is_meta and tensor.data_ptr() == weight.data_ptr()
        assert tensor.dtype == torch.float16
