"""A cached model folder is checked against its manifest before a run uses it.

A corrupted cache used to be measured as if it were the model (one layer less in config.json
loaded and ran), or failed every later run with no rebuild while doctor said "already built".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.catalog.checkpoints import PreparedModel, resolve_model
from bloomperf.catalog.manifest import MANIFEST_NAME, checkpoint_problem
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.core.errors import BloomperfError
from bloomperf.doctor.host import check_disk

TINY = MODEL_SHAPES["tiny"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("cache"))


def copy_cache(built: PreparedModel, where: Path) -> Path:
    """A private copy of the built cache; the folder of the model in it."""
    models = where / "models"
    models.mkdir(parents=True)
    shutil.copytree(built.path, models / built.path.name)
    return models / built.path.name


def fewer_layers(folder: Path) -> None:
    path = folder / "config.json"
    path.write_text(path.read_text().replace('"n_layer": 2', '"n_layer": 1'))


def truncate_weights(folder: Path) -> None:
    path = folder / "model.safetensors"
    os.truncate(path, path.stat().st_size // 2)


def garbage_config(folder: Path) -> None:
    (folder / "config.json").write_bytes(b"\x00garbage{")


def empty_folder(folder: Path) -> None:
    shutil.rmtree(folder)
    folder.mkdir()


CORRUPTIONS = [fewer_layers, truncate_weights, garbage_config, empty_folder]


def test_a_fresh_build_carries_a_manifest_that_checks(built: PreparedModel) -> None:
    manifest = json.loads((built.path / MANIFEST_NAME).read_text())
    assert manifest["built_from"]["layers"] == 2
    assert manifest["built_from"]["dtype"] == TINY.checkpoint_dtype
    assert manifest["built_from"]["seed"] == 0
    assert set(manifest["files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert checkpoint_problem(built.path, TINY, 2) is None


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__)
def test_a_corrupted_cache_is_found_rebuilt_once_and_doctor_sees_it(
    built: PreparedModel,
    tmp_path: Path,
    corrupt: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = copy_cache(built, tmp_path)
    corrupt(folder)  # type: ignore[operator]
    assert checkpoint_problem(folder, TINY, 2) is not None
    before = check_disk("tiny", None, tmp_path)
    assert before.status == "warn" and str(folder) in before.reason and "rebuild" in before.reason

    capsys.readouterr()
    model = resolve_model("tiny", cache_dir=tmp_path)
    err = capsys.readouterr().err
    assert model.path == folder
    assert err.count("rebuilding") == 1 and str(folder) in err
    assert checkpoint_problem(folder, TINY, 2) is None
    assert json.loads((folder / "config.json").read_text())["n_layer"] == 2
    assert (folder / "model.safetensors").read_bytes() == (
        built.path / "model.safetensors"
    ).read_bytes()
    assert check_disk("tiny", None, tmp_path).status == "ok"
    # Once rebuilt, a second run uses it without a word.
    resolve_model("tiny", cache_dir=tmp_path)
    assert "rebuilding" not in capsys.readouterr().err
    leftovers = [p.name for p in folder.parent.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == [folder.name]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_change_to_config_or_size_of_a_shard_is_found(
    built: PreparedModel, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    folder = copy_cache(built, tmp_path_factory.mktemp("fuzz"))
    name = data.draw(st.sampled_from(["config.json", "model.safetensors", "tokenizer.json"]))
    path = folder / name
    blob = bytearray(path.read_bytes())
    if name == "model.safetensors" and data.draw(st.booleans()):
        os.truncate(path, data.draw(st.integers(0, len(blob) - 1)))
    else:
        # Any byte of a JSON file, or of a shard's header, changed.
        limit = len(blob) if name != "model.safetensors" else 8 + int.from_bytes(blob[:8], "little")
        at = data.draw(st.integers(0, limit - 1))
        blob[at] ^= data.draw(st.integers(1, 255))
        path.write_bytes(bytes(blob))
    assert checkpoint_problem(folder, TINY, 2) is not None


def test_a_corrupted_cache_that_cannot_be_rebuilt_is_refused_naming_it(
    built: PreparedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder cannot be moved aside (a read-only cache; root would rename anyway, so the
    refusal the kernel gives a user is raised by ``os.rename`` itself)."""
    folder = copy_cache(built, tmp_path)
    fewer_layers(folder)

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model("tiny", cache_dir=tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and str(folder) in message
