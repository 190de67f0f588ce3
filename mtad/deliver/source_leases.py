"""Source leases: a node sends through a source address only while it holds a lease
on it in PostgreSQL (`source_leases`), so that every node sees where mail leaves
from. `take` gets the lease an Egress choice wants (one round trip) and tells the
Egress; `renew` extends this node's, `release` gives them back.

A rotate pool's lease carries the sends of a turn this node may make; its turns
are drawn and counted in PostgreSQL (`mtad_source_take`), so that ten nodes
rotate as one, and each take tells which addresses rest and until when. A turn
given out whose sends have all ended everywhere is parked at its release.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mtad import db
from mtad.deliver import egress


def _timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def take(
    database: db.Database, pools: egress.Egress, node: str, wanted: egress.Wanted, want: int, until: float
) -> egress.Granted:
    """Take the lease `wanted` for `node` (a rotate pool's: up to `want` sends of a
    turn, a new one drawn when none is open) in one round trip, and tell `pools`;
    the lease lasts until `until` unless renewed. See mtad_source_take.sql."""
    settings = pools.pools[wanted.pool]
    low, high = settings.rotate_after
    rows = await database.fetch(
        "egress/take",
        wanted.pool,
        list(settings.addresses),
        wanted.address,
        sorted(wanted.excluding),
        node,
        max(1, want),
        pools.draw(low, high),
        timedelta(seconds=settings.park),
        _timestamp(pools.now()),
        _timestamp(until),
    )
    parked = {r["address"]: r["parked_until"].timestamp() for r in rows if r["parked_until"] is not None}
    given = next((r for r in rows if r["given"]), None)
    granted = egress.Granted(given["address"] if given else None, given["sends"] if given else None, parked)
    pools.granted(wanted.pool, granted)
    return granted


async def release(database: db.Database, pools: egress.Egress, node: str, pool: str, addresses: list[str]) -> list[str]:
    """Give back `node`'s leases on `addresses` of `pool`; a turn given out whose
    sends have all ended everywhere is parked now. Returns the addresses parked."""
    park = timedelta(seconds=pools.pools[pool].park)
    rows = await database.fetch("egress/release", pool, addresses, node, park, _timestamp(pools.now()))
    return [r["address"] for r in rows]


async def release_all(database: db.Database, pools: egress.Egress, node: str) -> None:
    """Every lease this node holds, given back (at a stop)."""
    for pool, addresses in pools.leases().items():
        pools.kept(pool, ())
        await release(database, pools, node, pool, addresses)


async def renew(database: db.Database, pools: egress.Egress, node: str, until: float) -> list[str]:
    """Extend this node's leases to `until`; returns those found lost (expired and
    taken over meanwhile), which the node no longer sends through."""
    held = pools.leases()
    if not held:
        return []
    addresses = [a for listed in held.values() for a in listed]
    rows = await database.fetch("egress/renew", node, addresses, _timestamp(until))
    kept = {r["address"] for r in rows}
    return [a for pool in held for a in pools.kept(pool, kept)]
