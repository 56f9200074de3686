"""``bloomperf history``: the nightly history folder.

* ``add RESULT [--dir DIR]`` validates a results file and copies it in atomically; a run already
  in the folder is not added twice (``bloomperf.store.history.nights``).
* ``changes [--dir DIR]`` lists the persistent changes and what changed on their night
  (``bloomperf.store.history``).
* ``merge SRC… --into DEST`` unions the nights of several runners, one folder per topology
  (``bloomperf.store.history.merge``).
* ``publish HISTORY --out SITE`` writes the history as a static site
(``bloomperf.render.history.site``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bloomperf.cli.arguments import add_format_argument, add_out_argument, add_run_option
from bloomperf.render.history.site import publish_site
from bloomperf.store.history import add_detection_options, detection_settings, history_section
from bloomperf.store.history.merge import merge_histories
from bloomperf.store.history.nights import add_to_history, parse_date


def add_command(subparsers: Any) -> None:
    parser = subparsers.add_parser("history", help="the nightly history folder")
    actions = parser.add_subparsers(
        dest="history_command", required=True, parser_class=type(parser)
    )
    add = actions.add_parser("add", help="copy a results file into the history folder")
    add.add_argument("result", type=Path, help="a bloomperf results JSON file")
    add.add_argument("--dir", type=Path, default=Path("history"), help="default: ./history")
    add.add_argument("--date", type=parse_date, help="the night (default: the run's started_at)")
    add.set_defaults(func=run_add)
    show = actions.add_parser("changes", help="list the persistent changes in a history folder")
    show.add_argument("--dir", type=Path, default=Path("history"), help="default: ./history")
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
    merge.add_argument("--into", type=Path, required=True, help="the history root to merge into")
    merge.set_defaults(func=run_merge)
    publish = actions.add_parser("publish", help="write the history as a static web site")
    publish.add_argument("history", type=Path, help="a history root or one history folder")
    add_out_argument(publish, "folder to write the site into")
    add_run_option(publish, "baselines")  # read as every reader does: the search order
    add_detection_options(publish)
    publish.set_defaults(func=run_publish)


def run_add(args: argparse.Namespace) -> int:
    path, added = add_to_history(args.result, args.dir, args.date)
    verb = "added as" if added else "already in the history as"
    print(f"bloomperf: {args.result}: {verb} {path}")
    return 0


def run_changes(args: argparse.Namespace) -> int:
    text, _ = history_section(args.dir, args.format, **detection_settings(args))
    print(text, end="")
    return 0


def run_merge(args: argparse.Namespace) -> int:
    for merged in merge_histories(args.sources, args.into):
        names = [p.name for p in merged.added]
        shown = ", ".join(names if len(names) <= 4 else [names[0], "…", names[-1]]) or "nothing new"
        print(
            f"bloomperf: {merged.folder}: {len(merged.added)} night(s) added ({shown}), "
            f"{merged.already} already there"
        )
    return 0


def run_publish(args: argparse.Namespace) -> int:
    site = publish_site(args.history, args.out, args.baselines, **detection_settings(args))
    print(
        f"bloomperf: site written to {site.index}: {len(site.pages)} trend pages, "
        f"{len(site.reports)} report(s)"
    )
    return 0
