"""Two-node groups over a real sshd and pdsh, through DeepSpeed's own PDSH runner, on this machine:
127.0.0.1 and 127.0.0.2 are the two hosts. Tokens equal the plain model's for ds-zero (2 ranks)
and ds-autotp (TP=2) across the nodes, each rank says which host it was started for, and a rank
killed, frozen or its ssh connection dropped on the second node fails the cell, leaving no process
and no /dev/shm segment behind on any host.

The same group also runs through DeepSpeed's Slurm runner on a two-node Slurm cluster (munged,
slurmctld, two slurmd) started here. Skipped only where sshd, ssh-keygen, pdsh or the Slurm
daemons are missing (``.ci/setup`` installs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bloomperf import cli
from bloomperf.catalog.checkpoints import resolve_model
from bloomperf.config.run import LaunchOptions
from bloomperf.harness.dslaunch import rank_group_command, shm_segments
from bloomperf.harness.matrix import Cell
from bloomperf.harness.multinode import GROUP_ENV
from bloomperf.harness.options import resolve_options
from bloomperf.harness.session import Session
from bloomperf.store.results import CellResult, Outcome
from tests.cluster import (
    HOSTS,
    SlurmCluster,
    SshNodes,
    marked_processes,
    running,
)
from tests.tools import require

pytest.importorskip("deepspeed")
SSH_TOOLS = ("sshd", "ssh", "ssh-keygen", "pdsh")
REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodes]:
    for command in SSH_TOOLS:
        require(command)
    cluster = SshNodes(tmp_path_factory.mktemp("sshd"))
    try:
        yield cluster
    finally:
        killed = cluster.stop()
    assert killed == [], f"processes left behind by the multi-node tests: {killed}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("models")).path


@pytest.fixture
def controller_env(nodes: SshNodes, monkeypatch: pytest.MonkeyPatch) -> SshNodes:
    for key, value in nodes.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return nodes


def test_two_nodes_over_ssh_match_the_plain_model(
    controller_env: SshNodes, tiny: Path, tmp_path: Path
) -> None:
    nodes = controller_env
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps([["ds-zero", {}], ["ds-autotp", {}]]))
    rank_env = {
        "BLOOMPERF_PROBE_MODEL": str(tiny),
        "BLOOMPERF_PROBE_CASES_FILE": str(cases_file),
        "BLOOMPERF_PROBE_DIR": str(tmp_path),
        "OMP_NUM_THREADS": "1",
    }
    options = LaunchOptions(hostfile=nodes.hostfile(), ssh_port=nodes.port)
    argv, env = rank_group_command(
        2, options, module="tests.ds_backend_probe", rank_env=rank_env, workdir=tmp_path
    )
    assert argv[argv.index("--launcher") + 1] == "pdsh"
    done = subprocess.run(
        argv,
        env={**os.environ, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        start_new_session=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    # pdsh's own prefix says which host printed what: one launcher per host.
    assert re.search(r"^127\.0\.0\.2: ", done.stdout + done.stderr, re.MULTILINE)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, results in enumerate(ranks):
        assert [r["ssh_to"] for r in results] == [HOSTS[rank]] * 2  # as the rank itself saw it
        assert [r["node_rank"] for r in results] == [str(rank)] * 2
        for result in results:
            for batch in ("bs1", "bs8"):
                assert result[batch]["equal"], f"rank {rank}: {result}"
                assert result[batch]["distinct_new_tokens"] >= 3
    assert [r[0]["details"]["ranks"] for r in ranks] == [2, 2]  # ZeRO-3 over both nodes
    assert [r[1]["details"]["tp"] for r in ranks] == [2, 2]  # TP=2 across the nodes
    assert running(marked_processes(f"{GROUP_ENV}={env[GROUP_ENV]}")) == []
    assert nodes.leftovers() == []


def test_topology_lists_every_node_of_the_hostfile(
    controller_env: SshNodes, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In process: each node answers its probe over ssh, and the command joins the answers."""
    nodes = controller_env
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    args = ["topology", "--hostfile", str(nodes.hostfile()), "--ssh-port", str(nodes.port)]
    assert cli.main(args) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "topology  2xcpu"
    for rank, host in enumerate(HOSTS):
        assert lines[1 + 3 * rank].startswith(f"node {rank:<4} {host} ({socket.gethostname()}): ")
        assert lines[2 + 3 * rank] == "  fabric  no InfiniBand device"
        # The node's own settings: the controller's go to the ranks alone (.deepspeed_env).
        assert lines[3 + 3 * rank].startswith("  nccl    ")
        assert "NCCL_DEBUG=INFO" not in lines[3 + 3 * rank]
    assert lines[-1] == "ranks get GLOO_SOCKET_IFNAME=lo, NCCL_DEBUG=INFO (.deepspeed_env)"
    assert cli.main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    listed = json.loads(out)
    assert out == json.dumps(listed, indent=2) + "\n"  # indented as every document is
    assert (listed["kind"], listed["schema_version"]) == ("bloomperf-topology", 1)
    assert [n["host"] for n in listed["nodes"]] == list(HOSTS)
    assert listed["topology"]["nodes"] == 2 and listed["topology"]["id"] == "2xcpu"
    assert listed["ranks_get"] == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO"}
    assert cli.main([*args, "--include", HOSTS[1], "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [n["host"] for n in listed["nodes"]] == [HOSTS[1]]
    assert listed["topology"]["id"] == "1xcpu"


def test_a_node_that_does_not_answer_is_named_in_one_line(
    controller_env: SshNodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = controller_env
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{HOSTS[0]} slots=1\n127.0.0.3 slots=1\n")  # sshd is not there
    args = ["topology", "--hostfile", str(hostfile), "--ssh-port", str(nodes.port)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("bloomperf: error: --hostfile: node 127.0.0.3 did not answer the probe: ")
    assert err.count("\n") == 1
    assert err.endswith(": 127.0.0.3: ssh exited with exit code 255\n")  # pdsh's last word


# ---- the real run path: bloomperf's worker groups on two nodes --------------------------------


def two_node_session(nodes: SshNodes, tmp_path: Path, **extra: str) -> Session:
    options = resolve_options(
        {
            "new_tokens": "8",
            "cycles": "2",
            "backends": "ds-autotp",
            "dtypes": "fp32",
            "tp": "2",
            "hostfile": str(nodes.hostfile()),
            "ssh_port": str(nodes.port),
            "output": str(tmp_path / "run.json"),
            **extra,
        },
        env={},
    )
    return Session.prepare(options)


def rank_identities(log: str) -> dict[str, dict[str, str]]:
    """rank → the fields of its ``bloomperf-rank`` line (printed by the worker itself)."""
    found = {}
    for line in log.splitlines():
        if "bloomperf-rank " in line:
            fields = dict(f.split("=", 1) for f in line.split("bloomperf-rank ", 1)[1].split())
            found[fields["rank"]] = fields
    return found


def group_of(sess: Session) -> Any:
    assert sess.active is not None and sess.active.group is not None
    return sess.active.group


def fault_then_cycle(fault: Callable[[], None]) -> Callable[..., list[float]]:
    def measure(one_cycle: Callable[[], float], warmup: int, cycles: int) -> list[float]:
        fault()
        return [one_cycle() for _ in range(cycles)]

    return measure


def remote_worker(nodes: SshNodes, host: str) -> psutil.Process:
    for proc in nodes.session_processes(host):
        try:
            argv = proc.cmdline()
            if (
                argv[-1:] == ["bloomperf.harness.worker"]
                and "deepspeed.launcher.launch" not in argv
            ):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no worker rank found on {host}")


def drop_and_wait(nodes: SshNodes, host: str) -> None:
    """Drop the host's ssh connections; give the controller's node watch time to notice."""
    assert nodes.drop_connections(host) >= 1
    time.sleep(2)


def group_marks(sess: Session) -> tuple[str, str]:
    """The group's id (in every process's environment) and its rendezvous port."""
    group = group_of(sess)
    argv = list(group.process.args)
    return group.group_id, argv[argv.index("--master_port") + 1]


def assert_memory_of_both_nodes(cell: CellResult) -> None:
    """No sampler on the controller sees ranks that pdsh started under sshd: each rank's own
    VmHWM, gathered by rank 0, is what load and generate record, node by node."""
    for memory in (cell.load_memory, cell.generate_memory):
        assert memory is not None and memory.source == "ranks", memory
        nodes = dict(memory.per_node_bytes)
        assert set(nodes) == set(HOSTS), nodes
        # a rank that imported torch and holds the model: far above ssh/pdsh's few MB
        assert all(size > 100 * 2**20 for size in nodes.values()), nodes
        assert memory.peak_bytes == sum(nodes.values()) == sum(memory.per_device_bytes)


def assert_nothing_left(nodes: SshNodes, marks: tuple[str, str]) -> None:
    group_id, port = marks
    deadline = time.monotonic() + 15
    while running(marked_processes(f"{GROUP_ENV}={group_id}")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running(marked_processes(f"{GROUP_ENV}={group_id}")) == []
    assert running(nodes.session_processes()) == []
    # Only this group's segments (named after its rendezvous port): other groups may be running.
    assert {s for s in shm_segments() if f"_{port}_" in s} == set()


def test_bloomperf_run_on_two_nodes_then_faults_on_the_second(
    controller_env: SshNodes, tmp_path: Path
) -> None:
    nodes = controller_env
    sess = two_node_session(nodes, tmp_path, cell_timeout="20")
    assert (sess.topology.id, sess.topology.nodes) == ("2xcpu", 2)  # read on both nodes
    # Another job's DeepSpeed launcher on these nodes, as `pkill -f` sees one: no teardown of
    # this run's groups may kill it (DeepSpeed's pdsh runner, SIGTERMed, pkills every launcher
    # of its interpreter on every node).
    other_job = decoy_launcher()
    try:
        ok = sess.measure_cell(Cell("ds-autotp", "fp32", 2))
        assert ok.outcome is Outcome.OK, ok.message
        group = group_of(sess)
        identities = rank_identities(group.log_path.read_text())
        assert identities["0"]["ssh_to"] == HOSTS[0] and identities["1"]["ssh_to"] == HOSTS[1]
        assert [identities[r]["world"] for r in "01"] == ["2", "2"]
        assert_memory_of_both_nodes(ok)
        first_group = group_marks(sess)

        # 1. a rank killed on the second node
        killed = sess.measure_cell(
            Cell("ds-autotp", "fp32", 4),
            fault_then_cycle(lambda: remote_worker(nodes, HOSTS[1]).kill()),
        )
        assert killed.outcome in (Outcome.ERROR, Outcome.TIMEOUT), killed.message
        assert_nothing_left(nodes, first_group)

        # 2. a fresh group; the second node's ssh connection dropped
        ok = sess.measure_cell(Cell("ds-autotp", "fp32", 2))
        assert ok.outcome is Outcome.OK, ok.message
        second_group = group_marks(sess)
        dropped = sess.measure_cell(
            Cell("ds-autotp", "fp32", 4),
            fault_then_cycle(lambda: drop_and_wait(nodes, HOSTS[1])),
        )
        assert dropped.outcome is Outcome.ERROR, dropped.message
        assert dropped.message.startswith("lost node 127.0.0.2: its ssh connection closed")
        assert_nothing_left(nodes, second_group)

        # 3. a fresh group; a rank frozen on the second node (it ignores SIGHUP and SIGTERM)
        ok = sess.measure_cell(Cell("ds-autotp", "fp32", 2))
        assert ok.outcome is Outcome.OK, ok.message
        third_group = group_marks(sess)
        frozen = sess.measure_cell(
            Cell("ds-autotp", "fp32", 4),
            fault_then_cycle(lambda: remote_worker(nodes, HOSTS[1]).suspend()),
        )
        assert frozen.outcome is Outcome.TIMEOUT, frozen.message
        assert_nothing_left(nodes, third_group)  # the frozen rank too: killed on its node
        assert other_job.poll() is None, "a group's teardown killed another job's launcher"
    finally:
        sess.stop()
        other_job.kill()
        other_job.wait()
    assert nodes.leftovers() == []


def decoy_launcher() -> subprocess.Popen[bytes]:
    """A process whose command line is a DeepSpeed launcher's of this interpreter."""
    line = f"{sys.executable} -u -m deepspeed.launcher.launch --world_info=e30="
    return subprocess.Popen(["bash", "-c", f'exec -a "{line}" sleep 900'])


# ---- Slurm: the same group through DeepSpeed's Slurm runner (srun) ---------------------------

SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    for command in SLURM_TOOLS:
        require(command)
    # Not under pytest's tmp folder: munged wants every folder above its socket open to all.
    root = Path(tempfile.mkdtemp(prefix="bloomperf-slurm-"))
    try:
        cluster = SlurmCluster(root)
        try:
            yield cluster
        finally:
            cluster.stop()
        assert cluster.daemons() == [], "Slurm daemons outlived the tests"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_two_slurm_nodes_match_the_plain_model(
    slurm: SlurmCluster, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in slurm.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps([["ds-zero", {}], ["ds-autotp", {}]]))
    rank_env = {
        "BLOOMPERF_PROBE_MODEL": str(tiny),
        "BLOOMPERF_PROBE_CASES_FILE": str(cases_file),
        "BLOOMPERF_PROBE_DIR": str(tmp_path),
        "OMP_NUM_THREADS": "1",
    }
    # Slurm node names are not host names here: the rendezvous is on n1's address.
    options = LaunchOptions(hostfile=slurm.hostfile(), launcher="slurm", master_addr=HOSTS[0])
    argv, env = rank_group_command(
        2, options, module="tests.ds_backend_probe", rank_env=rank_env, workdir=tmp_path
    )
    done = subprocess.run(
        argv,
        env={**os.environ, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        start_new_session=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "srun -n 2" in done.stdout + done.stderr  # DeepSpeed's SlurmRunner ran srun
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, results in enumerate(ranks):
        assert [r["slurm_node"] for r in results] == [SlurmCluster.NODES[rank]] * 2
        for result in results:
            for batch in ("bs1", "bs8"):
                assert result[batch]["equal"], f"rank {rank}: {result}"
    assert [r[0]["details"]["ranks"] for r in ranks] == [2, 2]
    assert [r[1]["details"]["tp"] for r in ranks] == [2, 2]
    assert running(marked_processes(f"{GROUP_ENV}={env[GROUP_ENV]}")) == []
