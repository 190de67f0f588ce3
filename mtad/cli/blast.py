"""`mtad blast`: the traffic generator (mtad.blast); it reads no configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

from mtad.base import errors
from mtad.cli import common


def register(commands: common.Commands) -> None:
    about = ("Send N messages over M connections to an SMTP server, at a rate or as fast as it answers; print "
             "the rate and latency percentiles as it goes and at the end (needs no configuration).")  # fmt: skip
    blasting = commands.add("blast", common.Command(run, common.Config.NONE), config=False, help=about,
                            description=about)  # fmt: skip
    blasting.add_argument("target", metavar="HOST:PORT", help="the SMTP server, e.g. 127.0.0.1:2525")
    blasting.add_argument("--messages", "-n", type=int, default=1000, metavar="N", help="default 1000")
    blasting.add_argument("--connections", "-c", type=int, default=1, metavar="M",
                          help="connections at once, each sending until none is left (default 1)")  # fmt: skip
    blasting.add_argument("--rate", metavar="R/s", help="target rate, e.g. 500/s or 3000/min (default: as fast as "
                          "the server answers)")  # fmt: skip
    blasting.add_argument("--size", default="1KiB", metavar="SIZE[-SIZE]",
                          help="each message's size, 10KiB, or a range to draw from, 1KiB-100KiB")  # fmt: skip
    blasting.add_argument("--recipients", "-r", type=int, default=1, metavar="K", help="per message (default 1)")
    blasting.add_argument("--domains", metavar="A,B", help="the recipients' domains, taken in turn (default sink.test)")
    blasting.add_argument("--from", dest="sender", default="blast@example.org", metavar="ADDRESS",
                          help="the envelope sender (default blast@example.org)")  # fmt: skip
    blasting.add_argument("--starttls", action="store_true", help="STARTTLS before sending (refused if not offered)")
    blasting.add_argument("--insecure", action="store_true", help="with --starttls: do not check the certificate")
    blasting.add_argument("--user", help="AUTH PLAIN (or LOGIN) as this user, with --password-file")
    blasting.add_argument("--password-file", type=Path, metavar="FILE", help="the password of --user: its first line")
    blasting.add_argument("--timeout", default="60s", metavar="DURATION", help="for each reply (default 60s)")
    blasting.add_argument("--seed", type=int, default=0, help="seed of the sizes drawn from a range (default 0)")
    blasting.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    blasting.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    """Blast; exit 0 when every message was accepted for every recipient, 1 otherwise."""
    import sys

    from mtad import blast

    if (args.user is None) != (args.password_file is None):
        raise errors.UsageError("--user and --password-file go together")
    login = None
    if args.user is not None:
        try:
            password = args.password_file.read_text().splitlines()[0] if args.password_file.stat().st_size else ""
        except OSError as exc:
            raise errors.UsageError(f"--password-file: {exc.strerror or exc} ({args.password_file})") from None
        login = (args.user, password)
    chosen = blast.options(args.target, messages=args.messages, connections=args.connections, rate=args.rate,
                           size=args.size, recipients=args.recipients, domains=args.domains, sender=args.sender,
                           starttls=args.starttls, insecure=args.insecure, login=login, timeout=args.timeout,
                           seed=args.seed)  # fmt: skip
    clean = blast.run(chosen, as_json=args.json, progress=None if args.quiet else sys.stderr)
    return common.EXIT_OK if clean else common.EXIT_FAILED
