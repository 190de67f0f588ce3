"""`mtad events`: the event log, read as it grows."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    events = commands.group("events", "Read the event log.", title="events commands", metavar="COMMAND",
                            required=True)  # fmt: skip
    etail = events.add(
        "tail", common.Command(tail), help="Print the last events, then (with --follow) each new one.",
        description="Print the last events (or every event since a time), oldest first; with --follow, then each "
        "new event as it is written, until interrupted. With --json: one JSON object per line (id, at, kind, "
        "tenant, message, delivery, data).",
    )  # fmt: skip
    etail.add_argument("--kind", choices=common.EVENT_KINDS, help="only events of this kind")
    etail.add_argument("--tenant", help="only events of this tenant")
    since_help = 'every event since then: an ISO date or time, or a duration meaning that long ago ("1h")'
    etail.add_argument("--since", type=common.before, metavar="TIME", help=since_help)
    etail.add_argument("-n", "--lines", type=int, default=10, help="how many of the last events (default 10)")
    etail.add_argument("--follow", "-f", action="store_true", help="then print each new event as it is written")
    etail.add_argument("--json", action="store_true", help="one JSON object per event and line")


async def tail(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import tail as event_log

    where = event_log.Filter(args.kind, args.tenant)
    shown: set[int] = set()
    async with common.spool(settings) as opened:
        if args.tenant is not None:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        start = await event_log.horizon(opened.database)
        async for event in event_log.listing(opened.database, where, args.since, args.lines):
            _print_event(event, args.json)
            if event.xid is not None and event.xid >= start:
                shown.add(event.id)  # following starts at `start`: not twice
        if args.follow:  # until interrupted
            async for event in event_log.follow(opened.database, where, start, shown):
                _print_event(event, args.json)
    return common.EXIT_OK


def _print_event(event: Any, as_json: bool) -> None:
    if as_json:
        fields = {"id": event.id, "at": event.at, "kind": event.kind, "tenant": event.tenant,
                  "message": event.message, "delivery": event.delivery, "data": event.data}  # fmt: skip
        print(common.json_line(fields), flush=True)
    else:
        where = " ".join(f"{k}={common.text(v)}" for k, v in (("tenant", event.tenant), ("message", event.message),
                                                               ("delivery", event.delivery)) if v)  # fmt: skip
        print(f"{event.at.isoformat()} {event.kind} {where} {common.json_line(event.data)}".replace("  ", " "),
              flush=True)  # fmt: skip
