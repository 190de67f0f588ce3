"""`mtad bounces explain`: how mtad reads what comes back, and the delivery it is about."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config
    from mtad.feedback import explain as explaining
    from mtad.feedback import reports


def register(commands: common.Commands) -> None:
    bounces = commands.group("bounces", "See how mtad reads what comes back.", title="bounces commands",
                             metavar="COMMAND", required=True)  # fmt: skip
    bexplain = bounces.add(
        "explain", common.Command(explain, common.Config.OPTIONAL, sync=True),
        help="Print how mtad reads a message: a bounce and what it does with each "
        "recipient, complaints, a reply. With --config: by the configured reply table, and the delivery it "
        "matches in the spool.")  # fmt: skip
    bexplain.add_argument("file", metavar="FILE", help="the message as received (- for stdin)")
    bexplain.add_argument("--to", metavar="ADDRESS", help="the address the message was sent to (a VERP bounce "
                          "address names its delivery; with --config)")  # fmt: skip
    bexplain.add_argument("--json", action="store_true", help="one JSON object")


def explain(args: argparse.Namespace, settings: config.Settings | None) -> int:
    """Print how mtad reads a message: by the configured reply table and with the
    delivery it matches in the spool when a configuration is given."""
    from mtad.feedback import explain as explaining
    from mtad.feedback import reports

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        print(f"mtad: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return common.EXIT_FAILED
    report = reports.parse(raw, settings.delivery.rules if settings is not None else None)
    found = None
    if settings is not None:
        import asyncio

        from mtad.base import log

        log.configure("console", "warning", stream=sys.stderr)
        found = asyncio.run(_matches(settings, report, args.to))
    shown = explaining.view(report, found)
    print(common.json_line(shown) if args.json else "\n".join(explaining.lines(shown)))
    return common.EXIT_OK


async def _matches(settings: config.Settings, report: reports.Report, to: str | None) -> list[explaining.Match]:
    """The deliveries in the spool `report` is about (explain.matches)."""
    from mtad.feedback import explain as explaining
    from mtad.feedback import verp

    named = None
    bounces = settings.bounces
    if bounces.domain is not None and bounces.key_file is not None:
        try:  # no key yet: no VERP address was ever sent
            named = verp.Verp(bounces.domain, bounces.key_file.read_bytes().strip())
        except (OSError, ValueError):
            named = None
    async with common.spool(settings) as opened:
        return await explaining.matches(opened.database, report, verp=named, to=to)
