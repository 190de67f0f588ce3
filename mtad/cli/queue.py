"""`mtad queue`: the messages and deliveries in the spool, acted on by hand; reroutes and purges."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from mtad.base import errors
from mtad.base.lifecycle import State
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config

_DELIVERY_COLUMNS = ["id", "queue_id", "state", "attempts", "next_attempt", "sender", "recipient", "last_reply"]
# A message's deliveries: why each was not delivered (its last reason and status) too.
_SHOWN_COLUMNS = [*_DELIVERY_COLUMNS[:-1], "reason", "status", "last_reply"]


def register(commands: common.Commands) -> None:
    queue = commands.group("queue", "See the messages and deliveries in the spool.", title="queue commands",
                           metavar="COMMAND", required=True)  # fmt: skip
    qls = queue.add(
        "ls",
        common.Command(ls, names=True),
        help="List deliveries (one per recipient), oldest first.",
        description="List deliveries, oldest first. With --json: one JSON object per delivery and line "
        "(id, queue_id, message_id, sender, recipient, state, attempts, next_attempt_at, last_reply, ...).",
    )
    qls.add_argument("--state", choices=[s.value for s in State], help="only deliveries in this state")
    qls.add_argument("--provider", metavar="GROUP", help="only deliveries routed to this provider group")
    qls.add_argument("--json", action="store_true", help="one JSON object per delivery and line")
    for action, text in (
        ("retry", "Make deliveries due now (they keep their attempt count)."),
        ("cancel", "Cancel deliveries that are waiting: they will not be sent."),
        ("bounce", "Bounce deliveries that are waiting, as a permanent failure."),
    ):
        acting = queue.add(
            action,
            common.Command(act),
            help=text,
            description=f"{text} Deliveries in flight or already final are left as they are and reported.",
        )
        acting.add_argument("id", help="a delivery id (number), or a queue id (UUID) for all of its deliveries")
        acting.set_defaults(action=action)
    _register_reroute(queue)
    qshow = queue.add("show", common.Command(show), help="Show a message with its headers, deliveries and events.")
    qshow.add_argument("id", help="a queue id (UUID) or a delivery id (number)")
    qshow.add_argument("--json", action="store_true", help="one JSON object")
    qpurge = queue.add(
        "purge",
        common.Command(purge, common.Config.WHOLE),
        help="Delete now the messages received before a time whose every delivery is final.",
        description="Delete now, whatever the [retention] windows, the messages received before TIME whose "
        "every delivery is final (with their deliveries) and the events before TIME; messages with a delivery "
        "still waiting or in flight are kept and counted. Works in batches while the daemon runs, then "
        "VACUUMs those tables, so that the empty pages at their ends go back to the file system.",
    )
    qpurge.add_argument("--before", required=True, type=common.before, metavar="TIME",
                        help='an ISO date or time ("2026-11-01", "2026-11-01T12:00+01:00"; UTC unless it says), '
                             'or a duration meaning that long ago ("3d", "12h")')  # fmt: skip
    qpurge.add_argument("--reindex", action="store_true",
                        help="then rebuild the indexes of messages, deliveries and events (without blocking "
                             "writes): retention reuses their emptied pages but never gives them back")  # fmt: skip


def _register_reroute(queue: common.Commands) -> None:
    qroute = queue.add(
        "reroute",
        common.Command(reroute, names=True),
        help="Send a provider group's mail from another source pool for a while.",
        description="A provider group's mail leaves from POOL instead of its own (a route's, a tenant's, a "
        "message's or the default), on every node within seconds, until --for runs out or --back.",
    )
    qroute.add_argument("--provider", required=True, metavar="GROUP", help=common.GROUP_HELP)
    qroute.add_argument("--pool", metavar="POOL", help="the [pools] table its mail leaves from meanwhile")
    qroute.add_argument("--for", dest="for_", type=common.duration, metavar="DURATION",
                        help='e.g. "2h" (default: until --back)')  # fmt: skip
    qroute.add_argument("--reason", default="rerouted by an operator", help="said in suspensions ls")
    qroute.add_argument("--back", action="store_true", help="end the reroute now")


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.spool import queue

    async with common.spool(settings) as opened:
        if args.provider is not None:
            await names.group(opened.database, args.provider, common.configured(settings))
        rows = queue.deliveries(opened.database, state=args.state, group=args.provider)
        if args.json:
            async for row in rows:
                print(common.json_line(views.delivery(row)))
        else:
            common.table([_delivery_text(r) async for r in rows], _DELIVERY_COLUMNS)
    return common.EXIT_OK


async def act(args: argparse.Namespace, settings: config.Basics) -> int:
    """retry, cancel or bounce: a delivery (by id) or every delivery of a message (by queue id)."""
    from mtad.spool import leases

    async with common.spool(settings) as opened:
        changed, untouched = await leases.act(opened.database, args.action, args.id, datetime.now(UTC))
    done = {"retry": "queued for now", "cancel": "cancelled", "bounce": "bounced"}[args.action]
    for delivery in changed:
        print(f"delivery {delivery}: {done}")
    for row in untouched:
        why = {"leased": "in flight, try again shortly", "unknown": "its send may have gone out: retry or cancel it"}
        print(f"delivery {row['id']}: unchanged ({why.get(row['state'], 'already ' + row['state'])})", file=sys.stderr)
    return common.EXIT_OK if changed else common.EXIT_FAILED


async def reroute(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import suspensions

    now = datetime.now(UTC)
    if not args.back and args.pool is None:
        raise errors.UsageError("give --pool POOL (or --back to end a reroute)")
    async with common.spool(settings) as opened:
        if args.back:
            await names.rerouted(opened.database, args.provider, now)
        else:
            await names.group(opened.database, args.provider, common.configured(settings))
            names.pool(args.pool, common.configured(settings))
        if args.back:
            ended = await suspensions.unroute(opened.database, args.provider)
            if ended is None:
                raise errors.Conflict(f"provider group {args.provider} is not rerouted")
            acks = await common.held(opened.database, settings)
            print(f"provider group {args.provider} leaves from its own pool again")
            common.told(acks)
            return common.EXIT_OK
        until = now + timedelta(seconds=args.for_) if args.for_ is not None else None
        done = await suspensions.reroute(opened.database, args.provider, args.pool, args.reason, until, now)
        acks = await common.held(opened.database, settings)
    ends = f"until {done.until:%Y-%m-%d %H:%M:%S} UTC" if done.until else "until --back"
    print(f"provider group {done.provider} leaves from pool {done.pool} {ends}")
    common.told(acks)
    return common.EXIT_OK


async def show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import views
    from mtad.spool import queue

    async with common.spool(settings) as opened:
        view = await queue.show(opened.database, args.id)
    message = {k: v for k, v in view.message.items() if k != "head"}
    head = bytes(view.message["head"])
    header_block = head.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace")
    if args.json:
        print(common.json_line(views.message(view)))
        return common.EXIT_OK
    for key, value in message.items():
        print(f"{'queue_id' if key == 'id' else key:>16}: {common.text(value)}")
    print("\nheaders:")
    for line in header_block.splitlines():
        print(f"  {line}")
    print("\ndeliveries:")
    common.table([_delivery_text(d) for d in view.deliveries], _SHOWN_COLUMNS, indent="  ")
    print("\nevents:")
    for event in view.events:
        print(f"  {common.text(event['at'])}  {event['kind']:<10} delivery={common.text(event['delivery'])}  "
              f"{event['data']}")  # fmt: skip
    return common.EXIT_OK


async def purge(args: argparse.Namespace, settings: config.Settings) -> int:
    """Delete now what was received before --before and is done with (every delivery final),
    and the events before it, whatever the [retention] windows; say what went and what stayed."""
    from mtad.spool import retention

    history = settings.delivery.relay.breaker.window
    async with common.spool(settings) as opened:
        pruned = await retention.purge(opened.database, args.before, account_history=history,
                                       batch=settings.retention.batch,
                                       soft_window=settings.suppression.soft_window)  # fmt: skip
        print(f"purged before {args.before.isoformat()}: {pruned.messages} messages with {pruned.deliveries} "
              f"deliveries, {pruned.events} events")  # fmt: skip
        if pruned.kept:
            print(f"kept {pruned.kept} messages received before then: a delivery is not final yet")
        before, after = await retention.compact(opened.database, reindex=args.reindex)
    print(f"database size: {before / 2**20:,.1f} MiB before the VACUUM{' and REINDEX' if args.reindex else ''}, "
          f"{after / 2**20:,.1f} MiB after")  # fmt: skip
    return common.EXIT_OK


def _next_attempt(row: dict[str, Any]) -> str:
    """When a delivery goes: a time; held (due at infinity) until a resume, or, one whose
    relayed send may have gone out (unknown), until `queue retry`; such a one looked for
    in its Sent folder goes at its time unless found there."""
    if row["next_attempt_at"].year == 9999:
        return "on retry" if row["state"] == "unknown" else "on resume"
    at = str(row["next_attempt_at"].strftime("%Y-%m-%d %H:%M:%S"))
    return f"{at} unless found sent" if row["state"] == "unknown" else at


def _delivery_text(row: dict[str, Any]) -> dict[str, Any]:
    reply = ""
    if row["last_code"] is not None:
        reply = f"{row['last_code']} {row['last_enhanced'] or ''} {row['last_text'] or ''}".strip()
    return {
        "id": row["id"],
        "queue_id": str(row["message"]),
        "state": row["state"],
        "attempts": row["attempts"],
        "next_attempt": _next_attempt(row),
        "sender": row["sender"] or "<>",  # the null reverse-path
        "recipient": row["recipient"],
        "reason": row.get("last_reason"),
        "status": row["last_enhanced"],
        "last_reply": reply[:60],
    }
