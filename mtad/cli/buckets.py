"""`mtad buckets ls`: the shaping buckets of all nodes, and what holds them."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config

_COLUMNS = ["group", "source", "rate", "sessions", "nodes", "in_flight", "tokens", "decreases", "increases",
            "changed_by", "changed_at", "suspended"]  # fmt: skip


def register(commands: common.Commands) -> None:
    buckets = commands.group("buckets", "See the shaping buckets.", title="bucket commands", metavar="COMMAND",
                             required=True)  # fmt: skip
    bls = buckets.add(
        "ls",
        common.Command(ls),
        help="List the buckets (provider group, source address) with their rate and sessions.",
        description="List the shaping buckets: the rate and session cap of all nodes together, "
        "when and by which node feedback last changed them, and what the live nodes are doing with "
        "them (sessions in flight, tokens, decreases and increases since each started). With --json "
        "one object per bucket and line; an unlimited rate is null.",
    )
    bls.add_argument("--json", action="store_true", help="one JSON object per bucket and line")


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    """The shaping buckets: rate and session cap for all nodes (as the last checkpoint
    wrote them, every [delivery] checkpoint_interval), with what the live nodes are
    doing with them; with no node running, the checkpoint alone."""
    from mtad.deliver import shaping
    from mtad.outbound import limits
    from mtad.spool import suspensions

    now = datetime.now(UTC)
    live_since = now - timedelta(seconds=3 * settings.node.heartbeat_interval)
    async with common.spool(settings) as opened:
        rows = await shaping.listing(opened.database, live_since)
        suspended, rerouted = await suspensions.listing(opened.database, now)
    held = {(s.kind, s.key): s for s in suspended}
    routed = {r.provider: r.pool for r in rerouted}
    for row in rows:
        row["group"] = row.pop("route_group")
        why = held.get(("provider", row["group"])) or held.get(("source", row["source"] or ""))
        row["suspended"] = f"{why.kind}: {why.reason}" if why else ("rerouted to " + routed[row["group"]]
                                                                    if row["group"] in routed else None)  # fmt: skip
    if args.json:
        for row in rows:
            print(common.json_line({**row, "rate": None if math.isinf(row["rate"]) else row["rate"]}))
    else:
        for row in rows:
            row["source"] = row["source"] or "(default)"
            row["rate"] = limits.show_rate(row["rate"])
            row["tokens"] = f"{row['tokens']:.1f}"
            row["changed_by"] = row["changed_by"] if row["changed_at"] else "(configured)"
        common.table(rows, _COLUMNS)
    return common.EXIT_OK
