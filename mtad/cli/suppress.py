"""`mtad suppress`: the suppression lists, global and per tenant, by hand and as CSV."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config

# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to the enum).
REASONS = ("hard_bounce", "soft_bounce", "complaint", "unsubscribe", "manual")  # suppression.Reason


def register(commands: common.Commands) -> None:
    suppress = commands.group(
        "suppress", "Manage the suppression lists: addresses mail must not go to again.",
        title="suppress commands", metavar="COMMAND", required=True,
    )  # fmt: skip
    tenant_help = "the tenant's list (default: the global list, which every tenant's mail obeys)"
    sadd = suppress.add(
        "add", common.Command(add), help="Suppress an address.",
        description="Suppress an address for a tenant, or for every tenant (the global list). An address already "
        "suppressed keeps its entry unless the new reason is stronger (a complaint or an unsubscribe).",
    )  # fmt: skip
    sadd.add_argument("address")
    sadd.add_argument("--tenant", default="", help=tenant_help)
    sadd.add_argument("--reason", choices=REASONS, default="manual")
    sadd.add_argument("--note", help="why, for whoever reads the list later")
    sadd.add_argument("--until", type=common.after, metavar="TIME",
                      help='when it stops applying: an ISO date or time, or a duration from now ("30d")')  # fmt: skip
    srm = suppress.add("rm", common.Command(rm), help="Remove an address from a list.")
    srm.add_argument("address")
    srm.add_argument("--tenant", default="", help=tenant_help)
    sls = suppress.add("ls", common.Command(ls), help="List suppressed addresses.")
    sls.add_argument("--tenant", help="only this tenant's list ('' for the global one; default: every list)")
    sls.add_argument("--reason", choices=REASONS)
    sls.add_argument("--json", action="store_true", help="one JSON object per address and line")
    simport = suppress.add(
        "import", common.Command(import_csv), help="Add the addresses of a CSV file.",
        description="Add the addresses of a CSV file with a header line: address,tenant,reason,created (tenant "
        "empty: the global list; reason empty: manual; created empty: now). Addresses already on their list "
        "stay as they are. All or nothing: a bad row is refused with its line number.",
    )  # fmt: skip
    simport.add_argument("file", type=Path, help="the CSV file, or - for standard input")
    sexport = suppress.add(
        "export", common.Command(export_csv),
        help="Write every suppressed address as CSV (address,tenant,reason,created).",
    )  # fmt: skip
    sexport.add_argument("file", type=Path, nargs="?", help="the file to write (default: standard output)")


def _list_name(tenant: str) -> str:
    return f"tenant {tenant}" if tenant else "the global list"


async def add(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    reason = suppression.Reason(args.reason)
    async with common.spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        entry = await suppression.add(opened.database, args.address, reason, datetime.now(UTC),
                                      tenant=args.tenant, detail=args.note, expires_at=args.until)  # fmt: skip
        if entry is None:
            [kept] = [e for e in await suppression.entries(opened.database, args.tenant)
                      if e.address == args.address.strip().lower()]  # fmt: skip
            print(f"{kept.address} is already suppressed for {_list_name(args.tenant)} ({kept.reason.value}); kept")
            return common.EXIT_OK
    print(f"suppressed {entry.address} for {_list_name(args.tenant)} ({entry.reason.value})")
    return common.EXIT_OK


async def rm(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    async with common.spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        removed = await suppression.remove(opened.database, args.address, args.tenant)
    if not removed:
        raise errors.NotFound(f"{args.address} is not on {_list_name(args.tenant)}")
    print(f"removed {args.address} from {_list_name(args.tenant)}")
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    reason = suppression.Reason(args.reason) if args.reason else None
    async with common.spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        found = await suppression.entries(opened.database, args.tenant, reason)
    rows = [{"address": e.address, "tenant": e.tenant, "reason": e.reason.value, "created": e.created_at,
             "expires": e.expires_at, "event": e.event, "delivery": e.delivery, "detail": e.detail}
            for e in found]  # fmt: skip
    if args.json:
        for row in rows:
            print(common.json_line(row))
    else:
        common.table([{**r, "tenant": r["tenant"] or "(global)"} for r in rows],
                     ["address", "tenant", "reason", "created", "expires", "detail"])  # fmt: skip
    return common.EXIT_OK


async def import_csv(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import suppression

    source = sys.stdin.buffer if str(args.file) == "-" else args.file
    if source is not sys.stdin.buffer and not args.file.is_file():
        raise errors.UsageError(f"{args.file}: no such file")
    async with common.spool(settings) as opened:
        added = await suppression.import_csv(opened.database, source, datetime.now(UTC),
                                             default_tenant=settings.default_tenant)  # fmt: skip
    print(f"imported {added} new suppression(s) from {args.file}")
    return common.EXIT_OK


async def export_csv(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import suppression

    output = sys.stdout.buffer if args.file is None or str(args.file) == "-" else args.file
    async with common.spool(settings) as opened:
        await suppression.export_csv(opened.database, output)
    return common.EXIT_OK
