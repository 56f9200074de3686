"""Security rules, checked over the real source tree (parsed, so comments and docs don't count).

No pickle anywhere (safetensors only; ``torch.load`` only with ``weights_only=True``), no
``trust_remote_code=True`` written into a call, no shell: no ``shell=True``, ``os.system``,
``os.popen``, ``eval``/``exec``. Paths read from hostfiles and baselines are validated (checked
here through the real readers with hostile files).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("bloomperf", "benchmarks", "tests", "conftest.py")

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "joblib", "shelve", "marshal"}
SHELL_CALLS = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
}
# Keyword arguments that, written as a constant, switch a safe default off.
UNSAFE_CONSTANT_KEYWORDS = {
    "shell": True,
    "safe_serialization": False,
    "use_safetensors": False,
    "weights_only": False,
}


def python_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def violations(source: str, where: str) -> list[str]:
    """Every breach of the rules in one file's source, as 'file:line: what'."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{line}: imports {a.name}" for a in node.names if a.name in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "") in UNSAFE_MODULES:
            found.append(f"{line}: imports from {node.module}")
        elif isinstance(node, ast.Call):
            found += call_violations(node, line)
    return found


def call_violations(node: ast.Call, line: str) -> list[str]:
    found: list[str] = []
    name = dotted(node.func)
    parts = tuple(name.rsplit(".", 1)) if "." in name else ("", name)
    if parts in SHELL_CALLS:
        found.append(f"{line}: calls {name}")
    if name in ("eval", "exec"):
        found.append(f"{line}: calls {name}")
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    remote = keywords.get("trust_remote_code")
    if remote is not None and not (isinstance(remote, ast.Constant) and remote.value is False):
        # Only a literal False: a value computed from options or the environment could be True.
        found.append(f"{line}: {name}(... trust_remote_code=<not literal False> ...)")
    for key, unsafe in UNSAFE_CONSTANT_KEYWORDS.items():
        value = keywords.get(key)
        if isinstance(value, ast.Constant) and value.value is unsafe:
            found.append(f"{line}: {name}(... {key}={unsafe} ...)")
    if name == "torch.load":
        weights_only = keywords.get("weights_only")
        if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
            found.append(f"{line}: torch.load without weights_only=True")
    return found


def test_the_checker_catches_each_breach() -> None:
    bad = "\n".join(
        [
            "import pickle",
            "from joblib import load",
            "import os, subprocess, torch",
            "os.system('ls ' + user)",
            "subprocess.run(cmd, shell=True)",
            "torch.load(path)",
            "torch.load(path, weights_only=False)",
            "AutoModel.from_pretrained(name, trust_remote_code=True)",
            "model.save_pretrained(folder, safe_serialization=False)",
            "eval(text)",
            "AutoModel.from_pretrained(name, trust_remote_code=options.get('trust_remote_code'))",
        ]
    )
    found = violations(bad, "bad.py")
    assert len(found) == 11, found
    good = "\n".join(
        [
            "import subprocess, torch",
            "subprocess.run(['deepspeed', '--num_gpus', str(n)], check=True)",
            "torch.load(path, map_location='cpu', weights_only=True)",
            "AutoModel.from_pretrained(name, trust_remote_code=False)",
            "# pickle, shell=True and os.system in a comment are fine",
        ]
    )
    assert violations(good, "good.py") == []


def test_the_tree_has_no_pickle_no_shell_and_no_remote_code() -> None:
    files = python_files()
    assert len(files) > 20  # the scan really walks the package
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)))]
    # This file's own examples are strings, not calls: the parse does not see them as code.
    assert found == []


def test_checkpoints_are_written_as_safetensors_only(tmp_path: Path) -> None:
    """The model builder writes no .bin/.pt/.pkl: a pickle in the cache could run code on load."""
    from bloomperf.catalog.checkpoint_builder import build_checkpoint
    from bloomperf.catalog.models import ModelShape

    shape = ModelShape("sec", hidden_size=16, n_layer=1, n_head=2, vocab_size=300)
    build_checkpoint(shape, None, tmp_path)
    suffixes = {p.suffix for p in tmp_path.rglob("*") if p.is_file()}
    assert ".safetensors" in suffixes
    assert not suffixes & {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}


HOSTILE_HOSTFILES = [
    ("$(touch /tmp/pwned) slots=1\n", "expected 'HOST slots=N'"),
    ("`id` slots=1\n", "is not a host name"),
    ("-oProxyCommand=id slots=1\n", "is not a host name"),
    ("node slots=abc\n", "expected 'HOST slots=N'"),
    ("node slots=-1\n", "expected 'HOST slots=N'"),
    ("../../etc/passwd slots=1\n", "is not a host name"),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE_HOSTFILES)
def test_hostile_hostfiles_are_refused(tmp_path: Path, text: str, message: str) -> None:
    """DeepSpeed's parser takes any non-blank word as a host; bloomperf refuses one that ssh,
    pdsh or srun would read as more than a name. Text after ``slots=N`` is DeepSpeed's rule
    (ignored, never executed): tests/test_multinode_launch.py."""
    from bloomperf.core.errors import BloomperfError
    from bloomperf.harness.hostfile import read_hostfile

    path = tmp_path / "hostfile"
    path.write_text(text)
    with pytest.raises(BloomperfError, match=message):
        read_hostfile(path)


def test_no_shell_reaches_the_launcher_through_options(tmp_path: Path) -> None:
    """An option value with shell syntax is an argument, never a command line: the run refuses
    it as bad input and nothing is executed."""
    canary = tmp_path / "pwned"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bloomperf",
            "run",
            "--no-lock",
            "--model",
            f"tiny; touch {canary}",
            "--output",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert not canary.exists()


# ---- one atomic writer ------------------------------------------------------------------------

# Writes that do not go through jsonfile.write_bytes_atomic, and why they need not.
DIRECT_WRITES = {
    "bloomperf/core/jsonfile.py": "the atomic writer itself",
    "bloomperf/cli/__init__.py": "a crash's traceback, into a fresh private mkstemp file",
    "bloomperf/catalog/checkpoint_builder.py": (
        "into a private temp folder, renamed as a whole when built"
    ),
    "bloomperf/catalog/checkpoints.py": "the build's flock file: empty, never read",
    "bloomperf/harness/launch.py": "the worker spec, in the group's private temp folder",
    "bloomperf/cli/shard.py": "the shard marker, inside DeepSpeed's own freshly written output",
    "bloomperf/measure/rss_sampler.py": "/proc/<pid>/clear_refs: a kernel control file",
    # A child's output goes straight to its log as it runs: a stream the OS appends, which a
    # crash leaves as far as it got (the log tail is what a timeout reports), never a document.
    "bloomperf/harness/server.py": "the vLLM server's log, its stdout and stderr",
    "bloomperf/harness/loadgen.py": "the load client's log, its stdout and stderr",
}


def direct_writes(source: str) -> list[int]:
    """Lines that open a file for writing or write one in place (write_text, savefig, …)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
        modes += [
            k.value.value
            for k in node.keywords
            if k.arg == "mode" and isinstance(k.value, ast.Constant)
        ]
        opens_for_writing = name.split(".")[-1] in ("open", "fdopen") and any(
            isinstance(m, str) and set(m) & set("wax+") for m in modes
        )
        if opens_for_writing or name.split(".")[-1] in ("write_text", "write_bytes", "savefig"):
            lines.append(node.lineno)
    return lines


def test_every_file_is_written_by_the_atomic_writer() -> None:
    found = {}
    for path in sorted((ROOT / "bloomperf").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        lines = direct_writes(path.read_text(encoding="utf-8"))
        if lines and where not in DIRECT_WRITES:
            found[where] = lines
    # The report's plots render their PNGs into memory (savefig on a BytesIO is no file write),
    # then hand the bytes to the atomic writer: all through report_figure.save_figure.
    renderers = {"bloomperf/render/report/figure.py"}
    assert set(found) <= renderers, found
    for where in renderers:
        text = (ROOT / where).read_text(encoding="utf-8")
        assert "savefig(buffer" in text and "savefig(path" not in text, where
        assert "write_bytes_atomic(path, buffer.getvalue())" in text, where
    assert direct_writes("open(p, 'w')\nPath(p).write_text('x')\nfig.savefig(p)\n") == [1, 2, 3]
    assert direct_writes("open(p)\nopen(p, 'rb')\n") == []


def test_the_writer_replaces_only_regular_files(tmp_path: Path) -> None:
    from bloomperf.core.errors import BloomperfError
    from bloomperf.core.jsonfile import write_json_atomic, write_text_atomic

    target = tmp_path / "r.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert target.read_text() == '{\n  "a": 2\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind

    elsewhere = tmp_path / "victim"
    elsewhere.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(elsewhere)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for bad in (link, fifo, tmp_path, Path("/dev/null")):
        with pytest.raises(BloomperfError, match=r"refusing to replace it|is a directory"):
            write_text_atomic(bad, "x")
    assert elsewhere.read_text() == "keep" and link.is_symlink() and fifo.is_fifo()
    with pytest.raises(BloomperfError, match="non-standard JSON"):
        write_json_atomic(target, {"a": float("inf")})
    assert target.read_text() == '{\n  "a": 2\n}\n'


def test_a_link_planted_at_the_old_temp_name_is_not_followed(tmp_path: Path) -> None:
    from bloomperf.core.jsonfile import write_text_atomic

    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".index.html.tmp").symlink_to(victim)  # the name report.py used to write through
    write_text_atomic(out / "index.html", "<html>")
    assert victim.read_text() == "keep"
    assert (out / "index.html").read_text() == "<html>"


def test_escape_sequences_never_reach_a_terminal_or_a_report() -> None:
    from bloomperf.core.formatting import clean, markdown_table

    hostile = "OOM \x1b[2J\x1b]0;pwned\x07 at \x1b[31mred\x1b[0m\r\x00\x9b5m\nnext\tline"
    assert clean(hostile) == "OOM  at red5m\nnext\tline"
    assert "\x1b" not in "".join(markdown_table(["h\x1b[1m"], [[hostile]]))


# ---- the lock folder ------------------------------------------------------------------------


def test_locks_live_in_one_machine_wide_folder_and_never_through_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    import bloomperf.core.lockdir
    from bloomperf.core.errors import BloomperfError
    from bloomperf.harness.lock import hold_device_lock, lock_folder

    monkeypatch.delenv("BLOOMPERF_LOCK_DIR", raising=False)
    defaults = set()
    for user_tmp in ("a", "b"):  # two users' (or two CI jobs') own TMPDIR and runtime folder
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / user_tmp / "runtime"))
        monkeypatch.setenv("TMPDIR", str(tmp_path / user_tmp))
        monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
        defaults.add(lock_folder())
    assert len(defaults) == 1  # one folder whatever TMPDIR says, and none under either
    assert not str(defaults.pop()).startswith(str(tmp_path))
    run_lock = tmp_path / "run-lock"  # stands for /run/lock: sticky, open to all
    run_lock.mkdir()
    run_lock.chmod(0o1777)
    monkeypatch.setattr(bloomperf.core.lockdir, "SHARED_BASES", (tmp_path / "none", run_lock))
    default = lock_folder()
    assert default == run_lock / "bloomperf-locks"
    with hold_device_lock("cpu"):  # created shared by every user, as /tmp is
        assert oct(default.stat().st_mode & 0o7777) == "0o1777"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = tmp_path / "planted"
    planted.symlink_to(elsewhere, target_is_directory=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    for folder, problem in ((planted, "is a symbolic link"), (shared, "no sticky bit")):
        monkeypatch.setenv("BLOOMPERF_LOCK_DIR", str(folder))
        with pytest.raises(BloomperfError, match=problem), hold_device_lock("cpu"):
            pass
    assert list(elsewhere.iterdir()) == []
    shared.chmod(0o1777)  # like /tmp: a folder users share on purpose
    with hold_device_lock("cpu"):
        assert [p.name for p in shared.iterdir()] == ["bloomperf-cpu.lock"]
    if os.getuid() == 0:  # only root can hand a folder to another user
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 4242, 4242)
        monkeypatch.setenv("BLOOMPERF_LOCK_DIR", str(theirs))
        with (
            pytest.raises(BloomperfError, match="belongs to another user"),
            hold_device_lock("cpu"),
        ):
            pass


def test_a_hostfile_path_with_shell_syntax_reaches_the_launcher_as_one_argument(
    tmp_path: Path,
) -> None:
    """The hostfile path is the user's text that does reach DeepSpeed's launcher argv. A path
    full of shell syntax is one argv element, unexpanded, and DeepSpeed's own runner parser
    reads it back whole; nothing is run while the command is built."""
    from deepspeed.launcher.runner import parse_args

    from bloomperf.config.run import LaunchOptions
    from bloomperf.harness.dslaunch import rank_group_command

    folder = tmp_path / "a b;$(touch PWNED)`touch PWNED`|x"
    folder.mkdir()
    hostfile = folder / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    argv, _ = rank_group_command(2, LaunchOptions(hostfile=hostfile), workdir=tmp_path)
    assert argv[:4] == [sys.executable, "-u", "-m", "deepspeed.launcher.runner"]
    assert argv.count(str(hostfile)) == 1
    assert all(isinstance(arg, str) for arg in argv)
    assert parse_args(argv[4:]).hostfile == str(hostfile)
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_a_real_deepspeed_launch_from_a_folder_named_with_shell_syntax(tmp_path: Path) -> None:
    """A real 1-rank DeepSpeed-AutoTP run (DeepSpeed's runner, the worker, the tiny model)
    whose model, output and working folder all sit under a name full of shell syntax: it
    succeeds and nothing in that name is executed (no PWNED file anywhere under it). On one
    node those paths reach the ranks through the spec file and the environment, not the
    launcher's argv (the hostfile test above covers the argv); a shell built from them
    anywhere on the way would run ``touch PWNED`` or break the path, and fail here."""
    import shutil

    from bloomperf.catalog.checkpoints import resolve_model

    folder = tmp_path / "a b;$(touch PWNED)`touch PWNED`|x"
    folder.mkdir()
    shutil.copytree(resolve_model("tiny").path, folder / "tiny")
    argv = [sys.executable, "-m", "bloomperf", "run", "--no-lock", "--model", str(folder / "tiny")]
    argv += ["--backends", "ds-autotp", "--dtypes", "fp32", "--batch-sizes", "1"]
    argv += ["--new-tokens", "4", "--output", str(folder / "r.json")]
    argv += ["--allow-no-baseline"]  # no ds-autotp cell in the CPU baseline (docs/gate.md)
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (folder / "r.json").is_file()
    assert not list(tmp_path.rglob("PWNED")) and not (ROOT / "PWNED").exists()
