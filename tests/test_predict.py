"""The memory model against the blog's tables, the CPU, and its own arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bloomperf.analysis.boundaries import BoundaryCheck, check_boundaries, predict_boundary
from bloomperf.analysis.memory_model import (
    CPU_RUNTIME_RSS_BYTES,
    KV_HEADROOM,
    kv_bytes,
    predict_cell,
    predict_cpu_rss,
    zero_largest_gather,
)
from bloomperf.analysis.roofline import efficiency, roofline_ms_per_token
from bloomperf.analysis.scenario import Scenario, SuiteCell
from bloomperf.analysis.suite_prediction import (
    batches_through,
    cell_prediction,
    predicted_skip_reason,
)
from bloomperf.backends import BACKEND_NAMES, DTYPES, backend_class
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.catalog.hardware import GPU_SPECS, GiB, GpuSpec, known_topology, parse_topology_id
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.weights import embedding_bytes, layer_bytes
from bloomperf.cli import main
from bloomperf.cli.predict import PREDICT_KIND, PREDICT_SCHEMA_VERSION
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.matrix import DEFAULT_BATCH_SIZES, Cell, Group
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session
from bloomperf.store.baseline.search import find_baseline
from bloomperf.store.results.files import read_results

BLOOM = MODEL_SHAPES["bloom-176b"]
A100 = GPU_SPECS["A100-80GB"]
BASELINES = Path(__file__).resolve().parent.parent / "baselines"
BATCH_SIZES = DEFAULT_BATCH_SIZES["cuda"]  # the blog's


def bloom(
    backend: str, dtype: str, gpus: GpuSpec = A100, n_gpus: int = 8, nodes: int = 1
) -> Scenario:
    """bloom-176b, all 70 blocks, run by ``backend`` in ``dtype`` on ``n_gpus`` x ``gpus``."""
    return Scenario(BLOOM, None, backend, dtype, gpus, n_gpus, nodes)


# The rows the model predicts one batch step off, and on which side (positive: optimistic).
# Every other row is exact. ZeRO-3: see ZERO_PINNED_GATHER_BLOCKS.
ONE_STEP_OFF = {("8xA100-SXM4-80GB", "ds-zero", "bf16"): 1}


@pytest.mark.parametrize("topology", ["8xA100-SXM4-80GB", "4xA100-SXM4-80GB"])
def test_predicted_boundaries_reproduce_the_blog_rows_they_were_fitted_on(topology: str) -> None:
    """Not a validation: KV_HEADROOM was chosen on these very rows (every Accelerate and
    DeepSpeed-Inference boundary of both tables, see memory_model.py), and ONE_STEP_OFF records the
    ZeRO-3 row the model misses. It keeps the model from drifting off its fit; the held-out
    validation is the test below (the 4x table against a fit on the 8x table alone)."""
    baseline = find_baseline(topology, "bloom-176b", BASELINES)
    assert baseline is not None, f"no baseline for {topology} in {BASELINES}"
    _, n_gpus, gpus = parse_topology_id(topology)
    checks = check_boundaries(baseline, BLOOM, gpus, n_gpus)
    expected_rows = {"8xA100-SXM4-80GB": 5, "4xA100-SXM4-80GB": 2}[topology]
    assert len(checks) == expected_rows
    for c in checks:
        assert c.steps_off == ONE_STEP_OFF.get((topology, c.backend, c.dtype), 0), c


H100_OOM_RUN = Path(__file__).resolve().parent / "data/results/1xH100-80GB-HBM3.oom.results.json"


def test_the_h100_run_s_oom_boundary_and_peaks_are_what_the_model_predicts() -> None:
    """Measured on one H100 (gpu_check, 2026-12-05): accelerate bf16 on a 2-layer bloom-176b ran
    4096 rows and ran out of memory at 6144. No constant was fitted on it. With a copy of every
    layer's cache on GPU 0 the model said 2048; the copies are of other GPUs' layers only."""
    run = read_results(H100_OOM_RUN)
    measured = {c.batch_size: c for c in run.cells if c.outcome in ("ok", "oom")}
    assert [b for b, c in measured.items() if c.outcome == "oom"] == [6144]
    assert max(b for b, c in measured.items() if c.outcome == "ok") == 4096
    _, n_gpus, gpus = parse_topology_id(run.topology)
    scenario = replace(
        Scenario(BLOOM, run.model.layers, "accelerate", "bf16", gpus, n_gpus),
        new_tokens=run.workload.new_tokens,
    )
    assert predict_boundary(scenario, tuple(sorted(measured))) == 4096
    for batch, cell in measured.items():
        if cell.outcome == "ok":  # never optimistic, and within 10 % of NVML's peak
            assert cell.peak_memory_bytes is not None
            predicted = predict_cell(scenario, batch).peak_per_gpu_bytes
            assert 1.0 <= predicted / cell.peak_memory_bytes <= 1.10, (batch, predicted)


# Every Accelerate and DeepSpeed-Inference row of the 8 x A100 table: the rows KV_HEADROOM is
# fitted on. ZeRO-3's row is not (no headroom makes it exact, see ZERO_PINNED_GATHER_BLOCKS).
FIT_TOPOLOGY, HELD_OUT_TOPOLOGY = "8xA100-SXM4-80GB", "4xA100-SXM4-80GB"
HEADROOM_GRID = tuple(round(1.0 + 0.1 * i, 1) for i in range(21))  # 1.0 ... 3.0


def _blog_checks(topology: str) -> list[BoundaryCheck]:
    baseline = find_baseline(topology, "bloom-176b", BASELINES)
    assert baseline is not None, f"no baseline for {topology} in {BASELINES}"
    _, n_gpus, gpus = parse_topology_id(topology)
    return check_boundaries(baseline, BLOOM, gpus, n_gpus)


def test_kv_headroom_fitted_on_the_8x_table_predicts_the_held_out_4x_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held-out validation. Fit: the KV_HEADROOM values (grid 1.0-3.0, step 0.1) that make
    the four Accelerate and DeepSpeed-Inference rows of the blog's 8 x A100-80GB table exact;
    measured: 1.5 to 2.3. Held out: the blog's 4 x A100-80GB table (accelerate int8, 16 ran,
    OOM at 32; ds-inference int8, 64 ran, OOM at 128), never looked at by this fit. Expected
    values are the blog's, read from the baseline files. Measured over the whole fitted range:
    accelerate int8 equal from 1.6 to 2.3 and one step optimistic at 1.5 (equal there too
    while GPU 0 was charged copies of its own layers' cache, which the H100 run above refutes);
    ds-inference int8 equal from 1.8 to 2.3 and one step optimistic (128) from 1.5 to 1.7.
    KV_HEADROOM = 2.0 lies in the fitted range and gets both held-out rows equal; its choice
    inside the range did see the 4x rows (memory_model.py), so only the range, not the point,
    is held out."""
    fitted = []
    for headroom in HEADROOM_GRID:
        monkeypatch.setattr("bloomperf.analysis.memory_model.KV_HEADROOM", headroom)
        fit_rows = [c for c in _blog_checks(FIT_TOPOLOGY) if c.backend != "ds-zero"]
        assert len(fit_rows) == 4
        if all(c.steps_off == 0 for c in fit_rows):
            fitted.append(headroom)
    assert fitted, "no KV_HEADROOM makes the 8x rows exact"
    assert fitted == [h for h in HEADROOM_GRID if fitted[0] <= h <= fitted[-1]], fitted
    assert fitted[0] <= KV_HEADROOM <= fitted[-1]
    held_out: dict[float, dict[tuple[str, str], int]] = {}
    for headroom in fitted:
        monkeypatch.setattr("bloomperf.analysis.memory_model.KV_HEADROOM", headroom)
        checks = _blog_checks(HELD_OUT_TOPOLOGY)
        assert {(c.backend, c.dtype, c.reference, c.reference_oom) for c in checks} == {
            ("accelerate", "int8", 16, 32),
            ("ds-inference", "int8", 64, 128),
        }
        held_out[headroom] = {(c.backend, c.dtype): c.steps_off for c in checks}
    # Never more than one step off, and never pessimistic, anywhere the 8x rows allow.
    assert all(off in (0, 1) for row in held_out.values() for off in row.values()), held_out
    exact = [h for h, row in held_out.items() if row[("accelerate", "int8")] == 0]
    assert exact == [h for h in fitted if h >= 1.6], held_out
    assert held_out[KV_HEADROOM] == {("accelerate", "int8"): 0, ("ds-inference", "int8"): 0}


def test_zero_without_the_pinned_gather_block_is_two_steps_optimistic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Why ZERO_PINNED_GATHER_BLOCKS exists: the partition, the gathers and the cache alone fit
    # batch 32, where the blog ran out of memory at 16.
    assert predict_boundary(bloom("ds-zero", "bf16"), BATCH_SIZES) == 16
    monkeypatch.setattr("bloomperf.analysis.memory_model.ZERO_PINNED_GATHER_BLOCKS", 0)
    assert predict_boundary(bloom("ds-zero", "bf16"), BATCH_SIZES) == 32


def test_zero_gathers_one_module_at_a_time() -> None:
    gpu = predict_cell(bloom("ds-zero", "bf16"), 1).per_gpu[0]
    embedding = embedding_bytes(BLOOM, "bf16")
    assert zero_largest_gather(BLOOM, "bf16") == embedding  # 250880 x 14336 in bf16
    assert gpu.fragmentation == embedding
    partition = (70 * layer_bytes(BLOOM, "bf16") + embedding) // 8
    qkv = 3 * BLOOM.hidden_size**2 * 2  # prefetched behind the embedding: the bucket is smaller
    assert gpu.weights == partition + embedding + qkv


def test_physics_alone_is_one_step_optimistic(monkeypatch: pytest.MonkeyPatch) -> None:
    # Why KV_HEADROOM exists: at 1.0 every Accelerate and DS-Inference row is one step too high.
    monkeypatch.setattr("bloomperf.analysis.memory_model.KV_HEADROOM", 1.0)
    assert predict_boundary(bloom("accelerate", "bf16"), BATCH_SIZES) == 64
    assert predict_boundary(bloom("ds-inference", "fp16"), BATCH_SIZES) == 256
    assert predict_boundary(bloom("ds-inference", "int8", n_gpus=4), BATCH_SIZES) == 128


def test_blog_accelerate_map_leaves_gpu0_empty() -> None:
    # The default map on the blog's node is the blog's: GPU 0 holds no weights.
    cell = predict_cell(bloom("accelerate", "bf16"), 1)
    assert cell.fits
    assert cell.per_gpu[0].weights == 0
    assert all(gpu.weights > 0 for gpu in cell.per_gpu[1:])
    weights = sum(gpu.weights for gpu in cell.per_gpu)
    assert weights == pytest.approx(BLOOM.parameters() * 2, rel=1e-6)
    assert max(gpu.weights for gpu in cell.per_gpu) <= 51 * GiB


def test_accelerate_maps_are_lowered_to_the_gpus_memory_as_on_the_machine() -> None:
    # 8 x 40 GB cannot hold bloom-176b's 352 GB in bf16: accelerate would send blocks to disk.
    a100_40 = GPU_SPECS["A100-40GB"]
    cell = predict_cell(bloom("accelerate", "bf16", a100_40), 1)
    assert not cell.fits and cell.limit == "max_memory map cannot hold the weights"
    assert predict_cell(bloom("accelerate", "int8", a100_40), 1).fits


def test_breakdown_adds_up_and_grows_with_batch() -> None:
    small = predict_cell(bloom("ds-zero", "bf16"), 1)
    large = predict_cell(bloom("ds-zero", "bf16"), 8)
    assert small.fits and large.fits
    assert large.peak_per_gpu_bytes > small.peak_per_gpu_bytes
    gpu = large.per_gpu[0]
    assert gpu.total == large.peak_per_gpu_bytes
    # The whole model's cache for the rank's own batch, times the headroom.
    assert gpu.kv_cache == int(kv_bytes(BLOOM, 70, "bf16", 8, 110) * KV_HEADROOM)


def test_ds_inference_reports_why_it_does_not_fit() -> None:
    cell = predict_cell(bloom("ds-inference", "fp16"), 256)
    assert not cell.fits
    assert "workspace holds" in cell.limit
    # The workspace takes what is free, so the GPU is full either way.
    assert cell.peak_per_gpu_bytes <= A100.memory_bytes


def test_roofline_of_the_blog_example() -> None:
    # 352 GB / (8 x 2.039 TB/s) ~ 21.6 ms; the blog measured 44.02 ms: about 49%.
    bound = roofline_ms_per_token(bloom("ds-inference", "fp16"), 1)
    assert 21.0 < bound < 22.5
    assert 47 < efficiency(44.02, bound) < 51
    # Per generated token: a large batch is compute-bound, 2 x 176e9 x B / (8 x 312 TFLOP/s).
    compute = 2 * BLOOM.parameters() / (8 * 312e12) * 1000
    large = roofline_ms_per_token(bloom("ds-inference", "fp16"), 512)
    assert large == pytest.approx(compute, rel=1e-9)
    # Accelerate's pipeline runs one GPU at a time.
    naive = roofline_ms_per_token(bloom("accelerate", "bf16"), 1)
    assert naive == pytest.approx(bound * 8, rel=0.01)
    with pytest.raises(BloomperfError):
        efficiency(0.0, bound)


@pytest.mark.parametrize(
    ("text", "nodes", "per_node", "gpu"),
    [
        ("8xH200-141GB", 1, 8, "H200-141GB"),
        ("2x8xA100-40GB", 2, 8, "A100-40GB"),
        ("8xA100-SXM4-80GB", 1, 8, "A100-80GB"),
        ("8xa100-80gb", 1, 8, "A100-80GB"),
    ],
)
def test_topology_ids(text: str, nodes: int, per_node: int, gpu: str) -> None:
    assert parse_topology_id(text) == (nodes, per_node, GPU_SPECS[gpu])


def test_known_topology_is_none_where_nothing_can_be_predicted() -> None:
    assert known_topology("cpu") is None
    assert known_topology("8xB300-288GB") is None
    assert known_topology("1xA100-80GB+1xA10-24GB") is None
    assert known_topology("8xH100-80GB-HBM3") == (1, 8, GPU_SPECS["H100-80GB"])


def test_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(BloomperfError, match=r"unknown value .B300-288GB. \(8 valid ones"):
        parse_topology_id("8xB300-288GB")
    with pytest.raises(BloomperfError, match="is not"):
        parse_topology_id("eight A100s")


def test_every_gpu_cites_its_datasheet() -> None:
    for spec in GPU_SPECS.values():
        assert "datasheet" in spec.source
        assert spec.memory_bytes > 16 * GiB and spec.bandwidth_bytes_per_s > 5e11
        assert spec.peak_fp16 > spec.peak_fp32


def test_predict_command_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "bloom-176b", "--topology", "8xA100-80GB"]) == 0
    text = capsys.readouterr().out
    assert "accelerate bf16" in text and "OOM" in text
    assert "| ds-inference | fp16 | 128 (256) | 128 | equal |" in text
    argv = ["predict", "--model", "bloom-176b", "--topology", "2x8xA100-40GB", "--format", "json"]
    # Every backend with a memory model (one without is refused: test_backend_traits).
    predicted_backends = [n for n in BACKEND_NAMES if backend_class(n).memory_model is not None]
    argv += ["--dtypes", ",".join(DTYPES), "--backends", ",".join(predicted_backends)]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["kind"], data["schema_version"]) == (PREDICT_KIND, PREDICT_SCHEMA_VERSION)
    assert data["topology"] == "2x8xA100-40GB"
    rows = {(r["backend"], r["dtype"]): r for r in data["rows"]}
    assert len(rows[("ds-inference", "fp16")]["cells"][0]["per_gpu"]) == 16
    # The rows are exactly the dtypes each backend class runs: one fact, not a second list.
    for name in predicted_backends:
        predicted = {dtype for backend, dtype in rows if backend == name}
        assert predicted == set(backend_class(name).dtypes), name
    assert main(["predict", "--model", "nope", "--topology", "8xA100-80GB"]) == 2
    assert "--model: unknown value 'nope' (8 valid ones: see --help)" in capsys.readouterr().err


# ---- CPU: predicted vs measured peak RSS --------------------------------------------------

# Within 30%: the CPU model has one constant (CPU_RUNTIME_RSS_BYTES, fitted on an AMD EPYC) and
# no headroom; allocator and library differences move the runtime part, which is nearly all of
# the tiny row. On the Intel Xeon (AMX) CI machine of 2026-12-02 the tiny bs32 child read
# 364 MiB alone and 443-445 MiB inside the full suite (+25 %); the held-out rows, where the
# weights dominate, stay at 10 %.
CPU_MARGIN = 0.30
HELD_OUT_CPU_MARGIN = 0.10

_CHILD = """
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from bloomperf.catalog.workload import build_inputs, generate_kwargs
path, batch, new_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(path)
inputs = build_inputs(tokenizer, batch, torch.device("cpu"))
with torch.inference_mode():
    model.generate(**inputs, **generate_kwargs(new_tokens))
# VmHWM, not getrusage's ru_maxrss: ru_maxrss survives exec, so a child of a large pytest
# process would report its parent's peak.
status = open("/proc/self/status").read()
peak_kb = int(status.split("VmHWM:")[1].split()[0])
print(inputs["input_ids"].shape[1], peak_kb * 1024)
"""


@pytest.mark.cpu
def test_cpu_peak_rss_matches_prediction() -> None:
    """Fitted: CPU_RUNTIME_RSS_BYTES, measured on the tiny shape (the tiny row checks the fit).
    Held out: bloom-560m, 24 layers at batch 4 and 2 layers at batch 8, whose peak is the 1 GB
    fp32 embedding and the checkpoint, not the runtime. Measured here (2 busy cores, torch CPU):
    tiny bs32 412 MiB vs 354 predicted (-14 %); bloom-560m bs4 3577 MiB vs 3547 (-0.8 %);
    bloom-560m 2 layers bs8 (20 new tokens) 1995 MiB vs 1962 (-1.7 %)."""
    cases = [("tiny", None, 32, 100), ("bloom-560m", None, 4, 4), ("bloom-560m", 2, 8, 20)]
    # The held-out rows are held to 10 %: there the runtime's noise (tiny's 14 %) is a small
    # part of the peak, and a lost checkpoint or embedding term shows (-15 % or worse).
    margins = [CPU_MARGIN, HELD_OUT_CPU_MARGIN, HELD_OUT_CPU_MARGIN]
    for (name, layers, batch, new_tokens), margin in zip(cases, margins, strict=True):
        # One process at a time, as a run measures: three at once on two busy cores let the
        # allocator open more arenas, and the tiny row's peak rose by a quarter in CI.
        path = resolve_model(name, layers).path
        argv = [sys.executable, "-c", _CHILD, str(path), str(batch), str(new_tokens)]
        child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=300)
        out = child.stdout
        assert child.returncode == 0, f"{name}: child failed"
        prompt_tokens, measured = (int(v) for v in out.split()[-2:])
        predicted = predict_cpu_rss(
            MODEL_SHAPES[name], layers, batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens
        )
        assert abs(predicted - measured) <= margin * measured, (
            f"{name} L{layers} bs{batch}: predicted {predicted / 2**20:.0f} MiB, "
            f"measured {measured / 2**20:.0f} MiB"
        )
    assert 0 < CPU_RUNTIME_RSS_BYTES < GiB


def test_sweep_stops_one_step_past_the_predicted_boundary() -> None:
    fp16 = predict_boundary(bloom("ds-inference", "fp16"), BATCH_SIZES)
    assert batches_through(BATCH_SIZES, fp16, 1) == (1, 8, 16, 32, 64, 128, 256)
    bf16 = predict_boundary(bloom("accelerate", "bf16"), BATCH_SIZES)
    assert batches_through(BATCH_SIZES, bf16, 0)[-1] == 32
    assert batches_through(BATCH_SIZES, None, 1) == (1,)


def test_accelerate_cannot_span_nodes() -> None:
    cell = predict_cell(bloom("accelerate", "int8", n_gpus=16, nodes=2), 1)
    assert not cell.fits and "one node" in cell.limit
    assert predict_cell(bloom("ds-inference", "int8", n_gpus=16, nodes=2), 1).fits


def test_zero_roofline_counts_every_rank_tokens() -> None:
    per_rank = roofline_ms_per_token(bloom("ds-zero", "bf16"), 1, streams=1)
    blog = roofline_ms_per_token(bloom("ds-zero", "bf16"), 1)
    assert blog == pytest.approx(per_rank / 8)


def test_no_baseline_skips_cells_far_beyond_the_predicted_boundary(tmp_path: Path) -> None:
    """Through the run's own skip decision: on a topology with no baseline, the cells more than
    one step past the predicted boundary are skipped with the reason, the rest are run."""
    (tmp_path / "baselines").mkdir()  # empty: no baseline (and the output not among them)
    options = resolve_options(
        {"output": str(tmp_path / "r.json"), "baselines": str(tmp_path / "baselines")}, env={}
    )
    session = Session.prepare(options)  # the tiny model on this CPU; its parts replaced below
    assert session.baseline is None
    batches = (1, 8, 16, 32, 64, 128, 256, 512)
    session.topology = replace(session.topology, id="8xH100-80GB", device="cuda")
    session.model = replace(session.model, name="bloom-176b", shape=BLOOM, layers=70)
    session.groups = [Group("accelerate", "bf16", batches)]
    _, n_gpus, h100 = parse_topology_id("8xH100-80GB")
    boundary = predict_boundary(bloom("accelerate", "bf16", h100, n_gpus), batches)
    assert boundary is not None and boundary < 256
    expected_run = batches[: batches.index(boundary) + 2]
    reasons = {b: session.skip_reason(Cell("accelerate", "bf16", b)) for b in batches}
    assert [b for b, why in reasons.items() if why is None] == list(expected_run)
    for b in batches[len(expected_run) :]:
        assert f"beyond batch {boundary}, the largest" in (reasons[b] or "")
    # The model was pessimistic: the step beyond ran. The sweep goes on one step past it.
    session.ok_at[("accelerate", "bf16")] = expected_run[-1]
    next_step = batches[len(expected_run)]
    assert session.skip_reason(Cell("accelerate", "bf16", next_step)) is None
    assert session.skip_reason(Cell("accelerate", "bf16", batches[len(expected_run) + 1]))
    session.options = replace(session.options, probe=True)
    assert session.skip_reason(Cell("accelerate", "bf16", 512)) is None


def test_the_suite_predicts_from_its_topology_id_nodes_included() -> None:
    """``SuiteCell``: the suite names a cell by its topology id; the prediction it records
    must see every GPU of every node (the 16 of 2x8) and the nodes (Accelerate cannot span them)."""

    def suite(topology: str, backend: str, dtype: str = "int8") -> SuiteCell:
        return SuiteCell(BLOOM, None, topology, backend, dtype, 1, 100)

    spanning = cell_prediction(suite("2x8xA100-80GB", "accelerate"))
    assert spanning["predicted_fits"] is False and "one node" in spanning["predicted_limit"]
    tp = cell_prediction(suite("2x8xA100-80GB", "ds-inference"))
    expected = predict_cell(bloom("ds-inference", "int8", n_gpus=16, nodes=2), 1)
    assert tp["predicted_peak_bytes"] == expected.peak_per_gpu_bytes and tp["predicted_fits"]
    bound = roofline_ms_per_token(bloom("ds-inference", "int8", n_gpus=16, nodes=2), 1)
    assert tp["roofline_ms_per_token"] == bound
    assert cell_prediction(suite("8xB300-288GB", "ds-inference")) == {}  # no datasheet figures
    assert predicted_skip_reason(suite("8xB300-288GB", "ds-inference"), BATCH_SIZES) is None
    assert SuiteCell(None, None, "8xA100-80GB", "ds-inference", "fp16", 1, 100).scenario() is None
