"""`bloomperf diff` and `bloomperf baseline show|accept` end to end, through the real CLI."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bloomperf import cli
from bloomperf.store.results import CellResult, Outcome, RunResult
from bloomperf.store.results.codec import run_to_dict, save_run
from bloomperf.store.results.files import read_results
from tests.builders import (
    BASELINES,
    BENCHMARK_STORAGE,
    BLOG_BASELINE,
    BLOG_BENCHMARK,
    BLOG_RESULTS,
    BLOG_STORED_RUN,
    REGRESSED_RUN,
    RESULTS,
    rss,
    scaled_run,
    tiny_run,
)


@pytest.fixture(autouse=True)
def only_our_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI with the commands under test (others' modules may still be being written)."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("bloomperf.cli.diff", "bloomperf.cli.baseline"))


def bloomperf(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str, *fragments: str) -> None:
    assert err.count("\n") == 1 and err.startswith("bloomperf: error: "), err
    for fragment in fragments:
        assert fragment in err, err


def test_a_run_made_from_the_baseline_diffs_as_all_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Self-consistency, not agreement with the blog: make_fixtures.py builds this run from the
    # transcribed baseline itself (medians within ±0.2 % of each figure).
    code, out, _ = bloomperf(capsys, "diff", BLOG_RESULTS)
    assert code == 0
    assert "28 cells: 23 same, 5 expected-oom" in out
    assert "REGRESSED" not in out


def test_benchmark_json_reads_like_a_results_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bloomperf(capsys, "diff", BLOG_BENCHMARK, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["counts"] == {"same": 23, "expected-oom": 5}
    assert data["topology"] == "8xA100-SXM4-80GB"


def test_storage_folder_means_its_newest_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bloomperf(capsys, "diff", BENCHMARK_STORAGE)
    assert code == 1
    assert "accelerate-bf16-bs8: ms/token regressed: measured 34.96 ms vs expected 31.78 ms" in out
    assert "28 cells: 22 same, 1 regressed, 5 expected-oom; FAILED" in out


def test_two_results_diff_before_and_after(capsys: pytest.CaptureFixture[str]) -> None:
    before, after = BLOG_STORED_RUN, REGRESSED_RUN
    code, out, _ = bloomperf(capsys, "diff", before, after, "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert [c["id"] for c in data["cells"] if c["status"] == "regressed"] == ["accelerate-bf16-bs8"]
    assert data["counts"] == {"same": 22, "regressed": 1, "expected-oom": 5}
    code, out, _ = bloomperf(capsys, "diff", before, BLOG_RESULTS)
    assert code == 0


def test_another_gpu_model_against_a_named_baseline_is_refused_unless_allowed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, blog_run: RunResult
) -> None:
    """Judging nothing never passes silently (docs/gate.md): a named baseline of another GPU is
    bad input (2), no baseline at all is the gate's "nothing judged" (1); --allow-no-baseline
    reports either unjudged and passes."""
    h100 = replace(blog_run, topology="8xH100-SXM5-80GB")
    path = tmp_path / "h100.json"
    save_run(h100, path)
    code, out, err = bloomperf(capsys, "diff", path, "--baseline", "8xA100-80GB")
    assert code == 2 and "--baseline 8xA100-80GB" in err and "8xH100-SXM5-80GB" in err
    assert len(err.strip().splitlines()) == 1
    allow = "--allow-no-baseline"
    code, out, _ = bloomperf(capsys, "diff", path, "--baseline", "8xA100-80GB", allow)
    assert code == 0
    assert "28 cells: 28 incomparable" in out
    code, out, _ = bloomperf(capsys, "diff", path)  # no baseline for an H100 at all
    assert code == 1 and "28 no-baseline" in out and "no baseline for 8xH100-SXM5-80GB" in out
    assert "nothing judged" in out
    code, out, _ = bloomperf(capsys, "diff", path, allow)
    assert code == 0 and "28 no-baseline" in out and "nothing judged" not in out


def test_unexpected_oom_exits_1_and_moved_boundary_only_under_strict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, blog_run: RunResult
) -> None:
    run = blog_run
    oom = run.with_cell(CellResult("ds-inference", "fp16", 128, Outcome.OOM, message="OOM"))
    save_run(oom, tmp_path / "oom.json")
    code, out, _ = bloomperf(capsys, "diff", tmp_path / "oom.json")
    assert code == 1 and "ds-inference-fp16-bs128: unexpected OOM" in out
    moved = run.with_cell(CellResult("ds-inference", "fp16", 256, Outcome.OK, (0.5, 0.52, 0.51)))
    save_run(moved, tmp_path / "moved.json")
    code, out, _ = bloomperf(capsys, "diff", tmp_path / "moved.json")
    assert code == 0 and "ds-inference-fp16-bs256: boundary moved up" in out
    code, out, _ = bloomperf(capsys, "diff", tmp_path / "moved.json", "--strict")
    assert code == 1


def test_several_results_merge_against_one_baseline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, blog_run: RunResult
) -> None:
    run = blog_run
    halves = [
        replace(run, cells=tuple(c for c in run.cells if c.backend == "accelerate")),
        replace(run, cells=tuple(c for c in run.cells if c.backend != "accelerate")),
    ]
    for i, half in enumerate(halves):
        save_run(half, tmp_path / f"{i}.json")
    code, out, _ = bloomperf(
        capsys,
        "diff",
        tmp_path / "0.json",
        tmp_path / "1.json",
        BLOG_BENCHMARK,
        "--baseline",
        BLOG_BASELINE,
    )
    assert code == 0 and "28 cells: 23 same, 5 expected-oom" in out


# ---- bad input ------------------------------------------------------------------------------


def test_corrupt_results_give_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.json"
    truncated.write_text(BLOG_RESULTS.read_text()[:500])
    code, _, err = bloomperf(capsys, "diff", truncated)
    assert code == 2
    one_line_error(err, str(truncated), "not valid JSON")


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (lambda d: d | {"schema_version": 99}, ["schema_version 99 is not supported", "upgrade"]),
        (lambda d: d | {"kind": "something"}, ["not a bloomperf-results file"]),
        (
            lambda d: d | {"cells": [d["cells"][0] | {"backend": "tgi"}]},
            ["unknown backend 'tgi'"],
        ),
        (lambda d: [d], ["expected a JSON object, found list"]),
        (lambda d: {"hello": 1}, ["neither a bloomperf results file nor a pytest-benchmark"]),
    ],
)
def test_bad_results_files_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    change: Callable[[dict[str, Any]], object],
    fragments: list[str],
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(json.loads(BLOG_RESULTS.read_text()))))
    code, out, err = bloomperf(capsys, "diff", path)
    assert code == 2 and out == ""
    one_line_error(err, str(path), *fragments)


def test_bad_pytest_benchmark_files_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = json.loads(BLOG_BENCHMARK.read_text())
    old = json.loads(json.dumps(data))
    old["benchmarks"][3]["extra_info"]["bloomperf_run"]["schema_version"] = 0
    (tmp_path / "old.json").write_text(json.dumps(old))
    code, _, err = bloomperf(capsys, "diff", tmp_path / "old.json")
    assert code == 2
    one_line_error(err, "old.json", "bloomperf_run: schema_version 0 is not supported")
    foreign = json.loads(json.dumps(data))
    for bench in foreign["benchmarks"]:
        bench["extra_info"] = {}
    (tmp_path / "foreign.json").write_text(json.dumps(foreign))
    code, _, err = bloomperf(capsys, "diff", tmp_path / "foreign.json")
    assert code == 2
    one_line_error(err, "foreign.json", "no bloomperf cells")
    code, _, err = bloomperf(capsys, "diff", tmp_path)
    one_line_error(err, "no pytest-benchmark files")


def test_bad_baselines_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = json.loads((BLOG_BASELINE).read_text())
    (tmp_path / "v3.json").write_text(json.dumps(good | {"schema_version": 3}))
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baseline", tmp_path / "v3.json")
    assert code == 2
    one_line_error(err, "v3.json", "schema_version 3 is not supported")
    (tmp_path / "broken.json").write_text('{"kind": ')
    code, _, err = bloomperf(capsys, "baseline", "show", tmp_path / "broken.json")
    assert code == 2
    one_line_error(err, "broken.json", "not valid JSON")
    cells = [dict(c) for c in good["cells"]]
    cells[5]["backend"] = "tgi"
    (tmp_path / "tgi.json").write_text(json.dumps(good | {"cells": cells}))
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baseline", tmp_path / "tgi.json")
    one_line_error(err, "tgi.json cell 5", "unknown backend 'tgi'")
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baseline", "8xV100-32GB")
    assert code == 2
    one_line_error(err, "--baseline: no baseline for topology '8xV100-32GB'")


def test_a_folder_with_a_broken_baseline_is_named_in_the_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copy(BLOG_BASELINE, tmp_path)
    (tmp_path / "junk.json").write_text("[1, 2")
    code, _, err = bloomperf(capsys, "diff", BLOG_RESULTS, "--baselines", tmp_path)
    assert code == 2
    one_line_error(err, "junk.json", "not valid JSON")


# ---- baseline show / accept -------------------------------------------------------------------


def test_show_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bloomperf(capsys, "baseline", "show", "4xA100-80GB")
    assert code == 0
    assert "DeepSpeed-Inference int8  156.51 ms  20.11 ms  10.38 ms  5.50 ms   2.96 ms   OOM" in out
    code, out, _ = bloomperf(capsys, "baseline", "show", "8xA100-SXM4-80GB", "--format", "json")
    data = json.loads(out)
    first = data["cells"][0]
    assert {k: first[k] for k in ("backend", "dtype", "batch_size", "outcome", "ms_per_token")} == {
        "backend": "accelerate",
        "dtype": "bf16",
        "batch_size": 1,
        "outcome": "ok",
        "ms_per_token": 230.38,
    }
    assert len(data["load_times"]) == 5


def tiny_cpu_results(tmp_path: Path, *extra: CellResult) -> Path:
    cells = []
    for bs, ms, mib in ((1, 1.5, 410), (8, 0.2, 430), (32, 0.08, 460)):
        samples, memory = (ms * 0.9, ms, ms * 1.1), rss(mib)
        cells.append(CellResult("accelerate", "fp32", bs, Outcome.OK, samples, 0.4, memory, memory))
    path = tmp_path / "cpu-run.json"
    save_run(tiny_run(*cells, *extra), path)
    return path


def test_accept_then_diff_a_cpu_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "baselines"
    results = tiny_cpu_results(tmp_path)
    code, out, _ = bloomperf(capsys, "baseline", "accept", results, "--baselines", folder)
    assert code == 0 and "accepted 3 cells" in out
    written = folder / "cpu.tiny.json"
    assert written.exists()
    code, out, _ = bloomperf(capsys, "diff", results, "--baselines", folder)
    assert code == 0 and "3 cells: 3 same" in out
    # Three times slower on a busy runner: recorded, not judged. Twice the memory: judged.
    run = scaled_run(read_results(results), 3)
    save_run(run, results)
    code, out, _ = bloomperf(capsys, "diff", results, "--baselines", folder)
    assert code == 0 and "3 same" in out
    bloated = replace(run.cells[1], generate_memory=rss(900))
    save_run(run.with_cell(bloated), results)
    code, out, _ = bloomperf(capsys, "diff", results, "--baselines", folder)
    assert code == 1 and "accelerate-fp32-bs8: peak memory regressed" in out


def test_accept_refuses_errors_and_leaves_the_baseline_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "baselines"
    bloomperf(capsys, "baseline", "accept", tiny_cpu_results(tmp_path), "--baselines", folder)
    written = folder / "cpu.tiny.json"
    before = written.read_bytes()
    broken = tiny_cpu_results(
        tmp_path, CellResult("accelerate", "fp32", 64, Outcome.TIMEOUT, message="hung")
    )
    code, _, err = bloomperf(capsys, "baseline", "accept", broken, "--baselines", folder)
    assert code == 2
    one_line_error(err, "accelerate-fp32-bs64 (timeout)", "--force")
    assert written.read_bytes() == before
    code, _, _ = bloomperf(capsys, "baseline", "accept", broken, "--baselines", folder, "--force")
    assert code == 0
    assert json.loads(written.read_text())["cells"][-1]["batch_size"] == 32


def test_a_failed_write_never_leaves_half_a_baseline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "baselines"
    results = tiny_cpu_results(tmp_path)
    bloomperf(capsys, "baseline", "accept", results, "--baselines", folder)
    before = (folder / "cpu.tiny.json").read_bytes()

    def fill_the_disk_halfway() -> None:
        # A real failed write: past RLIMIT_FSIZE the kernel refuses (EFBIG, as a full disk
        # refuses with ENOSPC) once SIGXFSZ is ignored. The old file is left as it is.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, len(before) // 2))

    argv = ["baseline", "accept", str(results), "--baselines", str(folder)]
    done = subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=fill_the_disk_halfway,
    )
    assert done.returncode == 2, done.stderr
    one_line_error(done.stderr, "cpu.tiny.json", "cannot write")
    assert (folder / "cpu.tiny.json").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["cpu.tiny.json"]


def test_accept_into_the_transcribed_baseline_keeps_its_provenance(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, blog_run: RunResult
) -> None:
    folder = tmp_path / "baselines"
    shutil.copytree(BASELINES, folder)
    run = blog_run
    newer = run.with_cell(CellResult("ds-zero", "bf16", 16, Outcome.OK, (20.0, 20.5, 19.5)))
    newer = replace(newer, cells=tuple(c for c in newer.cells if c.id == "ds-zero-bf16-bs16"))
    path = tmp_path / "newer.json"
    save_run(newer, path)
    code, _, _ = bloomperf(capsys, "baseline", "accept", path, "--baselines", folder)
    assert code == 0
    data = json.loads((folder / "8xA100-SXM4-80GB.bloom-176b.json").read_text())
    assert [p["id"] for p in data["provenance"]] == [
        "hf-blog-2022-09-8xA100-80GB",
        "run-2022-09-10T12:00:00Z",
    ]
    cells = {(c["backend"], c["dtype"], c["batch_size"]): c for c in data["cells"]}
    assert data["provenance"][1]["hardware"] == (
        "8 x NVIDIA A100-SXM4-80GB; AMD EPYC 7543 32-Core Processor, 64 cores, 512 GiB RAM"
    )
    assert data["provenance"][1]["software"]["deepspeed"] == "0.7.3"
    assert cells[("ds-zero", "bf16", 16)]["outcome"] == "ok"
    assert cells[("ds-zero", "bf16", 16)]["provenance"] == data["provenance"][1]["id"]
    assert cells[("ds-zero", "bf16", 1)]["provenance"] == "hf-blog-2022-09-8xA100-80GB"
    assert cells[("ds-zero", "bf16", 1)]["ms_per_token"] == 283
    assert run_to_dict(run)["topology"] == data["topology"]["id"]


def test_cells_pytest_benchmark_dropped_can_travel_in_the_run_context(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """pytest-benchmark leaves out a benchmark that timed nothing (an OOM); the context's cells
    bring it back, and a benchmark's own cell wins over a carried copy."""
    data = json.loads(BLOG_BENCHMARK.read_text())
    kept = [
        b
        for b in data["benchmarks"]
        if b["extra_info"]["bloomperf"]["id"] != "accelerate-bf16-bs32"
    ]
    oom = {
        "backend": "accelerate",
        "dtype": "bf16",
        "batch_size": 32,
        "outcome": "oom",
        "message": "CUDA out of memory",
    }
    stale = dict(kept[0]["extra_info"]["bloomperf"]) | {"outcome": "error"}
    kept[-1]["extra_info"]["bloomperf_run"]["cells"] = [oom, stale]
    (tmp_path / "oom.json").write_text(json.dumps(data | {"benchmarks": kept}))
    code, out, _ = bloomperf(capsys, "diff", tmp_path / "oom.json")
    assert code == 1
    assert "accelerate-bf16-bs32: unexpected OOM" in out
    assert "28 cells: 22 same, 5 expected-oom, 1 unexpected-oom; FAILED" in out


def test_a_named_topology_with_another_model_is_incomparable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, blog_run: RunResult
) -> None:
    run = blog_run
    save_run(
        replace(run, model=replace(run.model, name="bloom-7b1", layers=30)), tmp_path / "r.json"
    )
    named = (tmp_path / "r.json", "--baseline", "8xA100-80GB")
    code, _, err = bloomperf(capsys, "diff", *named)
    assert code == 2 and "model bloom-7b1 is not the baseline's bloom-176b" in err
    code, out, _ = bloomperf(capsys, "diff", *named, "--allow-no-baseline")
    assert code == 0
    assert "incomparable: model bloom-7b1 is not the baseline's bloom-176b" in out


PLUGIN_BENCHMARK = RESULTS / "cpu.tiny.plugin-benchmark.json"


def test_a_file_the_real_plugin_wrote_diffs_against_the_cpu_baseline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`pytest -m cpu --benchmark-json` output of the bloomperf plugin (9 cells, tiny model).

    Written before the plugin marked a finished session's run context complete: the gate
    refuses it as incomplete unless told otherwise.
    """
    # Recorded on the machine of 2026-11-29, whose bf16 path used half the memory of the
    # machine the shipped baseline now comes from: bf16 at batch 32 reads improved (passes);
    # so does int8 at batch 32, whose baseline is the larger figure of an AMX machine's.
    code, out, _ = bloomperf(capsys, "diff", PLUGIN_BENCHMARK)
    assert code == 1 and "9 cells: 7 same, 2 improved; FAILED" in out
    assert "incomplete run: the results say the run did not finish (9 cells measured" in out
    code, out, _ = bloomperf(capsys, "diff", PLUGIN_BENCHMARK, "--allow-incomplete")
    assert code == 0 and "9 cells: 7 same, 2 improved" in out
    cpu = json.loads((BASELINES / "cpu.tiny.json").read_text())
    for cell in cpu["cells"]:
        if cell["dtype"] == "fp32" and cell["batch_size"] == 8:
            cell["peak_memory_bytes"] //= 2
    (tmp_path / "cpu.tiny.json").write_text(json.dumps(cpu))
    code, out, _ = bloomperf(
        capsys, "diff", PLUGIN_BENCHMARK, "--baselines", tmp_path, "--allow-incomplete"
    )
    assert code == 1
    assert (
        "accelerate-fp32-bs8: peak memory regressed: measured 0.35 GiB vs expected 0.18 GiB" in out
    )
