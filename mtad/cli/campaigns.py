"""`mtad campaigns`: a tenant's campaigns, their progress, paused, resumed, cancelled."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config, db
    from mtad.spool import campaigns

_REASONS = {"pause": "paused by an operator", "cancel": "cancelled by an operator"}
_LISTED = ["tenant", "name", "state", "messages", "deliveries", "queued", "deferred", "delivered", "bounced",
           "failed", "cancelled", "suppressed", "per_minute", "ends_at"]  # fmt: skip


def register(commands: common.Commands) -> None:
    campaigns = commands.group("campaigns", "A tenant's campaigns: progress, pause, resume, cancel.",
                               title="campaign commands", metavar="COMMAND", required=True)  # fmt: skip
    for name, handler, text in (
        ("add", add, "Make a campaign (mail that names one not made yet makes it too)."),
        ("limit", limit, "Set a campaign's limits of sends begun per hour and per day (UTC), on every node; "
                         "what would go over waits for the next hour or day. One not given: no limit."),
        ("show", show, "A campaign's progress: its deliveries by state, what came back, the rate of the last "
                       "10 minutes and when it should end."),
        ("pause", pause, "Pause a campaign: its mail waits on every node before this returns (mail on the wire "
                         "finishes); nothing is failed."),
        ("resume", resume, "Resume a paused campaign: its mail is due at once."),
        ("cancel", cancel, "Cancel what a campaign has not sent yet; new mail naming it is cancelled too."),
    ):  # fmt: skip
        sub = campaigns.add(name, common.Command(handler), help=text, description=text)
        sub.add_argument("name", type=_campaign_name)
        sub.add_argument("--tenant", metavar="NAME", help="its tenant (default: [submission] default_tenant)")
        if name == "show":
            sub.add_argument("--json", action="store_true", help="one JSON object")
        if name in ("add", "limit"):
            sub.add_argument("--max-per-hour", type=_limit, metavar="N", help="sends begun per hour (default: none)")
            sub.add_argument("--max-per-day", type=_limit, metavar="N", help="sends begun per day (default: none)")
        if name in ("pause", "cancel"):
            sub.add_argument("--reason", default=_REASONS[name], help="said in campaigns show")
    listing = campaigns.add("ls", common.Command(ls), help="The campaigns and their progress.")
    listing.add_argument("--tenant", metavar="NAME", help="only this tenant's")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")


def _campaign_name(text: str) -> str:
    from mtad.spool import campaigns

    try:
        return campaigns.check_name(text)
    except errors.MtadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit(text: str) -> int:
    if not text.isdigit() or int(text) == 0 or int(text) > 2**31 - 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number above 0")
    return int(text)


def _limits(args: argparse.Namespace) -> campaigns.Limits:
    from mtad.spool import campaigns

    return campaigns.Limits(args.max_per_hour, args.max_per_day)


async def _tenant(args: argparse.Namespace, settings: config.Basics, database: db.Database) -> str:
    """The tenant given (checked to exist), else the default one."""
    from mtad.admin import names

    if args.tenant is None:
        return settings.default_tenant
    return await names.tenant(database, args.tenant, settings.default_tenant)


async def add(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        await campaigns.add(opened.database, tenant, args.name, datetime.now(UTC), _limits(args))
    print(f"campaign {args.name} of tenant {tenant} added")
    return common.EXIT_OK


async def limit(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        await campaigns.limit(opened.database, tenant, args.name, _limits(args), datetime.now(UTC))
    print(f"campaign {args.name}: max_per_hour {args.max_per_hour or 'none'}, "
          f"max_per_day {args.max_per_day or 'none'}")  # fmt: skip
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    now = datetime.now(UTC)
    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database) if args.tenant else None
        found = await campaigns.listing(opened.database, now, tenant)
    common.print_rows([c.view(now) for c in found], args.json, _LISTED)
    return common.EXIT_OK


async def show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    now = datetime.now(UTC)
    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        shown = (await campaigns.get(opened.database, tenant, args.name, now)).view(now)
    if args.json:
        print(common.json_line(shown))
        return common.EXIT_OK
    state = shown["state"] + (f": {shown['reason']}" if shown["reason"] else "")
    done = shown["deliveries"] - sum(shown[s] for s in campaigns.WAITING)
    ends = "done" if shown["done"] else common.text(shown["ends_at"]) if shown["ends_at"] else "not sending now"
    print(f"campaign    {shown['name']} (tenant {shown['tenant']}), since {shown['created_at']:%Y-%m-%d %H:%M:%S}")
    print(f"state       {state}")
    print(f"limits      max_per_hour {shown['max_per_hour'] or 'none'}, max_per_day {shown['max_per_day'] or 'none'}")
    print(f"progress    {done} of {shown['deliveries']} deliveries settled, {shown['messages']} messages")
    print(f"rate        {shown['per_minute']}/min over the last {int(campaigns.RATE_WINDOW.total_seconds() // 60)} "
          f"minutes; ends {ends}")  # fmt: skip
    rows = [{"count": s, "n": shown[s]} for s in (*campaigns.WAITING, "delivered", "bounced", "failed", "cancelled",
                                                   "suppressed", *campaigns.CAME_BACK)]  # fmt: skip
    rows += [{"count": f"bounced: {reason}", "n": n} for reason, n in sorted(shown["bounced_by_reason"].items())]
    common.table(rows, ["count", "n"])
    return common.EXIT_OK


async def pause(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        held = await campaigns.pause(opened.database, tenant, args.name, args.reason, datetime.now(UTC))
        acks = await common.held(opened.database, settings)
    print(f"campaign {args.name} paused; {held} deliveries wait")
    common.told(acks)
    return common.EXIT_OK


async def resume(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        released = await campaigns.resume(opened.database, tenant, args.name, datetime.now(UTC))
        acks = await common.held(opened.database, settings)
    print(f"campaign {args.name} resumed; {released} deliveries due now")
    common.told(acks)
    return common.EXIT_OK


async def cancel(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import campaigns

    async with common.spool(settings) as opened:
        tenant = await _tenant(args, settings, opened.database)
        cancelled, already = await campaigns.cancel(opened.database, tenant, args.name, args.reason,
                                                    datetime.now(UTC))  # fmt: skip
        acks = await common.held(opened.database, settings)
    print(f"campaign {args.name} {'was cancelled already' if already else 'cancelled'}; "
          f"{cancelled} deliveries cancelled")  # fmt: skip
    common.told(acks)
    return common.EXIT_OK
