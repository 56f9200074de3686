"""``bloomperf history``: the nightly history folder.

* ``add RESULT [--history DIR]`` validates a results file and copies it in atomically; a run already
  in the folder is not added twice (``bloomperf.store.history.nights``).
* ``changes [--history DIR]`` lists the persistent changes and what changed on their night
  (``bloomperf.analysis.changes``).
* ``merge SRC… --history DEST`` unions the nights of several runners, one folder per topology
  (``bloomperf.store.history.merge``).
* ``publish --history DIR --out-dir SITE`` writes the history as a static site
(``bloomperf.render.history.site``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bloomperf.cli.arguments import (
    add_detection_options,
    add_format_argument,
    add_history_argument,
    add_out_argument,
    add_run_option,
    detection_settings,
)
from bloomperf.core.errors import BloomperfError
from bloomperf.core.paths import shell_word
from bloomperf.render.history.changes import history_section
from bloomperf.render.history.site import publish_site
from bloomperf.store.history.merge import merge_histories
from bloomperf.store.history.nights import add_to_history, history_folders, parse_date


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser("history", help="the nightly history folder")
    actions = parser.add_subparsers(
        dest="history_command", metavar="ACTION", required=True, parser_class=type(parser)
    )
    add = actions.add_parser("add", help="copy a results file into the history folder")
    add.add_argument("result", type=Path, help="a bloomperf results JSON file")
    add_history_argument(add, "history folder [./history]", "--dir", default=Path("history"))
    add.add_argument("--date", type=parse_date, help="the night [the run's started_at]")
    add.set_defaults(func=run_add)
    show = actions.add_parser("changes", help="list the persistent changes in a history folder")
    add_history_argument(
        show,
        "history folder, or a root of them (history merge) [./history]",
        "--dir",
        default=Path("history"),
    )
    add_format_argument(show, "markdown")
    add_detection_options(show)
    show.set_defaults(func=run_changes)
    merge = actions.add_parser(
        "merge", help="merge runners' nights into one history root, one folder per topology"
    )
    merge.add_argument(
        "sources",
        nargs="+",
        type=Path,
        metavar="SRC",
        help="results files, history folders, or folders of them (downloaded artifacts)",
    )
    add_history_argument(merge, "the history root to merge into", "--into", required=True)
    merge.set_defaults(func=run_merge)
    publish = actions.add_parser("publish", help="write the history as a static web site")
    publish.add_argument(
        "history_positional",
        nargs="?",
        type=Path,
        metavar="HISTORY",
        help="deprecated: use --history",
    )
    add_history_argument(publish, "a history root or one history folder [required]")
    add_out_argument(publish, "folder to write the site into")
    add_run_option(publish, "baselines")  # read as every reader does: the search order
    add_detection_options(publish)
    publish.set_defaults(func=run_publish)


def run_add(args: argparse.Namespace) -> int:
    path, added = add_to_history(args.result, args.history, args.date)
    verb = "added as" if added else "already in the history as"
    print(f"bloomperf: {shell_word(args.result)}: {verb} {shell_word(path)}")
    return 0


def run_changes(args: argparse.Namespace) -> int:
    """Each topology's changes: of one history folder, or of every folder of a merged root."""
    folders = history_folders(args.history)
    for folder in folders:
        if len(folders) > 1:
            print(f"{'## ' if args.format == 'markdown' else ''}{folder.name}:")
        text, _ = history_section(folder, args.format, **detection_settings(args))
        print(text, end="")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    for merged in merge_histories(args.sources, args.history):
        names = [p.name for p in merged.added]
        shown = ", ".join(names if len(names) <= 4 else [names[0], "…", names[-1]]) or "nothing new"
        print(
            f"bloomperf: {merged.folder}: {len(merged.added)} night(s) added ({shown}), "
            f"{merged.already} already there"
        )
    return 0


def run_publish(args: argparse.Namespace) -> int:
    if args.history_positional is not None:
        if args.history is not None:
            raise BloomperfError("history publish: give the history once, as --history DIR")
        print("bloomperf: a positional HISTORY is deprecated; use --history", file=sys.stderr)
    history = args.history or args.history_positional
    if history is None:
        raise BloomperfError("history publish: --history DIR is required")
    site = publish_site(history, args.out, args.baselines, **detection_settings(args))
    print(
        f"bloomperf: site written to {shell_word(site.index)}: {len(site.pages)} trend pages, "
        f"{len(site.reports)} report(s)"
    )
    return 0
