"""`bloomperf report RESULT… --out-dir DIR`: a page to look at rather than a table to read.

What the report holds, and the files it writes, are described in ``bloomperf.render.report``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bloomperf.cli.arguments import (
    add_detection_options,
    add_history_argument,
    add_out_argument,
    detection_settings,
)
from bloomperf.cli.inputs import add_input_arguments, baseline_for
from bloomperf.core.jsonfile import refuse_overwriting_inputs
from bloomperf.core.paths import shell_word
from bloomperf.render.report import REPORT_FILES, write_report
from bloomperf.store.results.files import read_many


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="HTML + markdown report with plots", description=__doc__
    )
    add_input_arguments(parser, "bloomperf results or pytest-benchmark JSON (merged into one run)")
    add_out_argument(parser, "folder to write the report into")
    add_history_argument(
        parser, "history folder (one results file per night) for the trend plot [none]"
    )
    add_detection_options(parser)
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    settings = detection_settings(args)
    run = read_many(list(args.results))
    baseline, _ = baseline_for(run, args.baseline, args.baselines)
    inputs = [Path(r) for r in args.results] + ([Path(baseline.path)] if baseline else [])
    outputs = [args.out / name for name in REPORT_FILES]
    refuse_overwriting_inputs(outputs, inputs, "--out-dir")
    report = write_report(run, baseline, args.out, args.history, **settings)
    print(
        f"bloomperf: report written to {shell_word(report.html)} and {shell_word(report.markdown)}"
    )
    return 0
