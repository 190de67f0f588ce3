"""`mtad tenants`: the tenants that may submit mail, paused, on probation, and their reputation."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    tenants = commands.group("tenants", "Manage the tenants that may submit mail.", title="tenant commands",
                             metavar="COMMAND", required=True)  # fmt: skip
    tadd = tenants.add(
        "add",
        common.Command(add),
        help="Add a tenant; its password is read from standard input.",
        description="Add a tenant that authenticates with AUTH PLAIN or LOGIN. "
        "The password is the first line of standard input, e.g. `echo secret | mtad tenants add shop`.",
    )
    tadd.add_argument("name", help="tenant name: letters, digits, '.', '_', '-'")
    tadd.add_argument("--replace", action="store_true", help="set a new password if the tenant exists")
    tadd.add_argument("--probation", action=argparse.BooleanOptionalAction, default=None,
                      help="put the new tenant on probation (default: [tenants] probation_default)")  # fmt: skip
    tls = tenants.add("ls", common.Command(ls), help="List the tenants.")
    tls.add_argument("--json", action="store_true", help="one JSON object per line")
    tshow = tenants.add(
        "show", common.Command(show), help="A tenant's state, probation, quotas and reputation windows (1h, 24h)."
    )
    tshow.add_argument("name", type=_tenant_name)
    tshow.add_argument("--json", action="store_true", help="one JSON object")
    tpause = tenants.add(
        "pause",
        common.Command(pause),
        help="Pause a tenant: its queued mail waits (nothing is failed), new mail gets 451 4.7.1.",
    )
    tpause.add_argument("name", type=_tenant_name)
    tpause.add_argument("--reason", default="paused by an operator", help="said in the 451 reply and the event")
    tresume = tenants.add(
        "resume", common.Command(resume), help="Resume a paused tenant: its mail is due again at once."
    )
    tresume.add_argument("name", type=_tenant_name)
    tprob = tenants.add(
        "probation",
        common.Command(probation),
        help="Put a tenant on probation (its mail leaves from [delivery] probation_pool) or take it off.",
    )
    tprob.add_argument("name", type=_tenant_name)
    tprob.add_argument("state", choices=["on", "off"])


def _tenant_name(text: str) -> str:
    from mtad.spool import tenants

    try:
        return tenants.check_name(text)
    except errors.MtadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def add(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import tenants

    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise errors.UsageError("give the password on standard input (one line)")
    probation = settings.tenants.probation_default if args.probation is None else args.probation
    async with common.spool(settings) as opened:
        await tenants.add(opened.database, args.name, password, replace=args.replace)
        if probation and not args.replace:
            await tenants.set_probation(opened.database, args.name, True, datetime.now(UTC))
    print(f"tenant {args.name} {'updated' if args.replace else 'added'}" + (", on probation" if probation else ""))
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import tenants

    async with common.spool(settings) as opened:
        rows = await tenants.list_all(opened.database)
    common.print_rows(rows, args.json, ["name", "state", "has_password", "paused", "probation", "created_at"])
    return common.EXIT_OK


async def show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.feedback import reputation

    quota, guard = settings.tenants.of(args.name)
    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        shown = await views.tenant(opened.database, args.name, quota, guard, datetime.now(UTC))
    windows = shown["windows"]
    by = {"provider": shown["providers"], "source": shown["sources"]}
    if args.json:
        print(common.json_line(shown))
        return common.EXIT_OK
    state_text = "active"
    if shown["paused"]:
        state_text = (
            f"paused by {shown['paused_by']} at {shown['paused_at']:%Y-%m-%d %H:%M:%S}: {shown['paused_reason']}"
        )
    print(f"tenant     {args.name}")
    print(f"state      {state_text}")
    if shown["probation"]:
        print(f"probation  since {shown['probation_since']:%Y-%m-%d %H:%M:%S}, "
              f"{shown['probation_sent']} of {guard.graduate_after} delivered")  # fmt: skip
    elif shown["graduated_at"] is not None:
        print(f"probation  graduated at {shown['graduated_at']:%Y-%m-%d %H:%M:%S}")
    q = shown["quotas"]
    print(f"quotas     {q['messages_this_hour']} this hour (max_per_hour {q['max_per_hour'] or 'none'}), "
          f"{q['messages_today']} today (max_per_day {q['max_per_day'] or 'none'}), "
          f"{q['queued_bytes']} octets queued (max_queued_bytes {q['max_queued_bytes'] or 'none'})")  # fmt: skip
    print(f"limits     max_complaint_rate {guard.max_complaint_rate}, max_bounce_rate {guard.max_bounce_rate}, "
          f"over at least {guard.min_volume} deliveries")  # fmt: skip
    rows = [{"by": "tenant", "key": args.name, "window": w, **windows[w]} for w in reputation.WINDOWS]
    rows += [{"by": scope, "key": key, "window": w, **found[w]}
             for scope in ("provider", "source") for key, found in by[scope].items()
             for w in reputation.WINDOWS]  # fmt: skip
    common.table(rows, ["by", "key", "window", *reputation.OUTCOMES])
    return common.EXIT_OK


async def pause(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        held = await tenants.pause(opened.database, args.name, args.reason, by="operator", now=datetime.now(UTC))
        if held is None:
            why = await tenants.state(opened.database, args.name)
            raise errors.Conflict(f"tenant {args.name} is paused already ({why['paused_by']}: {why['paused_reason']})")
        acks = await common.held(opened.database, settings)
    print(f"tenant {args.name} paused; {held} deliveries wait")
    common.told(acks)
    return common.EXIT_OK


async def resume(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        released = await tenants.resume(opened.database, args.name, by="operator", now=datetime.now(UTC))
        if released is None:
            raise errors.Conflict(f"tenant {args.name} is not paused")
        acks = await common.held(opened.database, settings)
    print(f"tenant {args.name} resumed; {released} deliveries due now")
    common.told(acks)
    return common.EXIT_OK


async def probation(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        await tenants.set_probation(opened.database, args.name, args.state == "on", datetime.now(UTC))
    print(f"tenant {args.name} {'on' if args.state == 'on' else 'off'} probation")
    return common.EXIT_OK
