"""Backends are known by their traits and their registration alone: every built-in's traits are
consistent, an entry point adds a backend (a bad one is one line naming it), a backend without a
memory model is never predicted nor skipped on a guess, and the core names no backend."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.analysis.memory_model import MEMORY_MODELS, memory_model_of, predict_cell
from bloomperf.analysis.scenario import SuiteCell
from bloomperf.analysis.suite_prediction import cell_prediction, predicted_skip_reason
from bloomperf.backends import (
    BACKEND_CLASSES,
    backend_class,
    backend_names,
    installed_entry_points,
    row_label,
)
from bloomperf.catalog.dtypes import DTYPES
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.config.run import RunConfig
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.matrix import default_backends, plan_groups

PACKAGE = Path(__file__).resolve().parent.parent / "bloomperf"
DEVICES = ("cuda", "cpu")

# A package on sys.path with real entry-point metadata: what pip writes, minus pip.
FAKE_MODULE = """
from bloomperf.backends.base import Backend

class Modelless(Backend):
    name = "modelless"
    display_name = "Model-less"
    dtypes = ("fp32", "bf16")
    default_dtypes = {"cpu": ("fp32",), "cuda": ("bf16",)}

    def load(self, request):
        raise NotImplementedError("never loaded here: only its traits are read")

class Everywhere(Modelless):
    name = "everywhere"
    default_on = ("cpu",)

class GpuOnly(Modelless):
    name = "gpu-only"
    default_dtypes = {"cuda": ("bf16",)}

class Misnamed(Modelless):
    name = "something-else"

class NotABackend:
    name = "not-a-backend"
"""
GOOD = {
    "modelless": "fake_backends:Modelless",
    "everywhere": "fake_backends:Everywhere",
    "gpu-only": "fake_backends:GpuOnly",
}
BAD = {
    "misnamed": "fake_backends:Misnamed",
    "not-a-backend": "fake_backends:NotABackend",
    "missing": "no_such_module_here:Backend",
}


def install_fake(
    folder: Path, monkeypatch: pytest.MonkeyPatch, entry_points: dict[str, str]
) -> None:
    (folder / "fake_backends.py").write_text(FAKE_MODULE)
    info = folder / "fake_backends-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-backends\nVersion: 0.1\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[bloomperf.backends]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(folder))
    installed_entry_points.cache_clear()  # read anew from sys.path


@pytest.fixture(autouse=True)
def forget_entry_points() -> Iterator[None]:
    yield
    installed_entry_points.cache_clear()  # the next test reads the real sys.path's


@pytest.fixture
def fake_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch, GOOD)


# ---- the built-ins' traits -----------------------------------------------------------------


@pytest.mark.parametrize("name", BACKEND_CLASSES)
def test_a_built_in_backends_traits_are_consistent(name: str) -> None:
    cls = backend_class(name)
    assert cls.name == name and cls.display_name
    assert set(cls.dtypes) <= set(DTYPES)
    for device, dtypes in cls.default_dtypes.items():
        assert device in DEVICES and dtypes and set(dtypes) <= set(cls.dtypes), device
    for device in cls.default_on:  # a run without --backends or --dtypes has dtypes for it
        assert cls.default_dtypes.get(device), device
    assert cls.memory_model is None or cls.memory_model in MEMORY_MODELS


def test_display_names_are_distinct_and_label_the_rows() -> None:
    names = [backend_class(n).display_name for n in BACKEND_CLASSES]
    assert len(set(names)) == len(names)
    for name in BACKEND_CLASSES:
        assert row_label(name, "fp16") == f"{backend_class(name).display_name} fp16"
    assert row_label("not-installed-here", "fp16") == "not-installed-here fp16"


def test_the_default_matrix_is_the_blogs() -> None:
    """The rows the blog measured, now read from the backends' own traits."""
    cuda = [(g.backend, g.dtype) for g in plan_groups(RunConfig(), "cuda")]
    assert cuda == [
        ("accelerate", "bf16"),
        ("accelerate", "int8"),
        ("ds-inference", "fp16"),
        ("ds-inference", "int8"),
        ("ds-zero", "bf16"),
    ]
    cpu = [(g.backend, g.dtype) for g in plan_groups(RunConfig(), "cpu")]
    assert cpu == [("accelerate", "fp32"), ("accelerate", "bf16"), ("accelerate", "int8")]


# The blog's batch sizes on a GPU, and the tiny model's on a CPU (docs/ci.md's matrix).
BLOG_BATCH_SIZES = {"cuda": [1, 8, 16, 32, 64, 128, 256, 512], "cpu": [1, 8, 32]}


@given(
    device=st.sampled_from(DEVICES),
    backends=st.lists(st.sampled_from(sorted(BACKEND_CLASSES)), unique=True, max_size=5),
    dtypes=st.lists(st.sampled_from(sorted(DTYPES)), unique=True, max_size=3),
    batch_sizes=st.lists(st.integers(1, 1024), unique=True, max_size=4),
)
def test_a_plan_is_each_backend_in_table_order_times_its_dtypes_with_batch_sizes_ascending(
    device: str, backends: list[str], dtypes: list[str], batch_sizes: list[int]
) -> None:
    """Whatever order the options name them in: rows in the blog's backend order, each
    backend's --dtypes or else its own defaults there, one group per row, every group with the
    same batch sizes (the device's defaults unless named) ascending, a cell for each."""
    options = RunConfig(
        backends=tuple(backends), dtypes=tuple(dtypes), batch_sizes=tuple(batch_sizes)
    )
    named = backends or [n for n in BACKEND_CLASSES if device in backend_class(n).default_on]
    in_order = [n for n in BACKEND_CLASSES if n in named]
    without = [n for n in in_order if not dtypes and not backend_class(n).default_dtypes[device]]
    if without:
        with pytest.raises(BloomperfError, match=f"--backends {without[0]}: no default dtype"):
            plan_groups(options, device)
        return
    groups = plan_groups(options, device)
    rows = [(n, d) for n in in_order for d in (dtypes or backend_class(n).default_dtypes[device])]
    assert [(g.backend, g.dtype) for g in groups] == rows
    sizes = sorted(batch_sizes) or BLOG_BATCH_SIZES[device]
    for group in groups:
        assert list(group.batch_sizes) == sizes
        cells = group.cells()
        assert [(c.backend, c.dtype, c.batch_size) for c in cells] == [
            (group.backend, group.dtype, b) for b in sizes
        ]
        assert [c.id for c in cells] == [f"{group.backend}-{group.dtype}-bs{b}" for b in sizes]
        assert {c.group for c in cells} == {(group.backend, group.dtype)}


# ---- entry points --------------------------------------------------------------------------


def test_an_entry_point_adds_a_backend_after_the_built_ins(fake_backends: None) -> None:
    assert backend_names()[: len(BACKEND_CLASSES)] == tuple(BACKEND_CLASSES)
    assert set(backend_names()[len(BACKEND_CLASSES) :]) == set(GOOD)
    assert backend_class("modelless").display_name == "Model-less"
    assert row_label("modelless", "fp32") == "Model-less fp32"
    # Only a backend that says so joins a run without --backends.
    assert "everywhere" in default_backends("cpu") and "modelless" not in default_backends("cpu")
    groups = plan_groups(RunConfig(backends=("modelless", "accelerate")), "cuda")
    assert [(g.backend, g.dtype) for g in groups][-1] == ("modelless", "bf16")


def test_a_backend_with_no_default_dtype_on_the_device_asks_for_dtypes(
    fake_backends: None,
) -> None:
    cpu = RunConfig(backends=("gpu-only",))
    with pytest.raises(BloomperfError) as info:
        plan_groups(cpu, "cpu")
    assert str(info.value) == "--backends gpu-only: no default dtype on cpu: --dtypes"
    named = plan_groups(RunConfig(backends=("gpu-only",), dtypes=("fp32",)), "cpu")
    assert [(g.backend, g.dtype) for g in named] == [("gpu-only", "fp32")]
    assert [(g.backend, g.dtype) for g in plan_groups(cpu, "cuda")] == [("gpu-only", "bf16")]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("missing", "cannot load it (ModuleNotFoundError("),
        ("not-a-backend", "not a subclass of bloomperf's Backend"),
        ("misnamed", "the class's name is 'something-else'"),
    ],
)
def test_a_bad_entry_point_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, why: str
) -> None:
    install_fake(tmp_path, monkeypatch, {**GOOD, **BAD})
    assert backend_class("modelless").name == "modelless"  # the others still load
    with pytest.raises(BloomperfError) as caught:
        backend_class(name)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert message.startswith(f"entry point {name} = {BAD[name]}") and why in message


def test_a_command_given_a_bad_entry_point_exits_2_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake(tmp_path, monkeypatch, BAD)
    argv = ["run", "--no-lock", "--backends", "missing", "--dtypes", "fp32", "--batch-sizes", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "bloomperf", *argv, "--output", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"entry point missing = {BAD['missing']}" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_an_entry_point_cannot_take_a_built_in_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_fake(tmp_path, monkeypatch, {"accelerate": "fake_backends:Modelless"})
    with pytest.raises(BloomperfError, match="'accelerate' is a built-in backend's name"):
        backend_names()


def test_an_unknown_name_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(BloomperfError, match=r"unknown backend 'tgi' \(valid: accelerate, "):
        backend_class("tgi")


# ---- no memory model: never predicted, never skipped on a guess ----------------------------

TOPOLOGIES = ("1xA100-40GB", "8xA100-80GB", "2x8xA100-40GB", "4xH100-80GB", "cpu")


# The fixture installs the same read-only entry points for every example: safe to share.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    topology=st.sampled_from(TOPOLOGIES),
    shape=st.sampled_from(sorted(MODEL_SHAPES)),
    batch=st.sampled_from((1, 8, 64, 512, 4096)),
)
def test_a_backend_without_a_memory_model_is_never_predicted_nor_skipped(
    fake_backends: None, topology: str, shape: str, batch: int
) -> None:
    dtype = "fp32" if topology == "cpu" else "bf16"
    cell = SuiteCell(MODEL_SHAPES[shape], None, topology, "modelless", dtype, batch, 100)
    assert memory_model_of("modelless") is None
    assert cell_prediction(cell) == {}
    assert predicted_skip_reason(cell, (1, 8, 64, 512, 4096)) is None
    scenario = cell.scenario()
    if scenario is not None:
        with pytest.raises(BloomperfError, match="has no memory model"):
            predict_cell(scenario, batch)


def test_the_same_cell_with_a_model_is_predicted_and_skipped(fake_backends: None) -> None:
    """The contrast that makes the test above mean something: the built-in with a model is
    skipped on its prediction where the model-less one runs."""
    batches = (1, 8, 64, 512, 4096)
    shape = MODEL_SHAPES["bloom-176b"]
    for backend, skipped in (("accelerate", True), ("modelless", False)):
        cell = SuiteCell(shape, None, "1xA100-40GB", backend, "bf16", 4096, 100)
        assert (predicted_skip_reason(cell, batches) is not None) is skipped, backend
        assert ("predicted_peak_bytes" in cell_prediction(cell)) is skipped, backend


# ---- the core names no backend -------------------------------------------------------------

# Not backend names: the same words as distribution names, whose versions the fingerprint records.
DISTRIBUTIONS = {
    "catalog/fingerprint.py": "FINGERPRINT_PACKAGES",
    "harness/engine_identity.py": "ENGINE_DISTRIBUTIONS",  # the serving venv's vLLM builds
}


def named_backends(path: Path) -> list[str]:
    """The string constants of ``path`` that are a backend's name (line: text)."""
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    exempt = DISTRIBUTIONS.get(str(path.relative_to(PACKAGE)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == exempt for t in node.targets
        ):
            allowed |= {id(n) for n in ast.walk(node.value)}
    return [
        f"{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in BACKEND_CLASSES
        and id(node) not in allowed
    ]


def test_no_module_outside_backends_names_a_backend() -> None:
    found = {
        str(path.relative_to(PACKAGE)): named
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "backends"
        for named in [named_backends(path)]
        if named
    }
    assert found == {}
