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
    from mtad import config, db
    from mtad.spool import queue as queue_

LIMIT = 1000  # deliveries `queue ls` lists unless told
# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to mtad.spool's).
BY_CHOICES = ("provider", "state", "domain", "tenant", "source", "pool")  # queue.BY
ACTION_STATES = {  # actions.ACTIONS: the states each moves deliveries from
    "retry": ("queued", "deferred", "unknown"),
    "cancel": ("queued", "deferred", "unknown", "held"),
    "bounce": ("queued", "deferred", "held"),
    "hold": ("queued", "leased", "deferred"),
    "release": ("held",),
}
ACTION_HELP = {
    "retry": "Make deliveries due now (they keep their attempt count).",
    "cancel": "Cancel deliveries that are waiting: they will not be sent.",
    "bounce": "Bounce deliveries that are waiting, as a permanent failure.",
    "hold": "Hold deliveries: none is attempted until released (a leased one not yet being sent too).",
    "release": "Release held deliveries: due now.",
}
BUCKETS = ("5m", "10m", "20m", "40m", "80m", "160m", "320m", "640m", "1280m", "1280m+")  # queue.BUCKETS
ACTION_DONE = {"retry": "queued for now", "cancel": "cancelled", "bounce": "bounced", "hold": "held",
               "release": "released"}  # fmt: skip
_DELIVERY_COLUMNS = ["id", "queue_id", "state", "attempts", "next_attempt", "sender", "recipient", "last_reply"]
# A message's deliveries: why each was not delivered (its last reason and status) too.
_SHOWN_COLUMNS = [*_DELIVERY_COLUMNS[:-1], "reason", "status", "last_reply"]


def register(commands: common.Commands) -> None:
    queue = commands.group("queue", "See the messages and deliveries in the spool.", title="queue commands",
                           metavar="COMMAND", required=True)  # fmt: skip
    qls = queue.add(
        "ls",
        common.Command(ls, names=True),
        help="List the deliveries still to be done (one per recipient), oldest first.",
        description="List deliveries, oldest first: those still to be done (every state but delivered, bounced, "
        "failed, cancelled) unless --all or --state, then a line of totals. With --json: one JSON object per "
        "delivery and line (id, queue_id, message_id, sender, recipient, state, attempts, next_attempt_at, "
        "last_reply, ...), no totals.",
    )
    which = qls.add_mutually_exclusive_group()
    which.add_argument("--state", choices=[s.value for s in State], help="only deliveries in this state")
    which.add_argument("--all", action="store_true", help="deliveries in every state, final ones too")
    _filters(qls)
    qls.add_argument("--limit", type=_count, default=LIMIT, metavar="N",
                     help=f"list at most N (default {LIMIT}; 0: all); the totals count every one")  # fmt: skip
    qls.add_argument("--json", action="store_true", help="one JSON object per delivery and line")
    qsum = queue.add(
        "summary",
        common.Command(summary, names=True),
        help="Count the deliveries still to be done by provider group (or --by) and age, as qshape does.",
        description="Count the deliveries still to be done (or in --state) by provider group, domain, tenant, "
        "source address or source pool, each line with its deliveries by age since accepted (qshape's buckets: "
        "under 5 minutes, 5 to 10, ... 1280 minutes and more), the oldest, and the next due. A provider group is "
        "that of the delivery's last attempt, a source the address its last attempt left from: '-' for one never "
        "attempted (--by domain always holds).",
    )
    qsum.add_argument("--by", choices=BY_CHOICES, default="provider", help="what a line counts (default: provider)")
    qsum.add_argument("--state", choices=[s.value for s in State], help="only deliveries in this state")
    _filters(qsum)
    qsum.add_argument("--json", action="store_true", help="one JSON object per line, the total first")
    for action, text in ACTION_HELP.items():
        acting = queue.add(
            action,
            common.Command(act, names=True),
            help=text,
            description=f"{text} Give a delivery id or a queue id, or filters (or --all): then it prints how many "
            "it would touch and acts only with --yes, in batches of 1,000 deliveries, each its own short "
            f"transaction. It acts on deliveries {', '.join(ACTION_STATES[action])}; others are left as they "
            "are and counted.",
        )
        acting.add_argument("id", nargs="?", help="a delivery id (number), or a queue id (UUID) for all of its "
                            "deliveries")  # fmt: skip
        acting.add_argument("--state", choices=ACTION_STATES[action], help="only deliveries in this state")
        _filters(acting)
        acting.add_argument("--all", action="store_true", help="every delivery it acts on, no filter")
        sure = acting.add_mutually_exclusive_group()
        sure.add_argument("--yes", action="store_true", help="act on what the filters match")
        sure.add_argument("--dry-run", action="store_true", help="only say how many it would act on")
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


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", metavar="NAME", help="only the deliveries of this tenant")
    parser.add_argument("--provider", metavar="GROUP", help="only deliveries whose last attempt went to this "
                        "provider group ('-': never attempted)")  # fmt: skip
    parser.add_argument("--domain", metavar="DOMAIN", help="only deliveries to this recipient domain")
    parser.add_argument("--older-than", type=_age, metavar="AGE", help='only deliveries accepted at least AGE ago '
                        '("30m", "2h", "3d")')  # fmt: skip


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


async def _given(args: argparse.Namespace, settings: config.Basics, database: db.Database, *,
                 every: bool) -> queue_.Filters:  # fmt: skip
    from mtad.admin import filters

    return await filters.build(
        database, now=datetime.now(UTC), configured=lambda: common.configured(settings),
        default_tenant=settings.default_tenant, state=args.state, every=every, tenant=args.tenant,
        provider=args.provider, domain=args.domain, older_than=args.older_than,
    )  # fmt: skip


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import views
    from mtad.spool import queue

    limit = args.limit or None
    async with common.spool(settings) as opened:
        given = await _given(args, settings, opened.database, every=args.all)
        rows = queue.deliveries(opened.database, given, limit=limit)
        if args.json:
            async for row in rows:
                print(common.json_line(views.delivery(row)))
            return common.EXIT_OK
        listed = [_delivery_text(r) async for r in rows]
        found = await queue.totals(opened.database, given)
    common.table(listed, _DELIVERY_COLUMNS)
    shown = f" ({len(listed):,} shown: --limit)" if len(listed) < found.total else ""
    print(f"TOTAL {found.said()}{shown}")
    return common.EXIT_OK


async def summary(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import queue

    now = datetime.now(UTC)
    async with common.spool(settings) as opened:
        given = await _given(args, settings, opened.database, every=False)
        shapes = await queue.summary(opened.database, given, args.by, now)
    total = queue.overall(shapes)
    lines = [total, *shapes] if total is not None else []
    if args.json:
        for shape in lines:
            print(common.json_line(_shape_json(shape, args.by)))
        return common.EXIT_OK
    columns = [args.by, "total", *queue.BUCKETS, "oldest", "next_due"]
    common.table([_shape_text(shape, args.by, now) for shape in lines], columns)
    return common.EXIT_OK


def _shape_json(shape: queue_.Shape, by: str) -> dict[str, Any]:
    return {by: shape.key, "total": shape.total, "ages": dict(zip(BUCKETS, shape.buckets, strict=True)),
            "oldest": shape.oldest, "next_due": _due(shape.next_due)}  # fmt: skip


def _shape_text(shape: queue_.Shape, by: str, now: datetime) -> dict[str, Any]:
    due = _due(shape.next_due)
    return {by: shape.key, "total": shape.total, **dict(zip(BUCKETS, shape.buckets, strict=True)),
            "oldest": f"{_age_text(now - shape.oldest)} ago",
            "next_due": "-" if due is None else "now" if due <= now else f"in {_age_text(due - now)}"}  # fmt: skip


def _due(at: datetime | None) -> datetime | None:
    return None if at is None or at.year == 9999 else at  # infinity: until a resume


def _age_text(span: timedelta) -> str:
    seconds = max(0, int(span.total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


async def act(args: argparse.Namespace, settings: config.Basics) -> int:
    """retry, cancel, bounce, hold or release: a delivery (by id), every delivery of a
    message (by queue id), or every one the filters match."""
    filtered = any(getattr(args, k) is not None for k in ("tenant", "provider", "domain", "older_than", "state"))
    if args.id is not None:
        if filtered or args.all:
            raise errors.UsageError("give a delivery or queue id, or filters: not both")
        return await _act_on(args, settings)
    if not filtered and not args.all:
        raise errors.UsageError("give a delivery or queue id, filters (--tenant, --provider, --domain, --state, "
                                "--older-than), or --all")  # fmt: skip
    from mtad.spool import actions

    async with common.spool(settings) as opened:
        given = await _given(args, settings, opened.database, every=False)
        if not args.yes:
            would = await actions.preview(opened.database, args.action, given)
            print(f"would {args.action} {_counted(would.would)}")
            if would.left:
                print(f"left as they are: {_counted(would.left)}")
            if would.sending:
                print(f"left as they are: {would.sending:,} leased, being sent now")
            if args.dry_run:
                return common.EXIT_OK
            raise errors.UsageError(f"add --yes to {args.action} them (or --dry-run to only count them)")
        done = await actions.act(opened.database, args.action, given, datetime.now(UTC))
    print(f"{ACTION_DONE[args.action]} {_counted(done.was)}")
    return common.EXIT_OK


def _counted(by_state: dict[str, int]) -> str:
    """`1,200 deliveries (1,000 queued, 200 deferred)`."""
    total = sum(by_state.values())
    parts = ", ".join(f"{n:,} {state}" for state, n in by_state.items() if n)
    return f"{total:,} deliver{'y' if total == 1 else 'ies'}" + (f" ({parts})" if parts else "")


async def _act_on(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import actions

    async with common.spool(settings) as opened:
        changed, untouched = await actions.act_on(opened.database, args.action, args.id, datetime.now(UTC))
    done = actions.ACTIONS[args.action].done
    for delivery in changed:
        print(f"delivery {delivery}: {done}")
    why = {"leased": "in flight, try again shortly", "unknown": "its send may have gone out: retry or cancel it",
           "held": "held: release it", "queued": f"not {done}", "deferred": f"not {done}"}  # fmt: skip
    if args.action == "hold":
        why["leased"] = "being sent now"
    for row in untouched:
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


def _count(text: str) -> int:
    """--limit: a whole number, 0 for all."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number (0: all)")
    return int(text)


def _age(text: str) -> str:
    """--older-than: a positive duration ("2h"), checked, as given."""
    common.duration(text)
    return text
