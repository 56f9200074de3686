"""The serving sweep's load client: vLLM's own ``vllm.benchmarks.serve``, run from the serving
venv, one run per request rate.

Why that client: it is kept with the server, it sends Poisson arrivals (gamma with a burstiness
factor), streams every request and records each one's TTFT, inter-token gaps and latency, which
bloomperf then judges itself (``bloomperf.analysis.serving``). Its headroom on this machine is
measured, not assumed (docs/serving.md).

Lengths: the client's ShareGPT reader takes a prompt and a completion per request and counts
their tokens with the model's tokenizer; bloomperf writes texts of exactly the drawn lengths
(one token per word, words drawn at random so that no two prompts share a prefix the server's
cache could skip), and ``--ignore-eos`` makes the server generate exactly the completion's length.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bloomperf.analysis.serving import RequestTiming
from bloomperf.catalog.serving_workload import RequestLengths
from bloomperf.core.errors import BloomperfError
from bloomperf.core.jsonfile import write_json_atomic
from bloomperf.harness.orphans import die_with_parent

# The client: a script the serving venv runs, a process of its own per rate (forked instead
# from one process that had imported vLLM, its runs read the stream in bursts: docs/serving.md).
CLIENT_SCRIPT = Path(__file__).with_name("vllm_client.py")
RESULT_NAME = "result.json"
# What the client prints just before its timed requests and just after them: the window a
# ``RunWatch`` reads the machine's load over (its start-up and its one test request are not).
RUN_STARTS = b"Starting main benchmark run"
RUN_ENDS = b"Serving Benchmark Result"
# How often the controller looks at the client's log: a stat and, when it grew, a read of what
# was added (microseconds), so the window's ends are late by at most this.
WATCH_POLL_S = 0.01


@dataclass(frozen=True)
class ClientCommand:
    """One client run: the interpreter, the client's script and the run's arguments."""

    python: str
    args: tuple[str, ...]
    script: Path

    def argv(self) -> list[str]:
        return [self.python, str(self.script), *self.args]


class RunWatch(Protocol):
    """Told when the client's timed requests start and when they are all done."""

    def started(self, pid: int) -> None: ...

    def ended(self, pid: int) -> None: ...


@dataclass(frozen=True)
class ClientRun:
    """One rate's client run: its requests as seen by the client, and its wall time."""

    requests: tuple[RequestTiming, ...]
    duration_s: float
    start_times: tuple[float, ...] = ()


def vllm_client(python: Path, args: tuple[str, ...] = ()) -> ClientCommand:
    """vLLM's client in ``python`` (the serving venv's), with ``args``."""
    return ClientCommand(str(python), args, CLIENT_SCRIPT)


def single_token_words(tokenizer_file: Path) -> list[str]:
    """Words that the model's tokenizer keeps as one token after a space (byte-level BPE's
    ``Ġword``), checked by encoding each one."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    words = []
    for piece in sorted(tokenizer.get_vocab()):
        word = piece[1:]
        plain = piece.startswith("\u0120") and word.isalpha() and word.isascii()
        if plain and len(tokenizer.encode(" " + word, add_special_tokens=False).ids) == 1:
            words.append(word)
    if len(words) < 16:
        raise BloomperfError(f"{tokenizer_file}: too few one-token words to write prompts")
    return words


def write_dataset(path: Path, lengths: list[RequestLengths], words: list[str], seed: int) -> None:
    """The requests as a ShareGPT file whose texts have exactly the drawn token counts."""
    rng = np.random.default_rng(seed)

    def text(count: int) -> str:
        return "".join(" " + words[i] for i in rng.integers(0, len(words), count))

    rows = [
        {"conversations": [{"value": text(r.prompt_tokens)}, {"value": text(r.output_tokens)}]}
        for r in lengths
    ]
    write_json_atomic(path, rows)


def client_command(
    python: Path,
    url: str,
    model: str,
    tokenizer: Path,
    dataset: Path,
    requests: int,
    rate: float,
    burstiness: float,
    result_dir: Path,
    seed: int,
) -> ClientCommand:
    args = (
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--num-prompts",
        str(requests),
        "--request-rate",
        repr(rate),  # "inf" for an unbounded rate, as the client reads it
        "--burstiness",
        repr(burstiness),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        str(seed),
        "--num-warmups",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        RESULT_NAME,
    )
    return vllm_client(python, args)


def run_client(
    command: ClientCommand,
    result_dir: Path,
    log: Path,
    timeout_s: float,
    watch: RunWatch | None = None,
) -> ClientRun:
    """Run one rate's client; its result, or ``RuntimeError`` with the log's tail. ``watch``
    hears of its timed run's start and end (``RUN_STARTS``, ``RUN_ENDS`` in its log)."""
    result = result_dir / RESULT_NAME
    result.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout_s
    with open(log, "ab") as out:
        try:
            process = subprocess.Popen(
                command.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
            try:
                code = follow(process, log, out.tell(), deadline - time.monotonic(), watch)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(f"client ran over {timeout_s:g} s") from exc
    if code != 0 or not result.exists():
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"client exited with code {code}; log tail:\n{tail}")
    return parse_result(json.loads(result.read_text()))


def follow(
    process: subprocess.Popen[bytes],
    log: Path,
    offset: int,
    timeout_s: float,
    watch: RunWatch | None,
) -> int:
    """Wait for the client, telling ``watch`` of its run's ends as its log shows them; its exit
    code, or ``TimeoutExpired`` past ``timeout_s``."""
    if watch is None:
        return process.wait(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    seen, marks = b"", [(RUN_STARTS, watch.started), (RUN_ENDS, watch.ended)]
    while marks:
        code = process.poll()
        # The log before the exit: a client that prints its end mark and exits within one look
        # is still heard to end (late by its exit, not lost).
        if log.stat().st_size > offset + len(seen):
            with open(log, "rb") as file:
                file.seek(offset + len(seen))
                seen += file.read()
        while marks and marks[0][0] in seen:
            marks.pop(0)[1](process.pid)
        if code is not None:
            return code
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(str(log), timeout_s)
        time.sleep(WATCH_POLL_S)
    return process.wait(timeout=max(deadline - time.monotonic(), 0.0))


def parse_result(data: dict[str, Any]) -> ClientRun:
    """The client's detailed result as bloomperf's request timings."""
    errors = data.get("errors") or []
    timings = []
    for i, error in enumerate(errors):
        timings.append(
            RequestTiming(
                success=not error,
                prompt_tokens=int(data["input_lens"][i]),
                output_tokens=int(data["output_lens"][i]),
                ttft_s=float(data["ttfts"][i] or 0.0),
                latency_s=float(data["latencies"][i] or 0.0),
                itls_s=tuple(float(g) for g in data["itls"][i] or ()),
            )
        )
    starts = tuple(float(t) for t in data.get("start_times") or () if t is not None)
    return ClientRun(tuple(timings), float(data["duration"]), starts)
