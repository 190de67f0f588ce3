"""`mtad dkim`: the DKIM signing keys, made, listed with what DNS publishes, activated, revoked."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config
    from mtad.outbound import routing
    from mtad.signing import dkim

# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to the enum).
ALGORITHMS = ("rsa2048", "ed25519")  # dkim.Algorithm


def register(commands: common.Commands) -> None:
    keys = commands.group("dkim", "Manage DKIM signing keys.", title="dkim commands", metavar="COMMAND",
                          required=True)  # fmt: skip
    dgen = keys.add(
        "keygen", common.Command(keygen), help="Make a pending key for a domain and print the DNS record to publish."
    )
    dgen.add_argument("domain")
    dgen.add_argument("--alg", choices=ALGORITHMS, default="rsa2048")
    dgen.add_argument("--selector", help="default mtad-YYYYMM (-ed for ed25519)")
    dls = keys.add("ls", common.Command(ls), help="List the keys and their states.")
    dls.add_argument("--json", action="store_true", help="one JSON object per key and line (with its record)")
    for name, text in (("activate", "Make a key sign (after its record is published)."),
                       ("revoke", "Stop a key for good.")):  # fmt: skip
        change = keys.add(name, common.Command(state), help=text)
        change.add_argument("domain")
        change.add_argument("selector")
        change.set_defaults(command_name=name)


async def keygen(args: argparse.Namespace, settings: config.Basics) -> int:
    """A new pending key for a domain; prints the TXT record to publish."""
    from mtad.signing import dkim

    sealer = common.sealer(settings)
    algorithm = dkim.Algorithm(args.alg)
    async with common.spool(settings) as opened:
        selector = args.selector
        if not selector:  # mtad-YYYYMM, or the next free one of the month
            domain = args.domain.lower().rstrip(".")
            taken = {k.selector for k in await dkim.list_all(opened.database) if k.domain == domain}
            selector = dkim.free_selector(algorithm, datetime.now(UTC), taken)
        stored = await dkim.add(opened.database, dkim.generate(args.domain, selector, algorithm), sealer)
    print(f"DKIM key {stored.selector} for {stored.domain} ({algorithm.value}) is pending; publish:")
    print(f'{stored.name}. IN TXT "{stored.record()}"')
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    """Every key, its state, and what DNS publishes for it now (through [dns])."""
    import asyncio

    from mtad.outbound import routing
    from mtad.signing import dkim

    async with common.spool(settings) as opened:
        keys = await dkim.list_all(opened.database)
    resolver = routing.DnsResolver(settings.dns.nameservers, timeout=settings.dns.timeout)
    dns = await asyncio.gather(*(_published(resolver, k) for k in keys))
    rows = [{"domain": k.domain, "selector": k.selector, "algorithm": k.algorithm.value, "state": k.state.value,
             "dns": seen, "created": k.created_at, "changed": k.changed_at, "record": k.record}
            for k, seen in zip(keys, dns, strict=True)]  # fmt: skip
    common.print_rows(rows, args.json, ["domain", "selector", "algorithm", "state", "dns", "created", "changed"])
    return common.EXIT_OK


async def _published(resolver: routing.DnsResolver, key: dkim.Stored) -> str:
    """What DNS says of a key's record: published, another key, none, or why it could not tell."""
    from mtad.signing import dkim

    try:
        answer = await resolver.lookup(f"{key.selector}._domainkey.{key.domain}", "TXT")
    except errors.RouteTempFail as exc:
        return f"lookup failed: {exc}"
    if dkim.matches(answer.values, key.record):
        return "published"
    return "another record" if answer.values else "none"


async def state(args: argparse.Namespace, settings: config.Basics) -> int:
    """activate or revoke a key by hand (the DNS-driven rotation is not built yet)."""
    from mtad.signing import dkim

    to = dkim.KeyState.ACTIVE if args.command_name == "activate" else dkim.KeyState.REVOKED
    async with common.spool(settings) as opened:
        key = await dkim.set_state(opened.database, args.domain, args.selector, to, datetime.now(UTC))
    print(f"DKIM key {key.selector} for {key.domain} is {key.state.value} (running nodes load it within a minute)")
    return common.EXIT_OK
