"""The serving sweep's load client, in process (``harness/loadgen.py``): the requests file whose
texts have exactly the drawn token counts, the words that are one token each, the client's
command line, and its detailed result read back as bloomperf's request timings."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomperf.catalog.serving_workload import RequestLengths
from bloomperf.catalog.tokenizer import MIN_TOKENIZER_VOCAB, TOKENIZER_VOCAB_SIZE, tokenizer_files
from bloomperf.core.errors import BloomperfError
from bloomperf.harness.loadgen import (
    CLIENT_SCRIPT,
    RESULT_NAME,
    ClientCommand,
    client_command,
    parse_result,
    run_client,
    single_token_words,
    write_dataset,
)
from bloomperf.store.serving import RequestTiming
from tests.pace import soon_after

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
WORDS = [f"w{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(4)]


def texts(path: Path) -> list[tuple[str, str]]:
    rows = json.loads(path.read_text())
    assert all(len(row["conversations"]) == 2 for row in rows)
    return [(row["conversations"][0]["value"], row["conversations"][1]["value"]) for row in rows]


@SETTINGS
@given(
    lengths=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_text_has_exactly_its_drawn_number_of_words(
    tmp_path: Path, lengths: list[tuple[int, int]], seed: int
) -> None:
    path = tmp_path / "requests.json"
    write_dataset(path, [RequestLengths(p, o) for p, o in lengths], WORDS, seed)
    rows = texts(path)
    assert len(rows) == len(lengths)
    for (prompt, output), (p, o) in zip(rows, lengths, strict=True):
        for text, count in ((prompt, p), (output, o)):
            assert text == "".join(" " + w for w in text.split())  # one space before each word
            assert len(text.split()) == count
            assert set(text.split()) <= set(WORDS)


def test_the_same_seed_writes_the_same_file_and_another_seed_other_texts(tmp_path: Path) -> None:
    lengths = [RequestLengths(30, 10), RequestLengths(30, 10)]
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        write_dataset(tmp_path / name, lengths, WORDS, seed)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert texts(tmp_path / "a") != texts(tmp_path / "c")
    # Words drawn at random: two prompts of one file share no long prefix a cache could skip.
    (first, _), (second, _) = texts(tmp_path / "a")
    assert first.split()[:3] != second.split()[:3]
    drawn = {w for prompt, output in texts(tmp_path / "a") for w in (prompt + output).split()}
    assert len(drawn) > 20  # from the whole list, not its first few


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(tokenizer_files(TOKENIZER_VOCAB_SIZE)["tokenizer.json"]))
    return path


def one_token_words(path: Path) -> list[str]:
    """The rule stated here: the vocabulary's plain ASCII words after a space (byte-level
    BPE's "\u0120word") that encode to one token."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    return sorted(
        piece[1:]
        for piece in tokenizer.get_vocab()
        if piece.startswith("\u0120")
        and piece[1:].isalpha()
        and piece[1:].isascii()
        and len(tokenizer.encode(" " + piece[1:], add_special_tokens=False).ids) == 1
    )


def test_one_token_words_are_each_one_token_after_a_space(tokenizer_file: Path) -> None:
    words = single_token_words(tokenizer_file)
    assert len(words) >= 16 and len(set(words)) == len(words)
    assert words == one_token_words(tokenizer_file)


# 292, 293 and 294 make 15, 16 and 17 such words with this project's trained tokenizer: the
# limit is met one word either side, whatever the count at each size.
@pytest.mark.parametrize("vocab_size", [*range(MIN_TOKENIZER_VOCAB, 420, 20), 292, 293, 294])
def test_fewer_than_16_one_token_words_are_refused(tmp_path: Path, vocab_size: int) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tokenizer_files(vocab_size)["tokenizer.json"]))
    expected = one_token_words(path)
    if len(expected) >= 16:
        assert single_token_words(path) == expected
    else:
        with pytest.raises(BloomperfError) as caught:
            single_token_words(path)
        assert str(caught.value) == f"{path}: too few one-token words to write prompts"


def test_a_prompt_of_n_one_token_words_is_n_tokens(tokenizer_file: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    words = single_token_words(tokenizer_file)
    write_dataset(tmp_path / "r.json", [RequestLengths(57, 9)], words, 3)
    [(prompt, output)] = texts(tmp_path / "r.json")
    assert len(tokenizer.encode(prompt, add_special_tokens=False).ids) == 57
    assert len(tokenizer.encode(output, add_special_tokens=False).ids) == 9


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(("rate", "text"), [(0.5, "0.5"), (2.0, "2.0"), (math.inf, "inf")])
def test_the_clients_command_carries_each_setting(tmp_path: Path, rate: float, text: str) -> None:
    command = client_command(
        Path("/venv/bin/python"),
        "http://127.0.0.1:8123",
        "m",
        tmp_path / "tok",
        tmp_path / "d.json",
        30,
        rate,
        0.5,
        tmp_path / "out",
        11,
    )
    argv = command.argv()
    assert argv[:2] == ["/venv/bin/python", str(CLIENT_SCRIPT)] and CLIENT_SCRIPT.is_file()
    expected = {
        "--backend": "openai",
        "--base-url": "http://127.0.0.1:8123",
        "--endpoint": "/v1/completions",
        "--model": "m",
        "--tokenizer": str(tmp_path / "tok"),
        "--dataset-name": "sharegpt",
        "--dataset-path": str(tmp_path / "d.json"),
        "--num-prompts": "30",
        "--request-rate": text,
        "--burstiness": "0.5",
        "--temperature": "0",
        "--seed": "11",
        "--num-warmups": "0",
        "--result-dir": str(tmp_path / "out"),
        "--result-filename": RESULT_NAME,
    }
    assert {name: flag(argv, name) for name in expected} == expected
    for switch in ("--disable-shuffle", "--ignore-eos", "--disable-tqdm", "--save-result"):
        assert switch in argv
    assert "--save-detailed" in argv  # the per-request figures parse_result reads
    assert len(argv) == 2 + 2 * len(expected) + 5


REQUEST = st.tuples(
    st.sampled_from(["", "", "timeout", "HTTP 500"]),
    st.integers(1, 4000),
    st.integers(0, 500),
    st.one_of(st.none(), st.floats(0, 60)),
    st.one_of(st.none(), st.floats(0, 600)),
    st.one_of(st.none(), st.lists(st.floats(0, 5), max_size=6)),
)


@SETTINGS
@given(
    requests=st.lists(REQUEST, max_size=10),
    duration=st.floats(0.1, 1000),
    starts=st.lists(st.one_of(st.none(), st.floats(0, 1e9)), max_size=10),
)
def test_the_detailed_result_reads_back_request_by_request(
    requests: list[tuple[str, int, int, float | None, float | None, list[float] | None]],
    duration: float,
    starts: list[float | None],
) -> None:
    data: dict[str, Any] = {
        "errors": [r[0] for r in requests],
        "input_lens": [r[1] for r in requests],
        "output_lens": [r[2] for r in requests],
        "ttfts": [r[3] for r in requests],
        "latencies": [r[4] for r in requests],
        "itls": [r[5] for r in requests],
        "duration": duration,
        "start_times": starts,
    }
    run = parse_result(json.loads(json.dumps(data)))
    assert run.duration_s == duration
    assert run.start_times == tuple(t for t in starts if t is not None)
    assert run.requests == tuple(
        RequestTiming(
            success=error == "",
            prompt_tokens=prompt,
            output_tokens=output,
            ttft_s=ttft or 0.0,
            latency_s=latency or 0.0,
            itls_s=tuple(itls or ()),
        )
        for error, prompt, output, ttft, latency, itls in requests
    )
    for request in run.requests:
        assert type(request.ttft_s) is float and type(request.latency_s) is float


def test_a_result_without_errors_or_start_times_has_no_requests_and_no_starts() -> None:
    run = parse_result({"duration": 3, "errors": None})
    assert (run.requests, run.duration_s, run.start_times) == ((), 3.0, ())
    assert type(run.duration_s) is float
    assert parse_result({"duration": 1}).requests == ()


def client(tmp_path: Path, body: str) -> ClientCommand:
    script = tmp_path / "client.py"
    script.write_text("import sys, time\n" + body)
    return ClientCommand(sys.executable, (), script=script)


def test_a_failed_client_names_its_code_and_its_logs_last_2000_characters(
    tmp_path: Path,
) -> None:
    """What it printed on stderr too, bytes that are not UTF-8 replaced; earlier text cut."""
    body = (
        "sys.stdout.write('x' * 3000); sys.stdout.flush()\n"
        "sys.stderr.buffer.write(b'\\xff the reason'); sys.stderr.flush()\n"
        "sys.exit(3)\n"
    )
    log = tmp_path / "client.log"
    with pytest.raises(RuntimeError) as caught:
        run_client(client(tmp_path, body), tmp_path, log, 60.0)
    tail = ("x" * 3000 + "\ufffd the reason")[-2000:]
    assert str(caught.value) == f"client exited with code 3; log tail:\n{tail}"


def test_a_client_that_exits_0_without_its_result_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"^client exited with code 0; log tail:\nno result$"):
        run_client(client(tmp_path, "print('no result', end='')"), tmp_path, tmp_path / "l", 60.0)


def test_a_clients_result_is_read_and_a_stale_one_never_is(tmp_path: Path) -> None:
    (tmp_path / RESULT_NAME).write_text('{"duration": 9}')  # an earlier rate's
    body = f"open({str(tmp_path / RESULT_NAME)!r}, 'w').write('{{\"duration\": 2}}')\n"
    assert run_client(client(tmp_path, body), tmp_path, tmp_path / "l", 60.0).duration_s == 2.0
    with pytest.raises(RuntimeError):
        run_client(client(tmp_path, "pass"), tmp_path, tmp_path / "l", 60.0)


def test_a_client_reads_no_input_and_one_that_hangs_unwatched_is_stopped(tmp_path: Path) -> None:
    result = str(tmp_path / RESULT_NAME)
    body = f"sys.stdin.read()\nopen({result!r}, 'w').write('{{\"duration\": 1}}')\n"
    assert run_client(client(tmp_path, body), tmp_path, tmp_path / "l", 60.0).duration_s == 1.0
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^client ran over 1 s$"):
        run_client(client(tmp_path, "time.sleep(60)"), tmp_path, tmp_path / "l", 1.0)
    # Stopped, not waited out: its 1 s, then a kill and a reap (no grace), at this machine's pace.
    assert time.monotonic() - started < soon_after(1.0)


def test_every_word_of_the_list_can_be_drawn(tmp_path: Path) -> None:
    write_dataset(tmp_path / "r.json", [RequestLengths(200, 0)], ["first", "last"], 5)
    [(prompt, _)] = texts(tmp_path / "r.json")
    assert set(prompt.split()) == {"first", "last"}
