"""`mtad webhooks`: the tenants' webhook endpoints, their secrets, a test and a replay."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    webhooks = commands.group(
        "webhooks", "Manage the tenants' webhook endpoints (signed, Standard Webhooks).",
        title="webhooks commands", metavar="COMMAND", required=True,
    )  # fmt: skip
    wadd = webhooks.add(
        "add", common.Command(add), help="Add an endpoint of a tenant; prints its secret once.",
        description="Add a webhook endpoint of TENANT at URL (http or https). Its secret (whsec_...) is printed "
        "once and kept sealed with the [accounts] key; a receiver verifies each request's webhook-signature "
        "with it (the standardwebhooks package).",
    )  # fmt: skip
    wadd.add_argument("tenant")
    wadd.add_argument("url")
    wadd.add_argument("--events", metavar="KIND,...", help="only these event kinds (default: every kind): "
                      + ", ".join(common.EVENT_KINDS))  # fmt: skip
    wadd.add_argument("--batch", type=int, default=1, metavar="N",
                      help="up to N events a request, as a JSON array, signed once (default 1: one event a request, "
                      "its object alone; at most 1000)")  # fmt: skip
    wls = webhooks.add("ls", common.Command(ls), help="List the endpoints (never their secrets).")
    wls.add_argument("--tenant", help="only this tenant's")
    wls.add_argument("--json", action="store_true", help="one JSON object per endpoint and line")
    wrm = webhooks.add("rm", common.Command(rm), help="Remove an endpoint.")
    wrm.add_argument("id", type=int)
    wrotate = webhooks.add(
        "rotate-secret", common.Command(rotate_secret),
        help="Give an endpoint a new secret; the old one signs too for a while.",
    )  # fmt: skip
    wrotate.add_argument("id", type=int)
    overlap_help = "until when the old secret signs too: a duration from now or a time (default 24h)"
    wrotate.add_argument("--overlap", type=common.after, default="24h", metavar="TIME", help=overlap_help)
    wtest = webhooks.add("test", common.Command(test, common.Config.WHOLE), help="Send an endpoint a test event now.")
    wtest.add_argument("id", type=int)
    wreplay = webhooks.add(
        "replay", common.Command(replay), help="Send a tenant's events since a time to its endpoints again."
    )
    wreplay.add_argument("tenant")
    wreplay.add_argument("--since", type=common.before, metavar="TIME", required=True,
                         help='an ISO date or time, or a duration meaning that long ago ("2h")')  # fmt: skip
    wreplay.add_argument("--endpoint", type=int, help="only this endpoint (default: each that wants the event)")


async def add(args: argparse.Namespace, settings: config.Basics) -> int:
    """Add a tenant's endpoint and print its secret, once."""
    from mtad.admin import names
    from mtad.feedback import webhooks

    kinds = [k.strip() for k in args.events.split(",") if k.strip()] if args.events else None
    sealer = common.sealer(settings)
    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.tenant, settings.default_tenant)
        endpoint, secret = await webhooks.add(opened.database, sealer, args.tenant, args.url, kinds, args.batch)
    batched = f" (up to {endpoint.batch} events a request, as a JSON array)" if endpoint.batch > 1 else ""
    print(f"webhook endpoint {endpoint.id} of tenant {endpoint.tenant}: {endpoint.url}{batched}")
    print(f"secret (shown once; verify the webhook-signature header with it): {secret}")
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import webhooks

    async with common.spool(settings) as opened:
        if args.tenant is not None:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        found = await webhooks.listing(opened.database, args.tenant)
    rows = [{"id": e.id, "tenant": e.tenant, "url": e.url,
             "events": ",".join(sorted(e.events)) if e.events is not None else "all", "batch": e.batch,
             "previous_secret_until": e.previous_until, "created": e.created_at, "pending": e.pending,
             "delivered": e.delivered, "dead": e.dead} for e in found]  # fmt: skip
    common.print_rows(rows, args.json, ["id", "tenant", "url", "events", "batch", "pending", "delivered", "dead",
                                        "previous_secret_until"])  # fmt: skip
    return common.EXIT_OK


async def rm(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import webhooks

    async with common.spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        removed = await webhooks.remove(opened.database, args.id)
    if not removed:
        raise errors.NotFound(f"no webhook endpoint {args.id}")
    print(f"removed webhook endpoint {args.id}")
    return common.EXIT_OK


async def rotate_secret(args: argparse.Namespace, settings: config.Basics) -> int:
    """A new secret for an endpoint; the old one signs too until the overlap ends."""
    from mtad.admin import names
    from mtad.feedback import webhooks

    sealer = common.sealer(settings)
    async with common.spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        secret = await webhooks.rotate(opened.database, sealer, args.id, args.overlap)
    print(f"webhook endpoint {args.id}: new secret (shown once): {secret}")
    print(f"the previous secret signs too until {args.overlap.isoformat(timespec='seconds')}")
    return common.EXIT_OK


async def test(args: argparse.Namespace, settings: config.Settings) -> int:
    """Send an endpoint a `test` event now and say how it answered."""
    from mtad.admin import names
    from mtad.feedback import webhook_sender, webhooks

    sealer = common.sealer(settings)
    async with common.spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        found = [e for e in await webhooks.listing(opened.database) if e.id == args.id]
        if not found:
            raise errors.NotFound(f"no webhook endpoint {args.id}")
        sender = webhook_sender.Sender(opened.database, sealer, settings.webhooks, settings.node.id)
        why = await sender.test(found[0])
    if why is not None:
        print(f"webhook endpoint {args.id} ({found[0].url}): {why}")
        return common.EXIT_FAILED
    print(f"webhook endpoint {args.id} ({found[0].url}) took the test event")
    return common.EXIT_OK


async def replay(args: argparse.Namespace, settings: config.Basics) -> int:
    """Send a tenant's events since a time to its endpoints again."""
    from mtad.admin import names
    from mtad.feedback import webhook_outbox

    async with common.spool(settings) as opened:
        await names.tenant(opened.database, args.tenant, settings.default_tenant)
        if args.endpoint is not None:
            await names.webhook(opened.database, args.endpoint, args.tenant)
        written = await webhook_outbox.replay(opened.database, args.tenant, args.since, args.endpoint)
    print(f"{written} webhook request(s) written for tenant {args.tenant}; the running nodes send them")
    return common.EXIT_OK
