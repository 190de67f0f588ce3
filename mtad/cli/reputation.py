"""`mtad reputation`: the sliding windows of outcomes by tenant, provider group and source."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    reputation = commands.group(
        "reputation", "The sliding windows of outcomes by tenant, provider group and source.",
        title="reputation commands", metavar="COMMAND", required=True,
    )  # fmt: skip
    rls = reputation.add("ls", common.Command(ls), help="Every window with outcomes in the last 24 hours.")
    rls.add_argument("--scope", choices=["tenant", "provider", "source"], help="only this scope")
    rls.add_argument("--json", action="store_true", help="one JSON object per line")


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import reputation

    async with common.spool(settings) as opened:
        found = await reputation.windows(opened.database, args.scope)
    if args.json:
        for row in found:
            print(common.json_line(row))
        return common.EXIT_OK
    rows = [{"scope": r["scope"], "key": r["key"], "window": w, **r[w]} for r in found for w in reputation.WINDOWS]
    common.table(rows, ["scope", "key", "window", *reputation.OUTCOMES])
    return common.EXIT_OK
