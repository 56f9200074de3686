"""`bloomperf serve` against a real vLLM server (the serving venv, tiny-serving): a sweep and its
figures beside the server's own /metrics, and each failure's defined outcome. One server is
shared by the tests that only need one running (``--endpoint``); the tests of starting and
stopping start their own, as they must."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.core.lockdir import LOCK_DIR_ENV
from bloomperf.harness.server import Server, ServerSpec
from bloomperf.harness.sweep import Managed
from tests.leftovers import marked_env, marked_processes, wait_gone

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-serving" / "bin" / "python"
BLOOMPERF = [sys.executable, "-m", "bloomperf"]

if not PYTHON.exists():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{PYTHON} is missing: BLOOMPERF_PROFILE=serving bash .ci/setup")
    pytest.skip(
        "no serving venv (BLOOMPERF_PROFILE=serving bash .ci/setup)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One vLLM server for this file's --endpoint tests (started as bloomperf starts one),
    stopped when the file is done: an idle server polls, and the worker goes on to other files."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    spec = ServerSpec(python=PYTHON, model=resolve_model("tiny-serving").path, log_path=log)
    with Server(spec) as server:
        Managed(server).ensure()
        yield server.url


def private_env(tmp: Path, mark: Path | None = None) -> dict[str, str]:
    """A run's environment with a lock folder of its own (the machine's CPU lock may be held by
    another bloomperf run), marked so that its processes can be found afterwards."""
    env = marked_env(mark) if mark is not None else dict(os.environ)
    return {**env, LOCK_DIR_ENV: str(tmp / "locks")}


def serve(
    *args: str, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BLOOMPERF, "serve", "--python", str(PYTHON), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_a_sweep_measures_each_rate_and_agrees_with_the_servers_metrics(served, tmp_path):
    out = tmp_path / "sweep.json"
    done = serve(
        "--endpoint",
        served,
        "--rates",
        "1,inf",
        "--requests",
        "6",
        "--refine",
        "1",
        "--sla-ttft",
        "30",
        "--sla-token-rate",
        "0.5",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    (cell,) = results["cells"]
    sweep = cell["details"]["serving"]
    assert results["complete"] and sweep["effective_rps"] == "inf"  # this SLA holds even at inf
    # The server said what it is (/version); on this machine, it is filed under its topology.
    assert results["environment"]["serving_engine"].startswith("vllm 0.")
    assert results["environment"]["serving_endpoint"] == served
    assert results["topology"] == results["environment"]["topology"]
    for rate in sweep["rates"]:
        assert rate["outcome"] == "ok" and rate["completed"] == rate["requests"] == 6
        assert rate["ttft_ms"]["p50"] <= rate["ttft_ms"]["p90"] <= rate["ttft_ms"]["p99"]
        assert rate["itl_ms"]["p50"] > 0 and rate["output_throughput"] > 0
        # The same requests seen from both ends. The client sends before the server's clock
        # starts, so its TTFT is at least the server's. How far above depends on how long the
        # client waited for a core (1.35x at a load of 15 on 2 cores in docs/serving.md, 17x in
        # one CI run beside two other test workers), so no constant bounds it. What this rate
        # measured does: the mean is within the client's own spread, and no first token comes
        # later than the rate's whole run (first send to last reply).
        client, server = rate["mean_ms"], rate["server_mean_ms"]
        assert server["ttft"] * 0.95 <= client["ttft"] <= rate["ttft_ms"]["p99"] * (1 + 1e-9)
        assert rate["ttft_ms"]["p99"] <= rate["duration_s"] * 1000
        # A client kept from its core reads the stream's tokens in bursts: its mean gap shrinks
        # (0.24x and 0.09x the server's beside two other test workers) or grows (8.7x, 59 ms
        # against 6.8, at inf in a loaded CI run), so no multiple of the server's bounds it.
        # The run does: every gap lies between a request's first token and its last reply.
        assert server["itl"] > 0 and 0 < client["itl"] <= rate["duration_s"] * 1000
    assert "effective throughput" in done.stdout
    judge_the_real_sweep(out, cell["figures"])


def judge_the_real_sweep(out: Path, figures: dict[str, list[float]]) -> None:
    """The sweep's results file through the one gate: accepted as a baseline, it is the same
    as itself; its effective throughput planted at a third fails (exit 1), at three times
    passes; a doubled p99 ITL fails; history keeps it and the report shows it."""
    # Every rate met the SLA: the effective throughput is what the server completed at inf.
    assert set(figures) == {"serving_effective_rps", "serving_ttft_p99_ms", "serving_itl_p99_ms"}
    assert all(len(v) == 1 and v[0] > 0 for v in figures.values())
    folder = out.parent
    accept = bloomperf_cli("baseline", "accept", str(out), "--baselines", str(folder / "bl"))
    assert accept.returncode == 0, accept.stderr
    for metric, factor, code in [
        (None, 1.0, 0),
        ("serving_effective_rps", 1 / 3, 1),
        ("serving_effective_rps", 3.0, 0),
        ("serving_itl_p99_ms", 2.5, 1),
    ]:
        data = json.loads(out.read_text())
        if metric is not None:
            data["cells"][0]["figures"][metric] = [v * factor for v in figures[metric]]
        planted = folder / f"planted-{metric}-{factor:g}.json"
        planted.write_text(json.dumps(data))
        done = bloomperf_cli("diff", str(planted), "--baselines", str(folder / "bl"))
        assert done.returncode == code, f"{metric} x{factor:g}: {done.stdout}{done.stderr}"
    history = bloomperf_cli("history", "add", str(out), "--history", str(folder / "history"))
    assert history.returncode == 0, history.stderr
    report = bloomperf_cli(
        "report", str(out), "--baselines", str(folder / "bl"), "--out-dir", str(folder / "rep")
    )
    assert report.returncode == 0, report.stderr
    assert "serve-fastgen-1200-128 fp32" in (folder / "rep" / "report.md").read_text()
    assert (folder / "rep" / "serving_curve.png").stat().st_size > 10_000


def bloomperf_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLOOMPERF, *argv], capture_output=True, text=True, timeout=300)


def test_repeated_sweeps_keep_a_sample_of_each_figure_per_sweep(served, tmp_path):
    """`--repeat 2`: two sweeps on the same server, each with requests of its own; the cell's
    figures have two samples each and the second sweep's rows are kept beside the first's."""
    out = tmp_path / "sweep.json"
    args = ["--rates", "inf", "--requests", "3", "--refine", "0", "--sla-ttft", "30"]
    done = serve("--endpoint", served, *args, "--repeat", "2", "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    (cell,) = json.loads(out.read_text())["cells"]
    assert {k: len(v) for k, v in cell["figures"].items()} == {
        "serving_effective_rps": 2,
        "serving_ttft_p99_ms": 2,
        "serving_itl_p99_ms": 2,
    }
    (second,) = cell["details"]["serving"]["repeats"]
    assert [r["completed"] for r in second["rates"]] == [3]
    assert "sweep 2 of 2:" in done.stdout


def test_an_unmeetable_sla_gives_no_effective_throughput_and_fails(served, tmp_path):
    done = serve(
        "--endpoint",
        served,
        "--rates",
        "2",
        "--requests",
        "3",
        "--refine",
        "0",
        "--sla-ttft",
        "0.000001",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "effective throughput: 0 requests/s" in done.stdout


def test_a_bad_engine_argument_is_one_line_and_exit_2(tmp_path):
    done = serve(
        "--engine-args",
        "--no-such-engine-flag 3",
        "--rates",
        "1",
        "--requests",
        "1",
        env=private_env(tmp_path),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        len([x for x in lines if "--engine-args" in x]) == 1 and "no-such-engine-flag" in lines[-1]
    )


def test_a_port_in_use_is_named(served):
    port = served.rsplit(":", 1)[1]
    done = serve("--port", port, "--rates", "1", "--requests", "1")
    assert done.returncode == 2 and f"--port: {port} is in use" in done.stderr


def test_a_server_never_ready_is_a_timeout_with_its_log_and_leaves_nothing(tmp_path):
    out = tmp_path / "sweep.json"
    mark = tmp_path / "mark"
    done = serve(
        "--ready-timeout",
        "3",
        "--rates",
        "1,2",
        "--requests",
        "1",
        "-o",
        str(out),
        env=private_env(tmp_path, mark),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (cell,) = json.loads(out.read_text())["cells"]
    (rate,) = cell["details"]["serving"]["rates"]
    assert rate["outcome"] == "timeout" and "log tail" in rate["message"]
    assert cell["outcome"] == "timeout" and not cell["figures"]  # the gate fails it
    assert not marked_processes(mark, wait_s=10)


def server_processes(mark: Path) -> list[psutil.Process]:
    """The marked processes and their descendants: vLLM's engine core retitles itself
    (setproctitle), which overwrites its /proc environ, so the mark is not readable there."""
    found = []
    for pid in marked_processes(mark, wait_s=0):
        try:
            process = psutil.Process(pid)
            found += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return found


def is_engine_core(process: psutil.Process) -> bool:
    """vLLM's engine core (setproctitle names it VLLM::EngineCore; comm keeps 15 characters)."""
    try:
        return "EngineCor" in process.name() or "EngineCore" in " ".join(process.cmdline())
    except psutil.Error:
        return False


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_stopped_controller_leaves_no_server_or_engine_core(tmp_path, stop):
    mark = tmp_path / "mark"
    controller = subprocess.Popen(
        [*BLOOMPERF, "serve", "--python", str(PYTHON), "--rates", "1", "--requests", "50"],
        env=private_env(tmp_path, mark),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115 (the child holds it)
    )
    try:
        deadline = time.monotonic() + 900
        engine = []
        while not engine and time.monotonic() < deadline and controller.poll() is None:
            time.sleep(1)
            engine = [p for p in server_processes(mark) if is_engine_core(p)]
        assert engine, f"no engine core: {(tmp_path / 'stderr').read_text()[-2000:]}"
        controller.send_signal(stop)
        controller.wait(timeout=60)
    finally:
        controller.kill()  # a failed wait must not leave the controller running
        controller.wait(timeout=60)
    assert not marked_processes(mark, wait_s=10), f"left after {stop.name}"
    assert all(wait_gone(p.pid, 10) for p in engine), f"an engine core outlived {stop.name}"


def api_server(mark: Path) -> psutil.Process | None:
    """The running vLLM API server of a marked run (the keeper's child, not the keeper, whose
    command line names the server's too), or None."""
    for process in server_processes(mark):
        try:
            words = process.cmdline()
            if "vllm.entrypoints.openai.api_server" in words and not any(
                "serve_keeper" in w for w in words
            ):
                return process
        except psutil.Error:
            pass
    return None


def rates_written(out: Path) -> list[dict]:
    try:
        return json.loads(out.read_text())["cells"][0]["details"]["serving"]["rates"]
    except (OSError, ValueError, KeyError, IndexError):
        return []


def test_a_server_killed_during_a_rate_gives_that_rate_error_and_the_sweep_goes_on(tmp_path):
    """The server SIGKILLed while the second rate's requests are in flight: that rate is
    ``error`` with the log's tail, the server is started again for the third, the first
    rate's figures stay in the results file, and no server or engine core is left."""
    out = tmp_path / "sweep.json"
    log = out.with_suffix(".server.log")
    mark = tmp_path / "mark"
    # Rates whose 8 requests take 2 to 4 s: long enough for the kill to land mid-rate (the
    # second rate's first request, the client's test request, is seen before the timed ones).
    sweep = ["--rates", "2,3,4", "--requests", "8", "--refine", "0", "-o", str(out)]
    sla = ["--sla-ttft", "30", "--sla-token-rate", "0.5"]  # every rate meets it: none is error
    controller = subprocess.Popen(
        [*BLOOMPERF, "serve", "--python", str(PYTHON), *sweep, *sla],
        env=private_env(tmp_path, mark),
        cwd=ROOT,
        stdout=open(tmp_path / "stdout", "wb"),  # noqa: SIM115 (the child holds it)
        stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115
    )
    try:
        deadline = time.monotonic() + 1200
        while len(rates_written(out)) < 1 and time.monotonic() < deadline:
            assert controller.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            time.sleep(0.5)
        first_rate_ends = log.stat().st_size
        # The second rate's first request reached the server: kill it mid-rate.
        while "POST /v1/completions" not in log.read_text(errors="replace")[first_rate_ends:]:
            assert controller.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        killed = api_server(mark)
        assert killed is not None
        engine = [p for p in killed.children(recursive=True) if is_engine_core(p)]
        keeper = killed.parent()  # the server itself dies, as a crash would kill it
        assert keeper is not None and "serve_keeper" in " ".join(keeper.cmdline())
        killed.send_signal(signal.SIGKILL)
        controller.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        controller.kill()
        controller.wait(timeout=60)
    stderr = (tmp_path / "stderr").read_text()
    assert controller.returncode == 1, stderr[-2000:]  # a rate failed
    first, second, third = rates_written(out)
    assert (first["rate"], second["rate"], third["rate"]) == (2, 3, 4)
    assert first["outcome"] == "ok" and first["completed"] == 8 and first["ttft_ms"]["p99"] > 0
    assert second["outcome"] == "error" and "died during this rate" in second["message"]
    assert third["outcome"] == "ok" and third["completed"] == 8, third["message"]
    assert json.loads(out.read_text())["complete"]
    assert not marked_processes(mark, wait_s=10), "a server process outlived the sweep"
    assert all(wait_gone(p.pid, 10) for p in engine), "the killed server's engine core lives on"
