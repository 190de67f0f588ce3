"""`mtad sendmail`: the sendmail command line (mtad.sendmail). Its options are
sendmail's, which argparse cannot read (-oi, -FName): main() hands it the arguments
as they are, and the parser here only lists it in `mtad --help`."""

from __future__ import annotations

import argparse
import sys

from mtad.cli import common

ABOUT = ("Hand a message on standard input to this node's submission port, as sendmail does "
         "(-t, -i, -f, -F; also installed as mtad-sendmail).")  # fmt: skip


def register(commands: common.Commands) -> None:
    sending = commands.add("sendmail", common.Command(run, common.Config.NONE), config=False, help=ABOUT,
                           description=ABOUT)  # fmt: skip
    sending.add_argument("arguments", nargs=argparse.REMAINDER, help="sendmail's options and the recipients")


def arguments(argv: list[str]) -> list[str] | None:
    """sendmail's arguments when the command line is `mtad [--config PATH] sendmail ...`
    (the --config handed on), else None (--help included: argparse's)."""
    if "--help" in argv or "-h" in argv[:2]:
        return None
    if argv[:1] == ["sendmail"]:
        return argv[1:]
    if len(argv) >= 3 and argv[0] == "--config" and argv[2] == "sendmail":
        return ["--config", argv[1], *argv[3:]]
    if len(argv) >= 2 and argv[0].startswith("--config=") and argv[1] == "sendmail":
        return [argv[0], *argv[2:]]
    return None


def run(args: argparse.Namespace) -> int:
    return handed(args.arguments)


def handed(argv: list[str]) -> int:
    """Run sendmail with its own arguments."""
    from mtad import sendmail

    return sendmail.main(argv, sys.stdin.buffer, program="mtad sendmail")
