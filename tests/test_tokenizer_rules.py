"""The tokenizer files a built checkpoint carries, loaded by transformers itself: a BLOOM fast
tokenizer with BLOOM's four special tokens at their ids, padding on the left, no prefix space
and no clean-up of spaces (a prompt of n words is n tokens, and text round-trips byte for byte),
merges written as "a b" strings (what tokenizers < 0.20 reads), trained quietly to the size
asked for; a size under the byte alphabet refused. Each fact is read from the files or from
the loaded tokenizer, not from the module's constants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bloomperf.catalog.tokenizer import tokenizer_files
from bloomperf.core.errors import BloomperfError

SPECIALS = {"unk_token": ("<unk>", 0), "bos_token": ("<s>", 1), "eos_token": ("</s>", 2),
            "pad_token": ("<pad>", 3)}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    for name, data in tokenizer_files(1000).items():
        (folder / name).write_text(json.dumps(data))
    return folder


def test_transformers_loads_a_bloom_tokenizer_with_blooms_special_tokens(written: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(written)
    # transformers 4.x has the class; 5.x maps its name to its fast backend.
    assert type(tokenizer).__name__ in ("BloomTokenizerFast", "TokenizersBackend")
    for attribute, (token, token_id) in SPECIALS.items():
        assert getattr(tokenizer, attribute) == token
        assert tokenizer.convert_tokens_to_ids(token) == token_id
    assert tokenizer.padding_side == "left"
    assert len(tokenizer) == 1000


def test_text_round_trips_and_no_space_is_added_or_cleaned(written: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(written)
    text = "Hello , world . naïve  spaces ünïcode 176B"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text  # " ," and " ." kept: no clean-up
    assert tokenizer("hello")["input_ids"] != tokenizer(" hello")["input_ids"]


def test_an_unknown_token_and_the_merges_are_written_as_old_tokenizers_read_them() -> None:
    files = tokenizer_files(300)
    model = files["tokenizer.json"]["model"]
    assert model["unk_token"] == "<unk>"
    assert model["merges"] and all(
        isinstance(m, str) and m.count(" ") == 1 for m in model["merges"]
    )
    assert files["tokenizer_config.json"]["tokenizer_class"] == "BloomTokenizerFast"


def test_training_prints_no_progress(capfd: pytest.CaptureFixture[str]) -> None:
    tokenizer_files(300)
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("size", [0, 259])
def test_a_vocabulary_under_the_byte_alphabet_and_the_specials_is_refused(size: int) -> None:
    with pytest.raises(BloomperfError, match=rf"^tokenizer: vocab_size {size} < 260 \(bytes\)$"):
        tokenizer_files(size)
    assert len(json.dumps(tokenizer_files(260)["tokenizer.json"])) > 0
