"""The webhooks consumer: each event, to each endpoint of its tenant that wants it,
at least once, in order per message.

`Outbox` is the event consumer. For each batch of events it reads, this node's
sender (mtad.feedback.webhook_sender) makes the first attempt of their requests
itself, outside any transaction and before the position moves: what an endpoint
takes then is only counted (`webhook_delivered`). What did not go is written to
`webhook_messages` (migration 0017) in the transaction that moves the position, so
each is written exactly once whatever happens to the node:

- a request that failed, due again after a back-off, with its rows and webhook-id;
- a request still unanswered after `first_wait`: leased by this node, whose
  sender records its answer like any other (the consumer does not wait longer),
  and the endpoint's other events: it is slow, and for `SLOW_FOR` its events go
  by the outbox;
- the events of a message with rows of the endpoint pending (they go after those,
  in order), and what the endpoint's room in flight left over.

Where the node sends nothing (`enabled = false`, or its sender is not running),
every request is written, for any node's sender.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from mtad import db
from mtad.base import errors
from mtad.feedback import consumers, tail, webhook_sender, webhooks

REPLAY_BATCH = 1000  # events read, then written as requests, at a time


class Outbox:
    """The event consumer: first attempts by `sender` outside the transaction
    (consumers.Attempting), then the outbox rows of the rest in it."""

    name = "webhooks"
    kinds: frozenset[str] | None = None  # every kind: each endpoint says which it wants

    def __init__(
        self, sender: webhook_sender.Sender | None = None, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ):
        self._sender = sender  # None: every request is written, for any node's sender
        self._now = now
        self._attempted: tuple[tuple[int, int, int], list[webhook_sender.Item], webhook_sender.Firsts] | None = (
            None  # a batch's, by its events
        )

    async def idle(self, conn: db.Connection) -> bool:
        """No endpoint exists: no event makes a request (consumers.Idling)."""
        return not await conn.fetchval("webhooks/any")

    async def attempt(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> None:
        self._attempted = None
        if self._sender is None:
            return
        found, wanted = await _wanted_of(conn, batch)
        firsts = await self._sender.first(found, wanted, await _waiting(conn, wanted)) if wanted else None
        self._attempted = (_key(batch), wanted, firsts or webhook_sender.Firsts.unsent(wanted))

    async def handle(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> Callable[[], None] | None:
        attempted, self._attempted = self._attempted, None
        if attempted is not None and attempted[0] == _key(batch):
            _, wanted, firsts = attempted
        else:  # not attempted (no sender on this node): every request is written
            _, wanted = await _wanted_of(conn, batch)
            firsts = webhook_sender.Firsts.unsent(wanted)
        if not wanted:
            return None
        now, sender = self._now(), self._sender
        if sender is None:
            await _write(conn, firsts, now, "", now)
            return None
        sent = await _write(conn, firsts, now, sender.node, now + timedelta(seconds=sender.settings.lease))
        if firsts.rows:
            sender.wake()
        return functools.partial(sender.hand_over, firsts, sent) if firsts.flying else None


def _key(batch: Sequence[consumers.Stored]) -> tuple[int, int, int]:
    return batch[0].id, batch[-1].id, len(batch)


async def _wanted_of(
    conn: db.Connection, batch: Sequence[consumers.Stored]
) -> tuple[list[db.Row], list[webhook_sender.Item]]:
    """The endpoints of the batch's tenants (webhooks/of_tenants.sql), and an item per
    event and endpoint that wants it."""
    tenants = sorted({event.tenant for event in batch if event.tenant})
    found = await conn.fetch("webhooks/of_tenants", tenants) if tenants else []
    endpoints = [webhooks.endpoint_of(row) for row in found]
    return found, _wanted(endpoints, batch, await _campaigns(conn, endpoints, batch))


async def _campaigns(
    conn: db.Connection | db.Database, endpoints: Sequence[webhooks.Endpoint], batch: Sequence[consumers.Stored]
) -> dict[uuid.UUID, str]:
    """The campaigns of the messages of the events that go to `endpoints` and do not
    name theirs (what came back later: a complaint, an open, ...); one query, or none."""
    tenants = {endpoint.tenant for endpoint in endpoints}
    messages = {e.message for e in batch if e.message is not None and e.tenant in tenants and "campaign" not in e.data}
    if not messages:
        return {}
    return {row["id"]: row["name"] for row in await conn.fetch("webhooks/campaigns", list(messages))}


async def _waiting(conn: db.Connection, wanted: Sequence[webhook_sender.Item]) -> set[tuple[int, uuid.UUID]]:
    """Of the items' (endpoint, message) pairs, those with rows pending in the outbox."""
    endpoints = sorted({item.endpoint for item in wanted})
    messages = list({item.message for item in wanted if item.message is not None})
    if not endpoints or not messages:
        return set()
    return {(row["endpoint"], row["message"]) for row in await conn.fetch("webhooks/waiting", endpoints, messages)}


async def replay(
    database: db.Database,
    tenant: str,
    moment: datetime,
    endpoint: int | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Write again the requests of the tenant's events since `moment`, to one of its
    endpoints or to each that wants them; returns how many. NotFound when the tenant
    has no such endpoint."""
    endpoints = [e for e in await webhooks.listing(database, tenant) if endpoint is None or e.id == endpoint]
    if not endpoints:
        raise errors.NotFound(f"tenant {tenant!r} has no webhook endpoint" + (f" {endpoint}" if endpoint else ""))
    written, pending = 0, []
    async for event in tail.since(database, tail.Filter(tenant=tenant), moment):
        pending.append(event)
        if len(pending) >= REPLAY_BATCH:
            written += await _enqueue(database, await _replayed(database, endpoints, pending), now())
            pending.clear()
    return written + await _enqueue(database, await _replayed(database, endpoints, pending), now())


async def _replayed(
    database: db.Database, endpoints: Sequence[webhooks.Endpoint], batch: Sequence[consumers.Stored]
) -> list[webhook_sender.Item]:
    return _wanted(endpoints, batch, await _campaigns(database, endpoints, batch))


def _wanted(
    endpoints: Sequence[webhooks.Endpoint], batch: Sequence[consumers.Stored], campaigns: Mapping[uuid.UUID, str]
) -> list[webhook_sender.Item]:
    """One item per event and endpoint of its tenant that wants it, in the batch's order."""
    return [webhook_sender.Item(endpoint.id, event.id, event.message,
                                payload(event, campaigns.get(event.message) if event.message else None))
            for event in batch for endpoint in endpoints
            if endpoint.tenant == event.tenant and endpoint.wants(event.kind)]  # fmt: skip


async def _enqueue(database: db.Database | db.Connection, items: list[webhook_sender.Item], now: datetime) -> int:
    """Rows never sent, for every node's sender."""
    if items:
        await _write(database, webhook_sender.Firsts.unsent(items), now, "", now)
    return len(items)


async def _write(
    database: db.Database | db.Connection, firsts: webhook_sender.Firsts, now: datetime, node: str, until: datetime
) -> dict[int, list[int]]:
    """The rows of what did not go at the first attempt, and the count of what did;
    returns the rows of each request sent, by its number."""
    if not firsts.rows and not firsts.delivered:
        return {}
    rows = firsts.rows
    found = await database.fetch(
        "webhooks/enqueue", [r.item.endpoint for r in rows], [r.item.event for r in rows],
        [r.item.message for r in rows], [r.item.payload for r in rows], now, [r.sent for r in rows],
        [r.webhook_id for r in rows], [r.next_at for r in rows], [r.error for r in rows], node, until,
        list(firsts.delivered), list(firsts.delivered.values()),
    )  # fmt: skip
    return {row["sent"]: row["rows"] for row in found if row["sent"] is not None}


def payload(event: consumers.Stored, campaign: str | None = None) -> str:
    """The JSON body of an event's request (Standard Webhooks: type, timestamp, data);
    `campaign`: its message's, when its data does not say it."""
    data = {"event_id": event.id, "tenant": event.tenant, "message": str(event.message) if event.message else None,
            "delivery": event.delivery, **({"campaign": campaign} if campaign else {}), **event.data}  # fmt: skip
    return json.dumps({"type": event.kind, "timestamp": event.at.isoformat(), "data": data}, default=str)
