"""An operator's holds: `mtad suspend`, `resume`, `suspensions ls` (reroutes: `queue reroute`)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    for name, text in (
        ("suspend", "Hold mail: a provider group's, a tenant's, a source pool's, a source address's, or stop an "
                    "account. It waits queued; nothing is failed. Every node heeds it within seconds. A name that "
                    "names nothing is refused with the one meant."),
        ("resume", "End a suspension: what it held is due now."),
    ):  # fmt: skip
        command = common.Command(suspend, names=True) if name == "suspend" else common.Command(resume)
        holding = commands.add(name, command, help=text, description=text)
        which = holding.add_mutually_exclusive_group(required=True)
        which.add_argument("--provider", metavar="GROUP", help=common.GROUP_HELP)
        which.add_argument("--tenant", metavar="NAME", help="a tenant (`tenants add`, or [submission] default_tenant)")
        which.add_argument("--pool", metavar="POOL", help="a source IP pool ([pools])")
        which.add_argument("--source", metavar="ADDRESS", help="a source IP address of a pool")
        which.add_argument("--account", metavar="NAME", help="a sending account")
        if name == "suspend":
            holding.add_argument("--for", dest="for_", type=common.duration, metavar="DURATION",
                                 help='e.g. "2h": it ends by itself (default: until `mtad resume`)')  # fmt: skip
            holding.add_argument("--reason", default="suspended by an operator", help="said in suspensions ls and "
                                 "in the events of the mail it holds")  # fmt: skip
    listing = commands.group("suspensions", "The suspensions and reroutes in force.", title="suspensions commands",
                             metavar="COMMAND", required=True)  # fmt: skip
    sls = listing.add("ls", common.Command(ls), help="The suspensions and reroutes in force.")
    sls.add_argument("--json", action="store_true", help="one JSON object per line")


def _suspended(args: argparse.Namespace) -> tuple[str, str]:
    """The (kind, key) of --provider, --tenant, --pool, --source or --account."""
    from mtad.spool import suspensions

    return next((kind, getattr(args, kind)) for kind in suspensions.KINDS if getattr(args, kind) is not None)


async def suspend(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names

    kind, key = _suspended(args)
    now = datetime.now(UTC)
    until = now + timedelta(seconds=args.for_) if args.for_ is not None else None
    async with common.spool(settings) as opened:
        await names.suspendable(opened.database, kind, key, lambda: common.configured(settings),
                                settings.default_tenant)  # fmt: skip
        done = await control.suspend(opened.database, kind, key, args.reason, until, now)
        acks = await common.held(opened.database, settings)
    ends = f"until {done.until:%Y-%m-%d %H:%M:%S} UTC" if done.until else "until resumed"
    print(f"suspended {kind} {done.key} {ends}: its mail waits")
    common.told(acks)
    return common.EXIT_OK


async def resume(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names

    kind, key = _suspended(args)
    async with common.spool(settings) as opened:
        await names.suspended(opened.database, kind, key, datetime.now(UTC))
        released = await control.resume(opened.database, kind, key, datetime.now(UTC))
        if released is None:
            raise errors.Conflict(f"{kind} {key} is not suspended")
        acks = await common.held(opened.database, settings)
    print(f"resumed {kind} {key}; {released} deliveries due now")
    common.told(acks)
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import suspensions

    async with common.spool(settings) as opened:
        suspended, rerouted = await suspensions.listing(opened.database, datetime.now(UTC))
    rows = [{"what": "suspended", "kind": s.kind, "key": s.key, "pool": None, "reason": s.reason,
             "since": s.created_at, "until": s.until} for s in suspended]  # fmt: skip
    rows += [{"what": "rerouted", "kind": "provider", "key": r.provider, "pool": r.pool, "reason": r.reason,
              "since": r.created_at, "until": r.until} for r in rerouted]  # fmt: skip
    common.print_rows(rows, args.json, ["what", "kind", "key", "pool", "reason", "since", "until"])
    return common.EXIT_OK
