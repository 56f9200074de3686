"""Multi-node launch commands, checked against DeepSpeed's own runner code (no process started):
its hostfile parser, its --include/--exclude resolution, its argument parser and its reading of
.deepspeed_env."""

from __future__ import annotations

import collections
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomperf.config.run import LaunchOptions
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.dslaunch import rank_group_command
from bloomperf.harness.hostfile import active_hosts, parse_hostfile, read_hostfile
from bloomperf.harness.multinode import DS_ENV_FILE, ENTRY_SCRIPT, GROUP_ENV
from bloomperf.harness.options import resolve_options
from bloomperf.harness.rankenv import (
    adopt_launcher_rank,
    identity_line,
    node_name,
    report_identity,
    ssh_target,
)

runner = pytest.importorskip("deepspeed.launcher.runner")

HOSTFILES = [
    "worker-0 slots=8\nworker-1 slots=8\n",
    "# two nodes\n\n  worker-0 slots=4 max_slots=4\nworker-1 slots=2 # rack B\n",
    "10.0.0.1 slots=16\n",
]
# DeepSpeed refuses these too.
BAD_HOSTFILES = ["", "# only a comment\n", "worker-0\n", "worker-0 slots=2\nworker-0 slots=2\n"]


@pytest.mark.parametrize("text", HOSTFILES)
def test_hostfiles_parse_as_deepspeed_parses_them(text: str) -> None:
    expected = runner._parse_hostfile(text.splitlines(keepends=True))
    assert parse_hostfile(text.splitlines()) == dict(expected)
    assert list(parse_hostfile(text.splitlines())) == list(expected)  # the order ranks follow


@pytest.mark.parametrize("text", BAD_HOSTFILES)
def test_hostfiles_deepspeed_refuses_are_one_line_errors(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        runner._parse_hostfile(text.splitlines(keepends=True))
    path = tmp_path / "hostfile"
    path.write_text(text)
    with pytest.raises(BloomperfError) as info:
        read_hostfile(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


hostfile_lines = st.lists(
    st.one_of(
        st.builds(
            "{}{} slots={}{}".format,
            st.sampled_from(["", "  ", "\t"]),
            st.sampled_from(["node-1", "node-2", "10.0.0.7", "n_3.rack"]),
            st.integers(1, 16),
            st.sampled_from(["", " max_slots=8", "  # rack B"]),
        ),
        st.sampled_from(["", "   ", "# a comment", "  # indented comment"]),
        st.sampled_from(["node-1", "node-1 slots=", "node-1 slots=x", "slots=2", "node-1 gpus=2"]),
    ),
    max_size=6,
)


@given(hostfile_lines)
def test_any_hostfile_parses_or_is_refused_as_deepspeed_does(lines: list[str]) -> None:
    """Lines of every kind DeepSpeed's parser meets: entries with indents and trailing text, a
    host listed twice, comments, blank lines, lines it refuses; and no line at all."""
    try:
        expected = runner._parse_hostfile([line + "\n" for line in lines])
    except ValueError:
        with pytest.raises(BloomperfError) as info:
            parse_hostfile(lines, "hosts")
        assert str(info.value).startswith("hosts") and "\n" not in str(info.value)
        return
    assert list(parse_hostfile(lines).items()) == list(expected.items())


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["# nodes", "", "a slots=2", "b"], "hosts:4: expected 'HOST slots=N', got 'b'"),
        (["a slots=1", "a slots=2"], "hosts:2: host a listed twice"),
        (["-oProxyCommand=x slots=1"], "hosts:1: '-oProxyCommand=x' is not a host name or address"),
        (["# only", ""], "hosts: no 'HOST slots=N' lines"),
        (["b" * 70], f"hosts:1: expected 'HOST slots=N', got {'b' * 60!r}"),
        ([f"$({'x' * 70}) slots=1"], f"hosts:1: {'$(' + 'x' * 58!r} is not a host name or address"),
    ],
)
def test_a_refused_hostfile_names_its_line_counted_from_one(lines: list[str], message: str) -> None:
    """Blank and comment lines count; what the line holds is shown up to 60 characters."""
    with pytest.raises(BloomperfError) as info:
        parse_hostfile(lines, "hosts")
    assert str(info.value) == message
    with pytest.raises(BloomperfError) as info:
        parse_hostfile(lines)
    assert str(info.value) == message.replace("hosts", "hostfile", 1)


def test_a_hostfile_that_is_not_a_file_is_named_as_a_hostfile(tmp_path: Path) -> None:
    with pytest.raises(BloomperfError) as info:
        read_hostfile(tmp_path / "nowhere")
    assert str(info.value) == f"{tmp_path / 'nowhere'}: hostfile not found"
    with pytest.raises(BloomperfError) as info:
        read_hostfile(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, expected a hostfile file"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"include": "a", "exclude": "b"},
            "--include and --exclude: use one or the other, not both",
        ),
        (
            {"include": "a", "num_nodes": 1},
            "--include/--exclude cannot be combined with --num-nodes",
        ),
        (
            {"exclude": "a", "num_nodes": 1},
            "--include/--exclude cannot be combined with --num-nodes",
        ),
        ({"include": "a:x"}, "--include: 'a:x' is not NAME[:SLOT[,SLOT...]]"),
        ({"exclude": "b@a:0,1,9"}, "--exclude: host a has no slot 9"),
        ({"include": "z"}, "--include: host 'z' is not in the hostfile"),
    ],
)
def test_filters_that_cannot_apply_are_one_line_naming_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(BloomperfError) as info:
        active_hosts({"a": 2, "b": 2}, LaunchOptions(**options))
    assert str(info.value) == message


def test_a_node_with_no_slot_is_refused_though_deepspeed_takes_it() -> None:
    assert dict(runner._parse_hostfile(["a slots=0\n", "b slots=1\n"])) == {"a": 0, "b": 1}
    with pytest.raises(BloomperfError, match="host a has slots=0"):
        parse_hostfile(["a slots=0", "b slots=1"])


FILTERS: list[dict[str, Any]] = [
    {},
    {"include": "b"},
    {"include": "a:0,2@c:1"},
    {"include": "a:1@a"},
    {"exclude": "b"},
    {"exclude": "a:0@c"},
    {"num_nodes": 2},
]


@pytest.mark.parametrize("options", FILTERS)
def test_include_exclude_resolve_as_deepspeeds_runner(options: dict[str, Any]) -> None:
    pool = collections.OrderedDict([("a", 4), ("b", 2), ("c", 2)])
    active = runner.parse_inclusion_exclusion(
        pool, options.get("include", ""), options.get("exclude", "")
    )
    active = runner.apply_num_nodes_and_gpus(active, options.get("num_nodes", -1), -1)
    assert active_hosts(dict(pool), LaunchOptions(**options)) == {
        h: list(s) for h, s in active.items()
    }


def test_unknown_host_or_slot_in_a_filter_is_refused_like_deepspeed() -> None:
    pool = {"a": 2}
    for spec in ("z", "a:5"):
        with pytest.raises(ValueError):
            runner.parse_inclusion_exclusion(collections.OrderedDict(pool), spec, "")
        with pytest.raises(BloomperfError, match="--include"):
            active_hosts(pool, LaunchOptions(include=spec))


HOSTS = ("a", "b", "c", "d")


@st.composite
def pools_and_filters(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Any]]:
    """A hostfile's pool (1 to 4 hosts of 1 to 4 slots) and one way to narrow it: --include or
    --exclude of node specs (a host of the pool or not, all its slots or some, slots past its
    last among them), or --num-nodes up to past the pool's size."""
    hosts = draw(st.lists(st.sampled_from(HOSTS), min_size=1, max_size=4, unique=True))
    pool = {host: draw(st.integers(1, 4)) for host in hosts}
    kind = draw(st.sampled_from(["include", "exclude", "num_nodes"]))
    if kind == "num_nodes":
        return pool, {"num_nodes": draw(st.integers(1, 5))}
    specs = []
    for _ in range(draw(st.integers(1, 3))):
        host = draw(st.sampled_from([*hosts, "zz"]))
        slots = draw(st.lists(st.integers(0, 5), max_size=3))
        specs.append(host + (":" + ",".join(map(str, slots)) if slots else ""))
    return pool, {kind: "@".join(specs)}


@given(pools_and_filters())
def test_any_filter_resolves_or_is_refused_as_deepspeeds_runner_does(
    case: tuple[dict[str, int], dict[str, Any]],
) -> None:
    pool, options = case
    try:
        active = runner.parse_inclusion_exclusion(
            collections.OrderedDict(pool), options.get("include", ""), options.get("exclude", "")
        )
        expected = runner.apply_num_nodes_and_gpus(active, options.get("num_nodes", -1), -1)
    except ValueError:
        option = "--" + next(iter(options)).replace("_", "-")
        with pytest.raises(BloomperfError, match=f"^{option}: "):
            active_hosts(pool, LaunchOptions(**options))
        return
    if not expected:  # every slot excluded: DeepSpeed's runner would launch nothing
        with pytest.raises(BloomperfError, match=r"^--exclude: .* leaves no slot of the hostfile"):
            active_hosts(pool, LaunchOptions(**options))
        return
    found = active_hosts(pool, LaunchOptions(**options))
    assert found == {h: list(s) for h, s in expected.items()}
    assert list(found) == list(expected)  # hostfile order: the order ranks are numbered in


def multinode(tmp_path: Path, **options: Any) -> tuple[list[str], dict[str, str], Any]:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a slots=2 max_slots=2\nnode-b slots=2\n")
    argv, env = rank_group_command(
        4,
        LaunchOptions(hostfile=hostfile, **options),
        python="/py",
        rank_env={"BLOOMPERF_WORKER_SPEC_DATA": "eyJhIjogMX0=", "OMP_NUM_THREADS": "1"},
        workdir=tmp_path,
    )
    assert argv[:4] == ["/py", "-u", "-m", "deepspeed.launcher.runner"]
    return argv, env, runner.parse_args(argv[4:])  # DeepSpeed's own argument parser


def test_the_command_is_deepspeeds_runner_with_its_multinode_options(tmp_path: Path) -> None:
    _, env, args = multinode(tmp_path, ssh_port=2222, launcher="slurm", include="node-a@node-b")
    assert args.hostfile == str(tmp_path / "hosts")
    assert (args.launcher, args.ssh_port, args.include) == ("slurm", 2222, "node-a@node-b")
    assert args.master_addr == "node-a" and args.no_local_rank and not args.no_ssh
    # A script, not --module: DeepSpeed's Slurm runner would drop --module.
    assert (args.user_script, args.user_args) == (str(ENTRY_SCRIPT), ["bloomperf.harness.worker"])
    assert not args.module and ENTRY_SCRIPT.is_file()
    assert env[DS_ENV_FILE] == str(tmp_path / ".deepspeed_env")
    _, _, defaults = multinode(tmp_path)
    assert defaults.launcher == "pdsh" and defaults.ssh_port is None


def test_remote_environment_goes_through_deepspeeds_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("HF_HOME", "/data/hf")
    monkeypatch.setenv("NCCL_BAD", "$(id)")  # would run in pdsh's remote shell: not forwarded
    _, env, args = multinode(tmp_path)
    # Read it as DeepSpeed's runner does (runner.main: split('=', maxsplit=1) per line).
    exports = {}
    for line in Path(env[DS_ENV_FILE]).read_text().splitlines(keepends=True):
        key, value = line.split("=", maxsplit=1)
        exports[key] = value.strip()
    assert exports["NCCL_IB_HCA"] == "mlx5_0" and exports["GLOO_SOCKET_IFNAME"] == "eth0"
    assert exports["HF_HOME"] == "/data/hf" and "NCCL_BAD" not in exports
    assert exports["BLOOMPERF_WORKER_SPEC_DATA"] == "eyJhIjogMX0="
    assert exports["MASTER_ADDR"] == "node-a" and exports["MASTER_PORT"] == str(args.master_port)
    assert exports[GROUP_ENV] == env[GROUP_ENV]
    # DeepSpeed's PDSH runner quotes nothing of ours (values stay plain shell words).
    pdsh = runner.PDSHRunner(args, "e30=")
    for key, value in exports.items():
        pdsh.add_export(key, value)
    assert pdsh.exports["BLOOMPERF_WORKER_SPEC_DATA"] == "eyJhIjogMX0="


def test_the_users_own_deepspeed_env_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".deepspeed_env").write_text("NCCL_SOCKET_IFNAME=ib0\n")
    monkeypatch.setenv("HOME", str(home))
    _, env, _ = multinode(tmp_path)
    lines = Path(env[DS_ENV_FILE]).read_text().splitlines()
    assert lines[0] == "NCCL_SOCKET_IFNAME=ib0"


def test_launcher_options_are_validated() -> None:
    options = resolve_options(
        {"launcher": "slurm", "ssh_port": "2222", "include": "n1:0,1@n2"}, env={}
    )
    assert (options.launcher, options.ssh_port, options.include) == (
        "slurm",
        2222,
        "n1:0,1@n2",
    )
    for name, value in (("launcher", "mpich"), ("include", "n1; id"), ("master_addr", "-oX")):
        with pytest.raises(BloomperfError, match=f"--{name.replace('_', '-')}"):
            resolve_options({name: value}, env={})


def test_slurm_and_mpi_ranks_take_their_numbers_from_their_launcher() -> None:
    slurm = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }
    assert adopt_launcher_rank(slurm) == "slurm"
    assert (slurm["RANK"], slurm["WORLD_SIZE"], slurm["LOCAL_RANK"], slurm["LOCAL_SIZE"]) == (
        "3",
        "4",
        "1",
        "2",
    )
    ompi = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
    }
    assert adopt_launcher_rank(ompi) == "openmpi" and ompi["RANK"] == "1"
    launched = {"RANK": "0", "CROSS_RANK": "0", "SLURM_PROCID": "5"}
    assert adopt_launcher_rank(launched) == "deepspeed" and launched["RANK"] == "0"


# Each launcher's own variables, as its documentation names them: rank, world size, local rank,
# tasks on this node (Slurm writes the last as a list such as "2(x3),1").
LAUNCHER_NAMES = {
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
    "openmpi": (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    "mvapich": (
        "MV2_COMM_WORLD_RANK",
        "MV2_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_SIZE",
    ),
}


@given(
    launcher=st.sampled_from(sorted(LAUNCHER_NAMES)),
    numbers=st.tuples(*[st.integers(0, 4096)] * 4),
    present=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    repeat=st.sampled_from(["", "(x2)", "(x16),3"]),
    other=st.dictionaries(st.sampled_from(["PATH", "HOME", "SLURM_JOB_ID"]), st.just("x")),
)
def test_a_launchers_numbers_become_torchs_and_nothing_else_moves(
    launcher: str,
    numbers: tuple[int, int, int, int],
    present: tuple[bool, bool, bool],
    repeat: str,
    other: dict[str, str],
) -> None:
    names = LAUNCHER_NAMES[launcher]
    env = {names[0]: str(numbers[0]), **other}
    for name, number, there in zip(names[1:], numbers[1:], present, strict=True):
        if there:
            env[name] = str(number) + (repeat if name == "SLURM_STEP_TASKS_PER_NODE" else "")
    before = dict(env)
    assert adopt_launcher_rank(env) == launcher
    torch_names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE")
    pairs = zip(torch_names, names, numbers, strict=True)
    expected = {t: str(n) for t, name, n in pairs if name in before}
    expected.setdefault("LOCAL_RANK", "0")  # a single task per node has local rank 0
    assert env == {**before, **expected}


@given(
    rank=st.integers(0, 64),
    cross=st.booleans(),
    launcher=st.sampled_from(sorted(LAUNCHER_NAMES)),
)
def test_a_rank_torch_already_numbered_keeps_its_numbers(
    rank: int, cross: bool, launcher: str
) -> None:
    """DeepSpeed's launcher numbered it (its pdsh runner also sets CROSS_RANK): the numbers of
    another launcher around it (a DeepSpeed run inside a Slurm allocation) are not read."""
    env = {"RANK": str(rank), LAUNCHER_NAMES[launcher][0]: str(rank + 1)}
    if cross:
        env["CROSS_RANK"] = "0"
    before = dict(env)
    assert adopt_launcher_rank(env) == ("deepspeed" if cross else "")
    assert env == before


def test_the_process_environment_is_read_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ("RANK", "LOCAL_RANK", "SSH_CONNECTION", "SLURMD_NODENAME", "SLURM_PROCID")
    for name in names:
        # Set first, so that the teardown removes what adopt_launcher_rank writes (a RANK left
        # in this process would make a later test's DeepSpeed launch a rank of another world).
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert adopt_launcher_rank() == "openmpi"
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"]) == ("3", "0")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-17")
    assert node_name() == "gpu-17" and ssh_target() is None
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 50000 10.0.0.2 22")
    assert node_name() == ssh_target() == "10.0.0.2"


def test_a_launchers_number_that_is_not_one_is_passed_on_as_it_is() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_STEP_TASKS_PER_NODE": "(x2)"}
    adopt_launcher_rank(env)
    assert env["LOCAL_SIZE"] == "(x2)"  # torch refuses it itself, naming the variable


@pytest.mark.parametrize("launched", [True, False])
def test_the_identity_line_says_which_rank_runs_where(
    launched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = (
        "RANK",
        "WORLD_SIZE",
        "CROSS_RANK",
        "SLURM_NODEID",
        "SSH_CONNECTION",
        "SLURMD_NODENAME",
    )
    for name in names:
        monkeypatch.delenv(name, raising=False)
    expected = {
        "rank": "0",
        "world": "1",
        "node_rank": "0",
        "launcher": "plain",
        "host": socket.gethostname(),
        "ssh_to": "-",
        "slurm_node": "-",
        "pid": str(os.getpid()),
    }
    if launched:
        given_env = {
            "RANK": "5",
            "WORLD_SIZE": "8",
            "SLURM_NODEID": "1",
            "SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22",
            "SLURMD_NODENAME": "gpu-17",
        }
        for name, value in given_env.items():
            monkeypatch.setenv(name, value)
        expected |= {"rank": "5", "world": "8", "node_rank": "1", "launcher": "slurm"}
        expected |= {"ssh_to": "10.0.0.2", "slurm_node": "gpu-17"}
    line = identity_line("slurm" if launched else "")
    prefix, *fields = line.split(" ")
    assert prefix == "bloomperf-rank"
    assert [tuple(f.split("=", 1)) for f in fields] == list(expected.items())
    if launched:  # DeepSpeed's pdsh runner numbers the node itself
        monkeypatch.setenv("CROSS_RANK", "3")
        assert " node_rank=3 " in identity_line("deepspeed")


def test_a_rank_says_who_it_is_on_standard_error_alone(capsys: pytest.CaptureFixture[str]) -> None:
    report_identity("openmpi")
    out, err = capsys.readouterr()
    assert out == "" and err == identity_line("openmpi") + "\n"
    assert " launcher=openmpi " in err


def test_no_launcher_at_all_is_a_plain_process() -> None:
    env = {"PATH": "/bin"}
    assert adopt_launcher_rank(env) == "" and env == {"PATH": "/bin"}


# ---- every node's topology ---------------------------------------------------------------------


def node_answer(recording: str, hostname: str) -> dict[str, Any]:
    """What ``python -m bloomperf.harness.nodes probe`` prints on a node, from hand-written NVML."""
    from nvml_replay import NvmlReplay

    from bloomperf.catalog.topology import detect_topology, topology_to_dict

    return {
        "hostname": hostname,
        "slurm_node": "",
        "topology": topology_to_dict(detect_topology(NvmlReplay.load(recording), nodes=1)),
        "infiniband": ["mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)"],
        "nccl": {"NCCL_IB_HCA": "mlx5_0"},
    }


def test_two_alike_nodes_make_one_multi_node_topology_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from bloomperf.harness.nodes import cluster_topology, describe_nodes, node_facts, parse_answers

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # pdsh's output: each line labelled with the host that printed it, in any order.
    output = "".join(
        f"{host}: {json.dumps(node_answer('8xA100-SXM4-80GB', host.upper()))}\n"
        for host in ("node-b", "node-a")
    )
    answers = parse_answers("pdsh@ctl: noise\n" + output, ["node-a", "node-b"])
    nodes = [node_facts(host, answers[host]) for host in ("node-a", "node-b")]
    topology = cluster_topology(nodes)
    assert (topology.id, topology.aliases, topology.nodes) == (
        "2x8xA100-SXM4-80GB",
        ("2x8xA100-80GB",),
        2,
    )
    assert topology.matches("2x8xA100-80GB") and len(topology.gpus) == 8  # per node
    text = describe_nodes(topology, nodes, {"NCCL_DEBUG": "INFO"})
    assert "node 1    node-b (NODE-B): 8 GPUs (8xA100-SXM4-80GB), 640.0 GiB GPU memory" in text
    assert "mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)" in text and "NCCL_IB_HCA=mlx5_0" in text
    assert "ranks get NCCL_DEBUG=INFO" in text
    unlike = [nodes[0], node_facts("node-c", node_answer("4xA100-SXM4-80GB", "c"))]
    assert cluster_topology(unlike).id == "8xA100-SXM4-80GB+4xA100-SXM4-80GB"


def test_fabric_and_nccl_settings_are_read_where_nccl_reads_them(tmp_path: Path) -> None:
    from bloomperf.harness.nodes import infiniband_ports, nccl_settings

    port = tmp_path / "ib" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    assert infiniband_ports(tmp_path / "ib") == ["mlx5_0/1 ACTIVE 200 Gb/sec (4X HDR)"]
    assert infiniband_ports(tmp_path / "none") == []
    conf = tmp_path / "nccl.conf"
    conf.write_text("# site\nNCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN\n")
    settings = nccl_settings({"NCCL_DEBUG": "INFO", "HOME": "/root"}, conf)
    assert settings == {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO"}  # the environment wins
