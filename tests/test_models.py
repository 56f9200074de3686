"""Shapes, random-weight checkpoints, the model cache and --model resolution, on CPU."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

from bloomperf.backends.compat import dtype_argument
from bloomperf.catalog import checkpoint_builder, checkpoints, models
from bloomperf.catalog.checkpoint_builder import build_checkpoint
from bloomperf.catalog.checkpoints import (
    PreparedModel,
    checkpoint_folder_name,
    default_cache_dir,
    resolve_model,
)
from bloomperf.catalog.manifest import MANIFEST_NAME
from bloomperf.catalog.models import MODEL_SHAPES
from bloomperf.catalog.workload import PROMPTS
from bloomperf.core.errors import BloomperfError

TINY = MODEL_SHAPES["tiny"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> PreparedModel:
    return resolve_model("tiny", cache_dir=tmp_path_factory.mktemp("cache"))


def file_digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def one_line_error(excinfo: pytest.ExceptionInfo[BloomperfError], option: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{option}:"), message
    return message


# --- shapes -------------------------------------------------------------------------------


def meta_model_parameters(shape: models.ModelShape, layers: int) -> int:
    config = BloomConfig(
        hidden_size=shape.hidden_size,
        n_layer=layers,
        n_head=shape.n_head,
        vocab_size=shape.vocab_size,
    )
    with torch.device("meta"):
        model = BloomForCausalLM(config)
    return sum(p.numel() for p in model.parameters())  # tied lm_head counted once


@pytest.mark.parametrize(("name", "layers"), [("tiny", 2), ("bloom-560m", 24), ("bloom-1b1", 3)])
def test_parameter_count_matches_transformers(name: str, layers: int) -> None:
    shape = MODEL_SHAPES[name]
    assert shape.parameters(layers) == meta_model_parameters(shape, layers)


def test_known_parameter_counts() -> None:
    assert MODEL_SHAPES["bloom-560m"].parameters() == 559_214_592  # bigscience/bloom-560m
    assert MODEL_SHAPES["bloom-176b"].parameters() == pytest.approx(176.2e9, rel=1e-3)
    assert MODEL_SHAPES["bloom-176b"].parameters(2) < MODEL_SHAPES["bloom-176b"].parameters()


def test_real_shapes_have_blooms_vocabulary_and_whole_heads() -> None:
    assert list(MODEL_SHAPES) == [
        "tiny",
        "tiny-serving",
        "bloom-560m",
        "bloom-1b1",
        "bloom-1b7",
        "bloom-3b",
        "bloom-7b1",
        "bloom-176b",
    ]
    for shape in MODEL_SHAPES.values():
        assert shape.hidden_size % shape.n_head == 0
        if not shape.name.startswith("tiny"):
            assert shape.vocab_size == 250880
    big = MODEL_SHAPES["bloom-176b"]
    assert (big.n_layer, big.hidden_size, big.n_head) == (70, 14336, 112)


# --- the built checkpoint -----------------------------------------------------------------


def test_tiny_checkpoint_loads_with_tied_embeddings(tiny: PreparedModel) -> None:
    assert tiny.name == "tiny"
    assert tiny.shape == TINY
    assert (tiny.layers, tiny.parameters) == (2, TINY.parameters())
    model = BloomForCausalLM.from_pretrained(tiny.path)
    assert model.config.hidden_size == 64
    assert model.config.n_layer == 2
    assert model.config.vocab_size == TINY.vocab_size
    assert model.lm_head.weight.data_ptr() == model.transformer.word_embeddings.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == tiny.parameters
    embedding_std = model.transformer.word_embeddings.weight.std().item()
    assert embedding_std == pytest.approx(TINY.initializer_range, rel=0.05)


def test_saved_tensors_are_exactly_blooms(tiny: PreparedModel) -> None:
    with torch.device("meta"):
        expected = BloomForCausalLM(BloomConfig.from_pretrained(tiny.path)).state_dict()
    del expected["lm_head.weight"]  # tied: save_pretrained does not store it either
    with safe_open(str(tiny.path / "model.safetensors"), "pt") as f:
        saved = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        assert f.metadata() == {"format": "pt"}
    assert saved == {name: tuple(t.shape) for name, t in expected.items()}


def test_build_is_deterministic_and_seeded(tmp_path: Path, tiny: PreparedModel) -> None:
    build_checkpoint(TINY, None, tmp_path / "again")
    cached = file_digests(tiny.path)
    cached.pop(MANIFEST_NAME)  # the cache's own record of the build, beside its files
    assert file_digests(tmp_path / "again") == cached
    build_checkpoint(TINY, None, tmp_path / "seed1", seed=1)
    seed1 = file_digests(tmp_path / "seed1")
    assert seed1["model.safetensors"] != file_digests(tiny.path)["model.safetensors"]
    assert seed1["tokenizer.json"] == file_digests(tiny.path)["tokenizer.json"]


def test_truncated_model_keeps_the_first_layers(tmp_path: Path, tiny: PreparedModel) -> None:
    one = resolve_model("tiny", layers=1, cache_dir=tmp_path)
    assert one.path.name.startswith("tiny-L1-")
    assert (one.layers, one.parameters) == (1, TINY.parameters(1))
    with (
        safe_open(str(one.path / "model.safetensors"), "pt") as short,
        safe_open(str(tiny.path / "model.safetensors"), "pt") as full,
    ):
        assert "transformer.h.1.input_layernorm.weight" not in short.keys()  # noqa: SIM118
        for name in short.keys():  # noqa: SIM118
            assert torch.equal(short.get_tensor(name), full.get_tensor(name)), name


def test_sharded_checkpoint_loads_like_a_single_file(
    tmp_path: Path, tiny: PreparedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint_builder, "MAX_SHARD_BYTES", 200_000)
    build_checkpoint(TINY, None, tmp_path)
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(shards) > 1
    assert shards == [
        f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)
    ]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == TINY.parameters() * 4
    sharded = BloomForCausalLM.from_pretrained(tmp_path).state_dict()
    single = BloomForCausalLM.from_pretrained(tiny.path).state_dict()
    assert sharded.keys() == single.keys()
    for name, tensor in single.items():
        assert torch.equal(sharded[name], tensor), name


def test_tokenizer_round_trips_prompts_with_blooms_special_ids(tiny: PreparedModel) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    assert len(tokenizer) == TINY.vocab_size
    ids = (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    assert (*ids, tokenizer.pad_token_id) == (0, 1, 2, 3)
    config = BloomConfig.from_pretrained(tiny.path)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 3)
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        assert 1 < len(ids) < len(prompt)  # merges learned, no special tokens added
        assert tokenizer.decode(ids) == prompt


def test_tokenizer_file_uses_the_merges_format_old_tokenizers_read(tiny: PreparedModel) -> None:
    # transformers 4.43.4 (the reference profile) comes with tokenizers 0.19, which refuses
    # merges written as pairs; the same checkpoint must load in both environments.
    merges = json.loads((tiny.path / "tokenizer.json").read_text())["model"]["merges"]
    assert len(merges) == TINY.vocab_size - 256 - 4  # bytes and special tokens are not merges
    assert all(isinstance(m, str) and len(m.split(" ")) == 2 for m in merges)


def test_small_vocabulary_shape_gets_a_tokenizer_that_fits(tmp_path: Path) -> None:
    small = models.ModelShape("small", hidden_size=16, n_layer=1, n_head=2, vocab_size=300)
    build_checkpoint(small, None, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tokenizer) == 300
    assert max(max(tokenizer(p)["input_ids"]) for p in PROMPTS) < 300
    with pytest.raises(BloomperfError):
        build_checkpoint(dataclasses.replace(small, vocab_size=200), None, tmp_path / "too-small")


def test_greedy_decoding_gives_varied_tokens(tiny: PreparedModel) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    tokenizer.padding_side = "left"
    model = BloomForCausalLM.from_pretrained(tiny.path)
    inputs = tokenizer(list(PROMPTS), return_tensors="pt", padding=True)
    out = model.generate(**inputs, max_new_tokens=30, min_new_tokens=30, do_sample=False)
    new = out[:, inputs["input_ids"].shape[1] :]
    assert new.shape == (len(PROMPTS), 30)
    # Not one token repeated: every row moves, most rows stay out of short cycles, and the rows
    # differ from each other (a random net still cycles on some prompts, see INIT_SCALE).
    distinct = [len(set(row.tolist())) for row in new]
    assert min(distinct) >= 3, distinct
    assert sum(d >= 5 for d in distinct) >= 0.75 * len(distinct), distinct
    assert len(set(new.flatten().tolist())) >= 40


def test_real_width_truncated_build(tmp_path: Path) -> None:
    # The path every GPU shape takes (bf16, vocab 250880), at the smallest real width.
    model = resolve_model("bloom-560m", layers=2, cache_dir=tmp_path)
    assert model.path.name.startswith("bloom-560m-L2-")
    assert (model.layers, model.parameters) == (2, MODEL_SHAPES["bloom-560m"].parameters(2))
    config = BloomConfig.from_pretrained(model.path)
    assert (config.hidden_size, config.n_layer, config.n_head) == (1024, 2, 16)
    assert config.vocab_size == 250880
    with safe_open(str(model.path / "model.safetensors"), "pt") as f:
        embedding = f.get_tensor("transformer.word_embeddings.weight")
        assert f.get_tensor("transformer.h.1.mlp.dense_4h_to_h.weight").shape == (1024, 4096)
    assert embedding.dtype == torch.bfloat16
    assert embedding.shape == (250880, 1024)
    loaded = BloomForCausalLM.from_pretrained(model.path, **dtype_argument(torch.float16))
    tokenizer = AutoTokenizer.from_pretrained(model.path)
    with torch.no_grad():
        logits = loaded(**tokenizer(PROMPTS[0], return_tensors="pt")).logits
    assert torch.isfinite(logits).all()


# --- the cache ----------------------------------------------------------------------------


def test_cache_is_reused_without_rebuilding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = resolve_model("tiny", cache_dir=tmp_path)
    mtime = (first.path / "model.safetensors").stat().st_mtime_ns

    def must_not_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(checkpoints, "build_checkpoint", must_not_build)
    second = resolve_model("tiny", cache_dir=tmp_path)
    assert second == first
    assert (second.path / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")] == [
        first.path.name
    ]


def test_config_change_builds_a_new_folder(
    tmp_path: Path, tiny: PreparedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = dataclasses.replace(TINY, n_head=8)
    monkeypatch.setitem(MODEL_SHAPES, "tiny", changed)
    rebuilt = resolve_model("tiny", cache_dir=tiny.path.parent.parent)
    assert rebuilt.path != tiny.path
    assert BloomConfig.from_pretrained(rebuilt.path).n_head == 8
    assert checkpoint_folder_name(TINY, 2, seed=1) != checkpoint_folder_name(TINY, 2)
    monkeypatch.setattr(checkpoints, "BUILDER_VERSION", checkpoints.BUILDER_VERSION + 1)
    assert checkpoint_folder_name(TINY, 2) != tiny.path.name


def test_failed_build_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "models" / f".{checkpoint_folder_name(TINY, 2)}.killed.partial"
    stale.mkdir(parents=True)

    def fail(folder: Path, vocab_size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_builder, "write_tokenizer", fail)
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model("tiny", cache_dir=tmp_path)
    assert "No space left" in one_line_error(excinfo, "--model")
    assert [p for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == []


def test_concurrent_builds_build_once(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; "
        "from bloomperf.catalog.checkpoints import resolve_model; "
        "print(resolve_model('tiny', cache_dir=Path(sys.argv[1])).path)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    assert sum(err.count("bloomperf: built tiny") for _, err in outputs) == 1
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")] == [
        Path(paths.pop()).name
    ]


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BLOOMPERF_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("BLOOMPERF_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "bloomperf"


# --- --model and --layers -----------------------------------------------------------------


def test_local_checkpoint_folder_is_accepted(tmp_path: Path, tiny: PreparedModel) -> None:
    same = resolve_model(str(tiny.path))
    # Named by the folder's last part: the name goes into file names, the path beside it.
    assert same == PreparedModel(tiny.path.name, tiny.path, 2, tiny.parameters, TINY)
    one_layer = resolve_model("tiny", layers=1, cache_dir=tmp_path).path
    external = resolve_model(str(one_layer), layers=1)
    assert (external.layers, external.parameters, external.shape) == (1, TINY.parameters(1), None)


@pytest.mark.parametrize("layers", [0, -1, 3])
def test_layers_out_of_range(tmp_path: Path, layers: int) -> None:
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model("tiny", layers=layers, cache_dir=tmp_path)
    assert "1 to 2" in one_line_error(excinfo, "--layers")
    assert not (tmp_path / "models").exists()


def test_layers_cannot_truncate_an_external_checkpoint(tiny: PreparedModel) -> None:
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(str(tiny.path), layers=1)
    one_line_error(excinfo, "--layers")


@pytest.mark.parametrize("name", ["bloom-42b", "no/such-model", "./missing-folder", "a b/c"])
def test_unknown_model(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(name, cache_dir=tmp_path)
    message = one_line_error(excinfo, "--model")
    assert repr(name) in message
    assert "tiny, tiny-serving, bloom-560m" in message


def test_hub_id_in_the_local_cache(
    tmp_path: Path, tiny: PreparedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The layout huggingface_hub leaves after a download: refs/main names a snapshot folder.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--bigscience--bloom-tiny"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny.path, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    model = resolve_model("bigscience/bloom-tiny")
    assert model.name == "bigscience/bloom-tiny"
    assert model.path == repo / "snapshots" / commit
    assert (model.layers, model.shape) == (2, TINY)


def make_checkpoint_copy(tiny: PreparedModel, folder: Path) -> Path:
    shutil.copytree(tiny.path, folder)
    return folder


def test_folder_without_config(tmp_path: Path, tiny: PreparedModel) -> None:
    folder = make_checkpoint_copy(tiny, tmp_path / "ckpt")
    (folder / "config.json").unlink()
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(str(folder))
    assert "no config.json" in one_line_error(excinfo, "--model")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"model_type": "gpt2"}, "not a BLOOM config"),
        ({"n_layer": "2"}, "no positive integer n_layer"),
        ({"hidden_size": 0}, "no positive integer hidden_size"),
    ],
)
def test_folder_with_a_bad_config(
    tmp_path: Path, tiny: PreparedModel, edit: dict[str, object], expected: str
) -> None:
    folder = make_checkpoint_copy(tiny, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(str(folder))
    assert expected in one_line_error(excinfo, "--model")


def test_folder_with_broken_json(tmp_path: Path, tiny: PreparedModel) -> None:
    folder = make_checkpoint_copy(tiny, tmp_path / "ckpt")
    (folder / "config.json").write_text('{"model_type": "bloom",')
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(str(folder))
    assert "\n" not in str(excinfo.value)
    assert "config.json" in str(excinfo.value)


@pytest.mark.parametrize(("missing", "expected"), [("*.safetensors", "weights"), ("tok*", "token")])
def test_folder_missing_files(
    tmp_path: Path, tiny: PreparedModel, missing: str, expected: str
) -> None:
    folder = make_checkpoint_copy(tiny, tmp_path / "ckpt")
    for path in folder.glob(missing):
        os.remove(path)
    with pytest.raises(BloomperfError) as excinfo:
        resolve_model(str(folder))
    assert expected in one_line_error(excinfo, "--model")
