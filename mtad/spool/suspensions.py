"""Suspensions and reroutes: an operator's hold on mail, honoured by every node.

`mtad suspend --provider G | --tenant T | --pool P | --source ADDRESS` makes that
mail wait: a node that takes a delivery of it sets it aside, queued and due when
the suspension ends (at its `until`, or when resumed); nothing is failed, and mail
on the wire finishes. A suspended source address is left out of its pool's
choice while another address can send. A suspended account (`--account NAME`)
is also disabled until then, by the caller (mtad.admin.control), so that the
account pools skip it. `mtad queue reroute --provider G
--pool P` sends a provider group's mail from another source pool meanwhile.

Both live in PostgreSQL; each node reads them every few seconds (`Controls`), and
at once when a command tells it to (mtad.spool.controls): the command returns
once every live node has. A send that begins checks them again in SQL
(leases/begin.sql), whatever the node's view.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from mtad import db
from mtad.base import errors

log = structlog.get_logger("mtad.suspensions")

KINDS = ("provider", "tenant", "pool", "source", "account")


@dataclass(frozen=True, slots=True)
class Suspension:
    kind: str
    key: str
    reason: str
    created_at: datetime
    until: datetime | None  # None: until resumed

    def describe(self) -> dict[str, Any]:
        """What an event of mail set aside says of it."""
        return {"reason": "suspended", "suspended": self.kind, "key": self.key, "why": self.reason,
                "until": self.until.isoformat() if self.until else None}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Reroute:
    provider: str
    pool: str
    reason: str
    created_at: datetime
    until: datetime | None


def check(kind: str, key: str) -> str:
    """The key of a suspension of `kind`, checked; MtadError says what is wrong."""
    if kind not in KINDS:
        raise errors.MtadError(f"cannot suspend a {kind!r}: one of {', '.join(KINDS)}")
    key = key.strip()
    if not key or len(key) > 255:
        raise errors.MtadError(f"--{kind}: a name of 1-255 characters")
    if kind == "source":
        try:
            return str(ipaddress.ip_address(key))
        except ValueError:
            raise errors.MtadError(f"--source: {key!r} is not an IP address") from None
    return key


async def suspend(
    database: db.Database, kind: str, key: str, reason: str, until: datetime | None, now: datetime
) -> Suspension:
    """Suspend what (kind, key) names until `until` (None: until resumed)."""
    key = check(kind, key)
    if until is not None and until <= now:
        raise errors.MtadError("the suspension would end before it starts")
    row = await database.fetchrow("suspensions/add", kind, key, reason, now, until)
    assert row is not None
    log.info("suspended", kind=kind, key=key, reason=reason, until=until.isoformat() if until else None)
    return Suspension(**dict(row))


async def resume(database: db.Database, kind: str, key: str, now: datetime) -> int | None:
    """End a suspension: what it set aside is due now. Returns how many deliveries
    that made due; None when nothing of the kind was suspended."""
    key = check(kind, key)
    row = await database.fetchrow("suspensions/remove", kind, key)
    if row is None:
        return None
    released = 0 if kind == "account" else int(await database.fetchval("suspensions/release", now, row["until"] or now))
    log.info("resumed", kind=kind, key=key, released=released)
    return released


async def release_pool(database: db.Database, pool: str, now: datetime) -> int:
    """What was handed back to the spool while account pool `pool` had no account
    free is due now (an account of it was enabled). Returns how many deliveries."""
    return int(await database.fetchval("suspensions/release_pool", pool, now))


async def reroute(
    database: db.Database, provider: str, pool: str, reason: str, until: datetime | None, now: datetime
) -> Reroute:
    if until is not None and until <= now:
        raise errors.MtadError("the reroute would end before it starts")
    row = await database.fetchrow("suspensions/reroute", provider, pool, reason, now, until)
    assert row is not None
    return Reroute(**dict(row))


async def unroute(database: db.Database, provider: str) -> Reroute | None:
    row = await database.fetchrow("suspensions/unroute", provider)
    return Reroute(**dict(row)) if row is not None else None


async def listing(database: db.Database, now: datetime) -> tuple[list[Suspension], list[Reroute]]:
    """The suspensions and reroutes in force at `now`."""
    suspended, rerouted = [], []
    for row in await database.fetch("suspensions/active", now):
        if row["what"] == "suspension":
            suspended.append(Suspension(row["kind"], row["key"], row["reason"], row["created_at"], row["until"]))
        else:
            rerouted.append(Reroute(row["key"], row["pool"], row["reason"], row["created_at"], row["until"]))
    return suspended, rerouted


async def hold(
    database: db.Database, node: str, ids: list[int], now: datetime, why: Suspension, group: str | None
) -> set[int]:
    """Set aside deliveries leased to `node` (not begun) for a suspension, if it still
    stands: queued, due when it ends. Returns the ids set aside (none: it was resumed
    meanwhile, and the caller's view of the suspensions is stale)."""
    from mtad.base import events

    return set(await database.fetchval("suspensions/hold", node, ids, now, why.until, group,
                                       events.encode(why.describe()), why.kind, why.key))  # fmt: skip


class Controls:
    """The suspensions and reroutes in force, as PostgreSQL said at the last load()
    (every few seconds on each node, and at once when a command tells it): what its
    delivery heeds."""

    def __init__(self, database: db.Database) -> None:
        self._db = database
        self._suspended: dict[tuple[str, str], Suspension] = {}
        self._rerouted: dict[str, Reroute] = {}

    async def load(self, now: datetime) -> None:
        suspended, rerouted = await listing(self._db, now)
        found = {(s.kind, s.key): s for s in suspended}
        if found.keys() != self._suspended.keys() or {r.provider for r in rerouted} != self._rerouted.keys():
            log.info("controls", suspended=sorted(f"{kind}:{key}" for kind, key in found),
                     rerouted=sorted(r.provider for r in rerouted))  # fmt: skip
        self._suspended = found
        self._rerouted = {r.provider: r for r in rerouted}

    def suspended(self, kind: str, key: str | None, now: datetime) -> Suspension | None:
        """The suspension of (kind, key) in force at `now`, if any."""
        if key is None:
            return None
        found = self._suspended.get((kind, key))
        return found if found is not None and (found.until is None or found.until > now) else None

    def held(self, now: datetime, *, tenant: str, provider: str, pool: str | None) -> Suspension | None:
        """Why mail of this tenant, provider group and source pool waits now, if it does."""
        return (self.suspended("provider", provider, now) or self.suspended("tenant", tenant, now)
                or self.suspended("pool", pool, now))  # fmt: skip

    def sources(self, now: datetime) -> frozenset[str]:
        """The source addresses suspended now."""
        return frozenset(k for (kind, k), s in self._suspended.items()
                         if kind == "source" and (s.until is None or s.until > now))  # fmt: skip

    def rerouted(self, provider: str, now: datetime) -> str | None:
        """The pool a provider group's mail leaves from now instead of its own, if any."""
        found = self._rerouted.get(provider)
        return found.pool if found is not None and (found.until is None or found.until > now) else None

    async def run(self, every: float, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """load() every `every` seconds until cancelled; a failed read keeps the last."""
        while True:
            try:
                await self.load(now())
            except errors.SpoolError as exc:
                log.warning("controls_unread", error=str(exc))
            await asyncio.sleep(every)
