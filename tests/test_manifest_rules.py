"""What a cached model folder's manifest records, and the words of each problem it finds.

The oracles are the folder's own files: the manifest must say what config.json holds and each
file's size and SHA-256 as ``hashlib`` computes it here, and each way a folder goes wrong
(a changed byte, a missing file, a malformed entry, an unreadable manifest) has its own words.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.catalog.checkpoint_builder import BUILDER_VERSION
from bloomperf.catalog.checkpoints import PreparedModel, resolve_model
from bloomperf.catalog.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    checkpoint_problem,
    read_manifest,
    write_manifest,
)
from bloomperf.catalog.models import MODEL_SHAPES

TINY = MODEL_SHAPES["tiny"]
LAYERS = 2


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("cache"))


def copy_of(built: PreparedModel, where: Path) -> Path:
    folder = where / built.path.name
    shutil.copytree(built.path, folder)
    return folder


def manifest_of(folder: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((folder / MANIFEST_NAME).read_text())
    return data


def test_the_manifest_records_what_the_folder_was_built_from_and_holds(
    built: PreparedModel,
) -> None:
    manifest = manifest_of(built.path)
    assert manifest["kind"] == "bloomperf-checkpoint-manifest" and manifest["version"] == 1
    assert manifest["built_from"] == {
        "shape": "tiny",
        "layers": LAYERS,
        "dtype": TINY.checkpoint_dtype,
        "seed": 0,
        "builder": BUILDER_VERSION,
        "config": json.loads((built.path / "config.json").read_text()),
    }
    files = manifest["files"]
    assert isinstance(files, dict)
    on_disk = sorted(p.name for p in built.path.iterdir() if p.name != MANIFEST_NAME)
    assert sorted(files) == on_disk
    for name, entry in files.items():
        data = (built.path / name).read_bytes()
        assert entry["size"] == len(data)
        if name.endswith(".safetensors"):
            header = data[: 8 + int.from_bytes(data[:8], "little")]
            assert entry == {"size": len(data), "header_sha256": hashlib.sha256(header).hexdigest()}
        else:
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_rewritten_manifest_lists_files_only_past_a_subfolder_and_never_itself(
    built: PreparedModel, tmp_path: Path
) -> None:
    folder = copy_of(built, tmp_path)
    (folder / "a_subfolder").mkdir()  # sorts before every file of the build
    before = manifest_of(folder)["files"]
    write_manifest(folder, TINY, LAYERS, 0)
    assert manifest_of(folder)["files"] == before
    assert checkpoint_problem(folder, TINY, LAYERS) is None


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_changed_byte_is_named_with_its_file_and_how_it_changed(
    built: PreparedModel, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    folder = copy_of(built, tmp_path_factory.mktemp("byte"))
    name = data.draw(st.sampled_from(sorted(p.name for p in folder.glob("*.json"))))
    if name == MANIFEST_NAME:
        name = "model.safetensors"
    path = folder / name
    blob = bytearray(path.read_bytes())
    shard = name.endswith(".safetensors")
    end = 8 + int.from_bytes(blob[:8], "little") if shard else len(blob)
    at = data.draw(st.integers(0 if not shard else 8, end - 1))  # a header byte, not its length
    blob[at] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(blob))
    problem = checkpoint_problem(folder, TINY, LAYERS)
    assert problem == f"{name} {'header changed' if shard else 'content changed'}"


def test_a_missing_or_truncated_file_is_named(built: PreparedModel, tmp_path: Path) -> None:
    folder = copy_of(built, tmp_path)
    size = (folder / "tokenizer.json").stat().st_size
    (folder / "tokenizer.json").write_bytes(b"{}")
    assert checkpoint_problem(folder, TINY, LAYERS) == f"tokenizer.json is 2 bytes, built as {size}"
    (folder / "tokenizer.json").unlink()
    assert checkpoint_problem(folder, TINY, LAYERS) == "tokenizer.json is missing"


def edit_manifest(folder: Path, name: str, entry: object) -> None:
    manifest = manifest_of(folder)
    files = manifest["files"]
    assert isinstance(files, dict)
    files[name] = entry
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.mark.parametrize("entry", [["size", 12], {"size": "12"}, {"sha256": "0"}, None])
def test_a_malformed_entry_is_said_to_be_one(
    built: PreparedModel, tmp_path: Path, entry: object
) -> None:
    folder = copy_of(built, tmp_path)
    edit_manifest(folder, "tokenizer.json", entry)
    assert checkpoint_problem(folder, TINY, LAYERS) == (
        "tokenizer.json has a malformed manifest entry"
    )


def test_a_file_that_cannot_be_read_says_why_in_the_system_s_words(
    built: PreparedModel, tmp_path: Path
) -> None:
    folder = copy_of(built, tmp_path)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").mkdir()
    size = (folder / "tokenizer.json").stat().st_size
    edit_manifest(folder, "tokenizer.json", {"size": size, "sha256": "0"})
    assert checkpoint_problem(folder, TINY, LAYERS) == (
        "tokenizer.json cannot be read (Is a directory)"
    )


def test_what_is_wrong_with_a_folder_or_its_manifest_is_said_in_its_own_words(
    built: PreparedModel, tmp_path: Path
) -> None:
    folder = copy_of(built, tmp_path)
    manifest = folder / MANIFEST_NAME
    assert checkpoint_problem(tmp_path / "nothing", TINY, LAYERS) == "is not a folder"
    manifest.write_text("[]")
    assert read_manifest(folder) == f"its {MANIFEST_NAME} is not a checkpoint manifest"
    manifest.write_text("{")
    assert read_manifest(folder) == (
        f"its {MANIFEST_NAME} cannot be read (Expecting property name enclosed in double quotes:"
        " line 1 column 2 (char 1))"
    )
    manifest.unlink()
    manifest.mkdir()
    assert read_manifest(folder) == f"its {MANIFEST_NAME} cannot be read (Is a directory)"
    manifest.rmdir()
    assert read_manifest(folder) == f"has no {MANIFEST_NAME} (an unfinished or older build)"


@pytest.mark.parametrize("extra", [0, 1])
def test_a_manifest_of_one_mib_is_read_and_one_byte_more_is_too_large(
    built: PreparedModel, tmp_path: Path, extra: int
) -> None:
    folder = copy_of(built, tmp_path)
    text = (folder / MANIFEST_NAME).read_text()
    (folder / MANIFEST_NAME).write_text(text + " " * (MAX_MANIFEST_BYTES - len(text) + extra))
    problem = checkpoint_problem(folder, TINY, LAYERS)
    assert problem == (None if extra == 0 else f"its {MANIFEST_NAME} is too large")


def test_a_shard_whose_length_prefix_is_garbage_reads_as_a_changed_header(
    built: PreparedModel, tmp_path: Path
) -> None:
    folder = copy_of(built, tmp_path)
    path = folder / "model.safetensors"
    blob = bytearray(path.read_bytes())
    blob[:8] = b"\xff" * 8  # 2**64 - 1 bytes of header, more than any file holds
    path.write_bytes(bytes(blob))
    assert checkpoint_problem(folder, TINY, LAYERS) == "model.safetensors header changed"
