"""The dead ends a newcomer met following the README (issue 24), each through the real command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloomperf import cli
from bloomperf.catalog.topology import detect_topology
from bloomperf.cli.run import link_latest
from bloomperf.store.results.files import read_results

QUICK = ["--new-tokens", "4", "--cycles", "2", "--no-lock", "--dtypes", "fp32"]


def bloomperf(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
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
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Once ignored without a word: the run measured this machine instead.
    started = time.monotonic()
    assert cli.main(["run", "--topology", "8xA100-80GB", "--no-lock"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--dry-run" in err and "--topology" in err
    assert time.monotonic() - started < 5  # before any model is built or loaded


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
