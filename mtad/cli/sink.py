"""`mtad sink`: the development SMTP sink (mtad.sink); it reads no configuration."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtad.base import errors
from mtad.cli import common


def register(commands: common.Commands) -> None:
    about = ("Run a development SMTP sink: accept every message and print a line for it, or defer, bounce and "
             "delay as scripted; a summary on exit (needs no configuration).")  # fmt: skip
    sinking = commands.add("sink", common.Command(run, common.Config.NONE), config=False, help=about,
                           description=about)  # fmt: skip
    sinking.add_argument("--listen", metavar="HOST:PORT", help="default 127.0.0.1:2526")
    sinking.add_argument("--dir", type=Path, help="also store each message there as a .eml file")
    sinking.add_argument("--reply", action="append", metavar="PATTERN=REPLY",
                      help="answer RCPT for recipients matching the glob, e.g. 'bounce*@*=550 5.1.1 No such user' "
                      "(repeatable; the first match counts; others get 250, or --defer and --bounce)")  # fmt: skip
    sinking.add_argument(
        "--defer",
        metavar="PERCENT",
        help="answer this share of the recipients no --reply matches 451 4.3.0 at RCPT (e.g. 5%%)",
    )
    sinking.add_argument(
        "--bounce",
        metavar="PERCENT",
        help="answer this share of the recipients no --reply matches 550 5.1.1 at RCPT (e.g. 1%%)",
    )
    sinking.add_argument(
        "--delay",
        metavar="DURATION[-DURATION]",
        help="wait this long before answering the end of DATA (200ms), or a time drawn from a range (100ms-300ms)",
    )
    sinking.add_argument(
        "--seed",
        type=int,
        help="seed of the draws of --defer, --bounce and a --delay range (default: a random one, printed at start)",
    )
    sinking.add_argument(
        "--tls", action="store_true", help="offer STARTTLS with a self-signed certificate made at start"
    )
    sinking.add_argument("--cert", type=Path, metavar="PEM", help="offer STARTTLS with this certificate (with --key)")
    sinking.add_argument("--key", type=Path, metavar="PEM", help="the private key of --cert")
    sinking.add_argument(
        "--auth",
        nargs="?",
        const="",
        metavar="USER:PASSWORD",
        help="require AUTH (PLAIN or LOGIN; after STARTTLS when TLS is offered) before MAIL: "
        "any login, or only USER:PASSWORD",
    )
    sinking.add_argument("--quiet", "-q", action="store_true", help="print no line per message, only the summary")


def run(args: argparse.Namespace) -> int:
    """Run the development SMTP sink until SIGINT or SIGTERM."""
    from mtad import sink

    try:
        chosen = sink.options(args.listen or sink.DEFAULT_LISTEN, args.reply or [], args.dir, defer=args.defer,
                              bounce=args.bounce, delay=args.delay, tls=args.tls, cert=args.cert, key=args.key,
                              auth=args.auth, seed=args.seed, quiet=args.quiet)  # fmt: skip
    except errors.ConfigError as exc:
        for problem in exc.problems:
            print(f"mtad sink: {problem}", file=sys.stderr)
        return common.EXIT_USAGE
    try:
        sink.run(chosen)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""  # a file; a bind error names its address
        print(f"mtad sink: {exc.strerror or exc}{where}", file=sys.stderr)
        return common.EXIT_FAILED
    return common.EXIT_OK
