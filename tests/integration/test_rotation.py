"""The DKIM rotation walk with an injected clock and a real DNS server on loopback
(dnsmasq, started afresh with the records each phase publishes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from mtad import db
from mtad.base.endpoints import HostPort
from mtad.outbound import routing
from mtad.signing import dkim, rotation
from mtad.signing.dkim import Algorithm, KeyState
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq, txt_record
from tests.integration.mailboxes import SEALER
from tests.pg import query

pytestmark = NEEDS_DNSMASQ

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = 300


@contextmanager
def publishing(*records: tuple[str, str]) -> Iterator[routing.DnsResolver]:
    """A DNS server answering TXT (name, record) for each given, NXDOMAIN for the rest
    of example.org, with a TTL of 300 s; and a resolver that asks it."""
    options = []
    for name, record in records:
        options.append("--" + txt_record(name, record))
    server = Dnsmasq("example.org", options)
    try:
        yield routing.DnsResolver([HostPort("127.0.0.1", server.port)], timeout=2.0)
    finally:
        server.close()


def walk(database: db.Database, resolver: routing.Resolver, clock: list[datetime],
         **settings: float | None) -> rotation.Rotation:  # fmt: skip
    return rotation.Rotation(database, resolver, SEALER, rotation.Settings(**settings), now=lambda: clock[0])  # type: ignore[arg-type]


async def states(database: db.Database) -> dict[str, KeyState]:
    return {k.selector: k.state for k in await dkim.list_all(database)}


async def test_the_rotation_walk(database: db.Database) -> None:
    clock = [T0]
    first = await dkim.add(database, dkim.generate("example.org", "a", Algorithm.RSA2048), SEALER)
    other = dkim.generate("example.org", "x", Algorithm.RSA2048)  # a record for another key

    with publishing() as resolver:  # not published yet
        assert await walk(database, resolver, clock).step() == []
    with publishing((first.name, other.record())) as resolver:  # published with the wrong key
        assert await walk(database, resolver, clock).step() == []
    assert await states(database) == {"a": KeyState.PENDING}

    with publishing((first.name, first.record())) as resolver:  # published right: the first key signs at once
        moves = await walk(database, resolver, clock).step()
    assert [(m.selector, m.to) for m in moves] == [("a", "seen"), ("a", "active")]
    assert await states(database) == {"a": KeyState.ACTIVE}

    clock[0] = T0 + timedelta(days=30)
    second = await dkim.add(database, dkim.generate("example.org", "b", Algorithm.RSA2048), SEALER)
    both = ((first.name, first.record()), (second.name, second.record()))
    with publishing(*both) as resolver:
        seen = await walk(database, resolver, clock).step()
        assert [(m.selector, m.to) for m in seen] == [("b", "seen")]  # the old answer may be cached for its TTL
        clock[0] += timedelta(seconds=TTL - 1)
        assert await walk(database, resolver, clock).step() == []
        clock[0] += timedelta(seconds=2)
        swapped = await walk(database, resolver, clock).step()
    assert sorted((m.selector, m.to) for m in swapped) == [("a", "retiring"), ("b", "active")]
    assert await states(database) == {"a": KeyState.RETIRING, "b": KeyState.ACTIVE}
    assert [k.selector for k in await dkim.load(database, SEALER)] == ["b"]  # only the new key signs

    retired_at = clock[0]
    with publishing(*both) as resolver:
        clock[0] = retired_at + timedelta(days=7) - timedelta(seconds=1)
        assert await walk(database, resolver, clock).step() == []  # the overlap is not over
        clock[0] = retired_at + timedelta(days=7)
        [revoked] = await walk(database, resolver, clock).step()
    assert (revoked.selector, revoked.to) == ("a", "revoked")
    assert revoked.publish == 'a._domainkey.example.org. IN TXT "v=DKIM1; p="'

    clock[0] = retired_at + timedelta(days=91)  # rotate_every: a successor for b, and what to publish
    with publishing(*both) as resolver:
        [generated] = await walk(database, resolver, clock, rotate_every=90 * 86400.0).step()
        assert await walk(database, resolver, clock, rotate_every=90 * 86400.0).step() == []  # one is enough
    selector = dkim.default_selector(Algorithm.RSA2048, clock[0])
    assert (generated.selector, generated.to) == (selector, "pending")
    assert generated.publish is not None
    assert generated.publish.startswith(f'{selector}._domainkey.example.org. IN TXT "v=DKIM1; k=rsa; p=MII')

    events = [json.loads(r["data"]) for r in await query(database, "SELECT data FROM events WHERE kind = 'dkim_key' "
                                                                     "ORDER BY id")]  # fmt: skip
    assert [(e["selector"], e["from"], e["to"]) for e in events] == [
        ("a", "pending", "active"),
        ("b", "pending", "active"),
        ("a", "active", "retiring"),
        ("a", "retiring", "revoked"),
        (selector, None, "pending"),
    ]


async def test_a_record_that_stops_matching_is_forgotten(database: db.Database) -> None:
    clock = [T0]
    old = await dkim.add(database, dkim.generate("example.org", "a", Algorithm.ED25519), SEALER)
    new = await dkim.add(database, dkim.generate("example.org", "b", Algorithm.ED25519), SEALER)
    with publishing((old.name, old.record())) as resolver:
        await walk(database, resolver, clock).step()
    with publishing((old.name, old.record()), (new.name, new.record())) as resolver:
        assert [m.to for m in await walk(database, resolver, clock).step()] == ["seen"]
    clock[0] += timedelta(seconds=TTL + 1)
    with publishing((old.name, old.record())) as resolver:  # b's record was taken down again
        assert await walk(database, resolver, clock).step() == []
    [b] = [k for k in await dkim.list_all(database) if k.selector == "b"]
    assert (b.state, b.published_at) == (KeyState.PENDING, None)
