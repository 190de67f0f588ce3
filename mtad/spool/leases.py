"""Leases on deliveries: who may attempt what, until when, and what happened.

A node leases due deliveries in batches (one statement, FOR UPDATE SKIP LOCKED),
renews the leases while it works, writes an attempt id before DATA, and records
outcomes (state, reason, last reply, next attempt, event) in batches. Leases of
a node that stops renewing them expire and a reaper on any node returns them to
the queue. Every change here is guarded by `lease_owner`: a node that lost a
lease cannot record over whoever holds it now.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mtad import db
from mtad.base import errors, events, lifecycle
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.spool import wakeups


@dataclass(frozen=True, slots=True)
class Leased:
    """A delivery this node may attempt until its lease expires."""

    id: int
    message: uuid.UUID
    recipient: str
    domain: str
    priority: int
    attempts: int
    failures: int
    created_at: datetime
    maybe_sent: bool  # an earlier attempt wrote its attempt id and never recorded an outcome
    due_at: datetime  # when it became due: accepted, or its next attempt's time


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt did to one delivery, to be recorded with its event."""

    delivery: int
    tenant: str
    state: State
    reason: Reason | None
    reply: Reply | None
    next_attempt_at: datetime | None  # for deferrals
    route_group: str | None
    internal: bool  # mtad's own failure: counts towards the dead letter
    data: dict[str, Any]
    suppress: bool = False  # the receiver says the recipient does not exist: onto the tenant's suppression list
    data_json: str | None = None  # `data` already encoded (the recipients of one attempt share most of it)


async def lease(database: db.Database, node: str, limit: int, now: datetime, until: datetime) -> list[Leased]:
    rows = await database.fetch("leases/lease", node, limit, until, now)
    return [
        Leased(
            id=r["id"],
            message=r["message"],
            recipient=r["recipient"],
            domain=r["domain"],
            priority=r["priority"],
            attempts=r["attempts"],
            failures=r["failures"],
            created_at=r["created_at"],
            maybe_sent=r["attempt_id"] is not None,
            due_at=r["next_attempt_at"],
        )
        for r in rows
    ]


async def renew(database: db.Database, node: str, ids: Sequence[int], until: datetime) -> set[int]:
    """Extend this node's leases; returns the ids it still holds."""
    if not ids:
        return set()
    return {r["id"] for r in await database.fetch("leases/renew", node, list(ids), until)}


@dataclass(frozen=True, slots=True)
class Attempt:
    """Deliveries about to be sent together, as one attempt to one provider group."""

    id: uuid.UUID
    deliveries: tuple[int, ...]
    group: str
    tenant: str = ""
    pool: str | None = None  # the source pool it leaves from (None: none)
    source: str | None = None  # the source address (None: the system's choice)
    account: int | None = None  # the sending account it goes through (None: to MX)


@dataclass(frozen=True, slots=True)
class Begun:
    """What begin() found: the deliveries to send now; those suppressed meanwhile
    (cancelled, with their event); those of a tenant or campaign paused meanwhile
    (queued again to wait for its resume); those an operator's suspension, reroute or
    disabled account forbids to send this way (set aside, or queued again to go
    another way); those that would take their campaign over its limits (set aside
    until they may)."""

    owned: frozenset[int]
    suppressed: frozenset[int] = frozenset()
    held: frozenset[int] = frozenset()
    set_aside: frozenset[int] = frozenset()
    limited: frozenset[int] = frozenset()

    def of(self, ids: Sequence[int]) -> Begun:
        """The part of this answer about `ids` (one attempt's)."""
        mine = frozenset(ids)
        return Begun(self.owned & mine, self.suppressed & mine, self.held & mine, self.set_aside & mine,
                     self.limited & mine)  # fmt: skip


async def begin(database: db.Database, node: str, attempts: Sequence[Attempt], now: datetime) -> Begun:
    """Write the attempt ids before DATA (one statement for several attempts);
    deliveries no longer leased to this node are in none of the answer's sets."""
    ids = [d for a in attempts for d in a.deliveries]
    attempt_ids = [a.id for a in attempts for _ in a.deliveries]
    groups = [a.group for a in attempts for _ in a.deliveries]
    tenants = [a.tenant for a in attempts for _ in a.deliveries]
    pools = [a.pool for a in attempts for _ in a.deliveries]
    sources = [a.source or None for a in attempts for _ in a.deliveries]
    accounts = [a.account for a in attempts for _ in a.deliveries]
    rows = await database.fetch("leases/begin", node, ids, attempt_ids, groups, now, tenants, pools, sources, accounts)
    became: dict[str, set[int]] = {"begun": set(), "suppressed": set(), "held": set(), "set_aside": set(),
                                   "limited": set()}  # fmt: skip
    for row in rows:
        became[row["became"]].add(row["id"])
    if any(became[kind] for kind in ("suppressed", "held", "set_aside", "limited")):  # their events are committed
        await wakeups.consumers(database)
    return Begun(frozenset(became["begun"]), frozenset(became["suppressed"]), frozenset(became["held"]),
                 frozenset(became["set_aside"]), frozenset(became["limited"]))  # fmt: skip


async def unbegin(database: db.Database, node: str, ids: Sequence[int], now: datetime) -> None:
    """The attempt of these deliveries was refused before anything went out (they go
    to another sending account): clear their attempt ids (see begin)."""
    await database.execute("leases/unbegin", node, list(ids), now)


# What an attempt ends in (each the kind of its event); a lease handed back goes through release.
OUTCOMES = frozenset({State.DELIVERED, State.DEFERRED, State.BOUNCED, State.FAILED})


async def record(
    database: db.Database, node: str, outcomes: Sequence[Outcome], now: datetime, suppress_for: timedelta | None = None
) -> set[int]:
    """Record outcomes (with their events) in one statement; returns the ids recorded
    (the caller wakes the consumers: spool.wakeups). A recipient an outcome suppresses
    stays suppressed for `suppress_for` (None: until removed)."""
    for o in outcomes:
        lifecycle.transition(State.LEASED, o.state, o.reason)  # refuses a move the table forbids
        if o.state not in OUTCOMES:
            raise errors.IllegalTransition(f"an attempt cannot end {o.state}: release the lease instead")
    row = await database.call(
        "leases/record",
        node,
        now,
        [o.delivery for o in outcomes],
        [o.state.value for o in outcomes],
        [o.reason.value if o.reason else None for o in outcomes],
        [o.reply.code if o.reply else None for o in outcomes],
        [o.reply.enhanced if o.reply else None for o in outcomes],
        [o.reply.text if o.reply else None for o in outcomes],
        [o.next_attempt_at for o in outcomes],
        [o.tenant for o in outcomes],
        [o.data_json or events.encode(o.data) for o in outcomes],
        [o.route_group for o in outcomes],
        [o.internal for o in outcomes],
        [o.delivery for o in outcomes if o.suppress],
        suppress_for,
    )
    return set(row["ids"] or ()) if row is not None else set()


async def reap(database: db.Database, now: datetime, batch: int = 1000) -> int:
    """Return every expired lease (of any node) to the queue, `batch` per statement
    until none is left; returns how many."""
    total = 0
    while True:
        reaped = int(await database.fetchval("leases/reap", now, batch))
        total += reaped
        if reaped < batch:
            return total


async def reclaim(database: db.Database, node: str, now: datetime) -> int:
    """Take back what `node` held in its previous life, whose process is gone: queued
    again, due now (a set attempt id says it may have gone out). One statement;
    returns how many."""
    return int(await database.fetchval("leases/reclaim", node, now))


async def release(
    database: db.Database, node: str, ids: Sequence[int], now: datetime,
    due: datetime | None = None, why: Mapping[str, Any] | None = None,
) -> set[int]:  # fmt: skip
    """Hand back leases this node did not start: queued again, due at `due` (None:
    now), the event saying `why` (default: released). Returns the ids handed back
    (not one that was started, or is no longer this node's)."""
    if not ids:
        return set()
    data = events.encode(why or {"reason": "released"})
    return set(await database.fetchval("leases/release", node, list(ids), now, due, data))


async def messages(database: db.Database, ids: Sequence[uuid.UUID], room: int = 2**62) -> list[dict[str, Any]]:
    """The envelopes of messages, for sending, with their bodies while they add up to
    at most `room` bytes (a body left out is None); a message no longer in the spool
    is left out."""
    return [dict(row) for row in await database.fetch("leases/message_for_sending", list(ids), room)]


async def message(database: db.Database, message_id: uuid.UUID) -> dict[str, Any]:
    """The envelope and body of one message, for sending."""
    rows = await messages(database, [message_id])
    if not rows:
        raise errors.NotFound(f"message {message_id} is not in the spool")
    return rows[0]
