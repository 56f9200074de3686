"""The dead ends a newcomer met following the README, each through the real command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from packaging.version import Version

from bloomperf import cli
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.bisect import versions_between
from bloomperf.cli.run import link_latest
from bloomperf.core.errors import BloomperfError
from bloomperf.store.results import CellResult, Outcome
from bloomperf.store.results.codec import save_run
from bloomperf.store.results.files import read_results
from tests.leftovers import python_starts, record_python_starts
from tests.wheels import build_wheel

RESULTS = Path(__file__).resolve().parent / "data" / "results"
QUICK = ["--new-tokens", "4", "--cycles", "2", "--no-lock", "--dtypes", "fp32"]


def bloomperf(
    *args: str, cwd: Path | None = None, timeout: float = 600, path: str = ""
) -> subprocess.CompletedProcess[str]:
    """The CLI from this checkout; ``path`` goes first on PYTHONPATH (a recording hook)."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (path, root)))}
    return subprocess.run(
        [sys.executable, "-m", "bloomperf", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def test_pytest_output_is_written_when_every_item_skips(pytester: pytest.Pytester) -> None:
    if detect_topology().device == "cuda":
        pytest.skip("a GPU is here: the GPU matrix runs instead of skipping")
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.gpu
        def test_gpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    out = pytester.path / "results" / "gpu.json"
    result = pytester.runpytest_subprocess(
        "-m", "gpu", "--bloomperf-batch-sizes=1", f"--bloomperf-output={out}"
    )
    result.assert_outcomes(skipped=5)
    result.stdout.fnmatch_lines([f"*nothing measured*empty run written to {out}"])
    run = read_results(out)
    assert run.cells == () and run.complete and run.model.name == "bloom-176b"
    # The README's next line: diff judges the explicit empty run, it does not miss a file.
    diff = bloomperf("diff", str(out))
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "nothing measured" in diff.stdout + diff.stderr


def test_pytest_without_matrix_items_writes_no_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    out = pytester.path / "r.json"
    pytester.runpytest_subprocess(f"--bloomperf-output={out}").assert_outcomes(passed=1)
    assert not out.exists()


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 8), (3, 4), (4, 8)])
def test_a_multi_node_topology_is_planned_across_the_hostfile(
    nodes: int, per_node: int, tmp_path: Path
) -> None:
    # Once planned as 8 ranks of localhost, and with --hostfile a ZeroDivisionError.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"node-{i} slots={per_node}\n" for i in range(nodes)))
    topology = f"{nodes}x{per_node}xA100-SXM4-40GB"
    argv = ["run", "--dry-run", "--model", "bloom-176b", "--topology", topology]
    argv += ["--hostfile", str(hostfile), "--backends", "ds-zero", "--format", "json"]
    done = bloomperf(*argv, "--batch-sizes", "1,2")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    (group,) = plan["groups"]
    assert group["world_size"] == nodes * per_node
    assert "--hostfile" in group["launch"]["argv"] and "--include" not in group["launch"]["argv"]
    for cell in group["cells"]:
        assert "error" not in cell["predicted"]
        assert len(cell["predicted"]["per_gpu_bytes"]) == nodes * per_node


def test_a_multi_node_topology_without_a_hostfile_is_refused_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--dry-run", "--model", "bloom-176b", "--topology", "2x8xA100-SXM4-40GB"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--hostfile" in err


def test_topology_without_dry_run_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once ignored without a word: the run measured this machine instead. Refused before any
    # model is built or loaded: an empty cache stays empty (the tiny model would be built in it).
    cache = tmp_path / "cache"
    monkeypatch.setenv("BLOOMPERF_CACHE", str(cache))
    assert cli.main(["run", "--topology", "8xA100-80GB", "--no-lock"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--dry-run" in err and "--topology" in err
    assert not cache.exists() or not any(cache.iterdir())


def test_latest_json_follows_the_newest_run_and_never_replaces_a_users_file(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    for stamp in ("20260101-000000", "20260102-000000"):
        results = tmp_path / f"bloomperf-{stamp}.json"
        results.write_text("{}")
        assert link_latest(results, out) == tmp_path / "latest.json"
        assert (tmp_path / "latest.json").resolve() == results.resolve()
        assert os.readlink(tmp_path / "latest.json") == results.name  # relative: folder moves
    (tmp_path / "latest.json").unlink()
    (tmp_path / "latest.json").write_text("mine")
    assert link_latest(results, out) == results
    assert (tmp_path / "latest.json").read_text() == "mine"
    assert "left as it is" in out.getvalue()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def needs_a_dependency(folder: Path) -> Path:
    """A pin whose hook (a ``.pth``, as a real package's) imports a module it depends on but
    that ``--no-deps`` left out, at the model's first forward pass."""
    source = (
        "import torch\n"
        "_forward = torch.nn.Linear.forward\n"
        "def forward(self, x):\n"
        "    import first_hour_absent_dependency  # noqa: F401\n"
        "    return _forward(self, x)\n"
        "torch.nn.Linear.forward = forward\n"
    )
    return build_wheel(
        folder,
        "first_hour_pin",
        "1.0",
        {
            "first_hour_pin/__init__.py": source,
            "first_hour_pin-hook.pth": "import first_hour_pin\n",
        },
    )


def test_ab_says_to_use_with_deps_when_an_arm_lacks_a_module(tmp_path: Path) -> None:
    # Once: ModuleNotFoundError in arm B, and nothing said about --with-deps.
    needs_a_dependency(tmp_path / "wheels")
    argv = ["ab", "--b-pin", "first-hour-pin==1.0", "--find-links", str(tmp_path / "wheels")]
    argv += [*QUICK, "--batch-sizes", "1", "--max-time", "60", "--cache-dir", str(tmp_path)]
    done = bloomperf(*argv, "--output", str(tmp_path / "ab.json"), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    hints = [line for line in done.stderr.splitlines() if "--with-deps" in line]
    assert len(hints) == 1 and "arm B" in hints[0] and "first_hour_absent_dependency" in hints[0]
    assert len(hints[0]) <= 200


ONE_CELL_RUNS = [
    RESULTS / "8xA100-SXM4-80GB.blog.results.json",
    RESULTS / "cpu.tiny.steps.results.json",
]


def only_cell_failed(source: Path, outcome: Outcome, folder: Path) -> Path:
    """``source``'s first cell alone, as a run whose cell did not measure (``outcome``)."""
    run = read_results(source)
    cell = run.cells[0]
    failed = CellResult(
        cell.backend, cell.dtype, cell.batch_size, outcome, message=f"{outcome.value}: planted"
    )
    path = folder / f"{source.stem}.{outcome.value}.json"
    save_run(replace(run, cells=(failed,)), path)
    return path


@pytest.mark.parametrize("source", ONE_CELL_RUNS, ids=lambda p: p.name.split(".")[0])
@pytest.mark.parametrize("outcome", [Outcome.ERROR, Outcome.TIMEOUT, Outcome.OOM, Outcome.SKIPPED])
def test_report_on_a_run_whose_only_cell_failed(
    source: Path, outcome: Outcome, tmp_path: Path
) -> None:
    # Once: internal error: TypeError, exit 3, two PNGs left behind.
    results = only_cell_failed(source, outcome, tmp_path)
    done = bloomperf("report", str(results), "--out-dir", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning from the plotting library either
    written = {p.name for p in (tmp_path / "report").iterdir()}
    assert {"index.html", "report.md", "memory.png"} <= written
    assert not [name for name in written if name.startswith(".")]  # the staging folder is gone


def test_a_report_that_fails_leaves_no_png_behind(tmp_path: Path) -> None:
    out = tmp_path / "report"
    (out / "memory.png").mkdir(parents=True)  # a folder where a plot goes: refused
    done = bloomperf("report", str(ONE_CELL_RUNS[0]), "--out-dir", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 1 and "memory.png" in done.stderr
    assert [p.name for p in out.iterdir()] == ["memory.png"]


@given(
    listed=st.sets(st.integers(0, 60), min_size=1, max_size=25),
    asked=st.integers(0, 60),
)
def test_bisect_names_the_versions_next_to_one_the_index_lacks(
    listed: set[int], asked: int
) -> None:
    # Once: "4.46.0 is not in the index (found <the newest 12>)", nothing near the range.
    available = sorted(Version(f"4.{n // 10}.{n % 10}") for n in listed)
    version = Version(f"4.{asked // 10}.{asked % 10}")
    assume(version not in available)
    with pytest.raises(BloomperfError) as raised:
        versions_between(available, str(version), "9.0")
    message = str(raised.value)
    below = [v for v in available if v < version]
    above = [v for v in available if v > version]
    assert (f"nearest below: {', '.join(map(str, below[-3:]))}" in message) == bool(below)
    assert (f"nearest above: {', '.join(map(str, above[:3]))}" in message) == bool(above)
    assert str(version) in message.splitlines()[0]


def shard_folder(folder: Path, tp: int, kernel_inject: bool) -> Path:
    """The marker `bloomperf shard` writes, which is what the check before loading reads."""
    folder.mkdir()
    marker = {"tp": tp, "kernel_inject": kernel_inject}
    (folder / "bloomperf-shard.json").write_text(json.dumps(marker))
    return folder


@pytest.mark.parametrize(("sharded_tp", "tp"), [(2, 1), (4, 2), (1, 2)])
def test_a_shard_of_another_tp_is_refused_before_loading(
    sharded_tp: int, tp: int, tmp_path: Path
) -> None:
    # Once: refused after 2 min 18 s of loading; the README said "checked when parsed".
    folder = shard_folder(tmp_path / "shards", sharded_tp, kernel_inject=False)
    starts = tmp_path / "starts"
    done = bloomperf(
        "run",
        *QUICK,
        "--backends",
        "ds-autotp",
        "--tp",
        str(tp),
        "--sharded",
        str(folder),
        "--output",
        str(tmp_path / "r.json"),
        path=record_python_starts(starts),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "error" in x]
    assert f"sharded for TP={sharded_tp}" in line and f"runs {tp} rank(s)" in line
    # Refused before loading: the command was the only Python process; no worker, no launcher.
    assert len(python_starts(starts)) == 1, python_starts(starts)
    assert not list((tmp_path).glob("r.json.logs/*"))


def test_the_start_recorder_sees_a_commands_children(tmp_path: Path) -> None:
    """The event the two refusals above rest on: a child Python process is recorded, so one
    line means no worker or rank was started, not that the hook saw nothing."""
    starts = tmp_path / "starts"
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    env = {**os.environ, "PYTHONPATH": record_python_starts(starts)}
    subprocess.run([sys.executable, "-c", child], env=env, check=True)
    recorded = python_starts(starts)
    assert len(recorded) == 2 and len({line.split()[0] for line in recorded}) == 2, recorded


def test_a_shard_of_the_other_backend_is_refused_before_loading(tmp_path: Path) -> None:
    folder = shard_folder(tmp_path / "shards", 2, kernel_inject=True)
    done = bloomperf(
        "run",
        *QUICK,
        "--backends",
        "ds-autotp",
        "--tp",
        "2",
        "--sharded",
        str(folder),
        "--output",
        str(tmp_path / "r.json"),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "written for ds-inference, not ds-autotp" in done.stderr


def test_shard_on_cpu_defaults_to_a_dtype_deepspeeds_cpu_accelerator_accepts() -> None:
    # Once: --device cpu kept the GPU default fp16 and failed after 2 min 19 s on a CPU whose
    # oneDNN has no fp16. DeepSpeed's own accelerator is the judge, as init_inference asks it.
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    from bloomperf.backends.ds_inference import DeepSpeedAutoTPBackend
    from bloomperf.catalog.dtypes import load_torch_dtype
    from bloomperf.cli.shard import DEFAULT_DTYPE

    default = DEFAULT_DTYPE["cpu"]
    assert load_torch_dtype(default) in CPU_Accelerator().supported_dtypes()
    assert default in DeepSpeedAutoTPBackend.dtypes


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_shard_asks_for_the_cpu_dtype_before_starting_ranks(dtype: str, tmp_path: Path) -> None:
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    from bloomperf.catalog.dtypes import load_torch_dtype

    out = tmp_path / "out"
    argv = ["shard", "--tp", "1", "--device", "cpu", "--dtype", dtype, "--out-dir", str(out)]
    starts = tmp_path / "starts"
    done = bloomperf(*argv, path=record_python_starts(starts))
    assert done.returncode == 2, done.stderr
    # Refused before starting ranks: the command was the only Python process.
    assert len(python_starts(starts)) == 1, python_starts(starts)
    accepted = load_torch_dtype(dtype) in CPU_Accelerator().supported_dtypes()
    # Accepted: the next check (TP=1 saves nothing) speaks; refused: the dtype, at once.
    expected = "--tp 1:" if accepted else f"--dtype {dtype}: DeepSpeed's CPU accelerator"
    assert expected in done.stderr, done.stderr


def test_pytest_shows_progress_live_without_dash_s(pytester: pytest.Pytester) -> None:
    # Once: the README said progress shows "live without -s"; nothing appeared (pytest captured
    # the lines with the test's own output, and showed them only for a failure).
    pytester.makepyfile(
        test_matrix="""
        import pytest

        @pytest.mark.cpu
        def test_cpu(bloomperf_cell, bloomperf, benchmark):
            bloomperf.check(bloomperf_cell, benchmark)
        """
    )
    result = pytester.runpytest_subprocess(
        "-m",
        "cpu",
        "--bloomperf-batch-sizes=1",
        "--bloomperf-dtypes=fp32",
        "--bloomperf-new-tokens=4",
        "--bloomperf-cycles=2",
        "--bloomperf-no-lock",
        f"--bloomperf-output={pytester.path / 'r.json'}",
    )
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    progress = [
        i for i, line in enumerate(lines) if "bloomperf: cell 1/1: accelerate-fp32-bs1" in line
    ]
    summary = next(i for i, line in enumerate(lines) if "bloomperf (cpu)" in line)
    assert progress and progress[0] < summary  # during the test, not in a failure report
