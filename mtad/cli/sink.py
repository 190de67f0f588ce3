"""`mtad sink`: the development SMTP sink (mtad.sink); it reads no configuration."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtad.base import errors
from mtad.cli import common


def register(commands: common.Commands) -> None:
    about = "Run a development SMTP sink: accept every message and print a line for it (needs no configuration)."
    sinking = commands.add("sink", common.Command(run, common.Config.NONE), config=False, help=about,
                           description=about)  # fmt: skip
    sinking.add_argument("--listen", metavar="HOST:PORT", help="default 127.0.0.1:2526")
    sinking.add_argument("--dir", type=Path, help="also store each message there as a .eml file")
    sinking.add_argument("--reply", action="append", metavar="PATTERN=REPLY",
                      help="answer RCPT for recipients matching the glob, e.g. 'bounce*@*=550 5.1.1 No such user' "
                      "(repeatable; the first match counts; others get 250)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run the development SMTP sink until SIGINT or SIGTERM."""
    from mtad import sink

    try:
        chosen = sink.options(args.listen or sink.DEFAULT_LISTEN, args.reply or [], args.dir)
    except errors.ConfigError as exc:
        for problem in exc.problems:
            print(f"mtad sink: {problem}", file=sys.stderr)
        return common.EXIT_USAGE
    try:
        sink.run(chosen)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""  # the directory; a bind error names its address
        print(f"mtad sink: {exc.strerror or exc}{where}", file=sys.stderr)
        return common.EXIT_FAILED
    return common.EXIT_OK
