"""The spool as the operator's tools read it: deliveries listed by filter and counted,
the queue's shape (qshape's), a message shown.

A delivery's provider group is the one its last attempt was routed to (set as the
attempt begins, or as a node set it aside): one never attempted has none (`-`), so
the recipient's domain is the key that always holds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mtad import db
from mtad.base import errors, lifecycle
from mtad.base.lifecycle import State

# What is still to be done: every state but the final ones, in the table's order.
PENDING: tuple[str, ...] = tuple(s.value for s in State if s not in lifecycle.FINAL)
NEVER = "-"  # the provider group (or pool, source) of a delivery never attempted
BY = ("provider", "state", "domain", "tenant", "source", "pool")  # what the summary counts by
# qshape's age buckets: under 5 minutes, 5 to 10, ..., 1280 minutes and more.
BUCKETS = ("5m", "10m", "20m", "40m", "80m", "160m", "320m", "640m", "1280m", "1280m+")


@dataclass(frozen=True, slots=True)
class Filters:
    """Which deliveries a listing, a summary or an action is about; None: any."""

    states: tuple[str, ...] | None = PENDING
    tenant: str | None = None
    group: str | None = None  # NEVER: those never attempted
    domain: str | None = None  # a lower-case A-label
    older_than: timedelta | None = None  # accepted at least that long before `now`
    message: uuid.UUID | None = None
    delivery: int | None = None
    now: datetime | None = None  # what older_than counts from (required with it)

    def args(self) -> tuple[Any, ...]:
        """$1..$7 of the statements of sql/queue/."""
        before = None
        if self.older_than is not None:
            assert self.now is not None, "older_than counts from now"
            before = self.now - self.older_than
        states = list(self.states) if self.states is not None else None
        return (states, self.tenant, self.group, self.domain, before, self.message, self.delivery)


async def deliveries(
    database: db.Database, filters: Filters = Filters(), *, after: int = 0, limit: int | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Stream the deliveries that match (with their envelope), oldest first: those
    after id `after`, at most `limit` (None: all)."""
    async with database.transaction() as tx:
        async for row in tx.cursor("queue/list", *filters.args(), after, limit):
            yield dict(row)


@dataclass(frozen=True, slots=True)
class Totals:
    """How many deliveries match, by state; `sending`: leased ones whose attempt began."""

    states: dict[str, int]
    sending: int = 0

    @property
    def total(self) -> int:
        return sum(self.states.values())

    def said(self) -> str:
        """`3,412 deliveries: 3,000 queued, 412 deferred` (states in the table's order)."""
        parts = [f"{self.states[s]:,} {s}" for s in (v.value for v in State) if self.states.get(s)]
        noun = "delivery" if self.total == 1 else "deliveries"
        return f"{self.total:,} {noun}" + (f": {', '.join(parts)}" if parts else "")


async def totals(database: db.Database, filters: Filters) -> Totals:
    """Count what matches (one statement)."""
    rows = await database.fetch("queue/totals", *filters.args())
    return Totals({r["state"]: r["n"] for r in rows}, sum(r["sending"] for r in rows))


@dataclass(frozen=True, slots=True)
class Shape:
    """One line of the summary: a key's deliveries by age bucket (BUCKETS), its oldest
    accepted and the next one due (None: none queued or deferred)."""

    key: str
    total: int
    buckets: tuple[int, ...]
    oldest: datetime
    next_due: datetime | None


async def summary(database: db.Database, filters: Filters, by: str, now: datetime) -> list[Shape]:
    """The queue's shape by `by` (BY), most deliveries first, at `now`."""
    if by not in BY:
        raise errors.UsageError(f"by: one of {', '.join(BY)}")
    rows = await database.fetch("queue/summary", *filters.args(), by, now)
    counts: dict[str, list[int]] = {}
    oldest: dict[str, datetime] = {}
    due: dict[str, datetime] = {}
    for r in rows:
        counts.setdefault(r["key"], [0] * len(BUCKETS))[r["bucket"]] += r["n"]
        oldest[r["key"]] = min(oldest.get(r["key"], r["oldest"]), r["oldest"])
        if r["next_due"] is not None:
            due[r["key"]] = min(due.get(r["key"], r["next_due"]), r["next_due"])
    shapes = [Shape(k, sum(c), tuple(c), oldest[k], due.get(k)) for k, c in counts.items()]
    return sorted(shapes, key=lambda s: (-s.total, s.key))


async def overview(database: db.Database) -> list[dict[str, Any]]:
    """What is still to be done by state and provider group: {"state", "key", "n",
    "oldest", "next_due"} (one pass over deliveries, cheaper than `summary`)."""
    return [dict(r) for r in await database.fetch("queue/overview", list(PENDING))]


def overall(shapes: Sequence[Shape]) -> Shape | None:
    """The TOTAL line of shapes (None: no delivery). Sync, no I/O."""
    if not shapes:
        return None
    dues = [s.next_due for s in shapes if s.next_due is not None]
    return Shape("TOTAL", sum(s.total for s in shapes), tuple(map(sum, zip(*(s.buckets for s in shapes), strict=True))),
                 min(s.oldest for s in shapes), min(dues) if dues else None)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MessageView:
    message: dict[str, Any]
    deliveries: list[dict[str, Any]]  # each with its last_reason (mtad.base.reasons; None: none heard)
    events: list[dict[str, Any]]


async def show(database: db.Database, ident: str, *, head_bytes: int = 4096) -> MessageView:
    """A message with its deliveries and events, by queue id or delivery id."""
    message_id = await _resolve_ident(database, ident)
    row = await database.fetchrow("spool/get_message", message_id, head_bytes)
    if row is None:
        raise errors.NotFound(f"no message with queue id {ident}")
    found_events = [dict(e) for e in await database.fetch("spool/events_of_message", message_id)]
    reasons = last_reasons(found_events)
    found = [{**d, "last_reason": reasons.get(d["id"])}
             async for d in deliveries(database, Filters(states=None, message=message_id))]  # fmt: skip
    return MessageView(dict(row), found, found_events)


def last_reasons(found: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Each delivery's reason, as its last bounced or deferred event gives it (none
    once delivered since), from events in id order. Sync, no I/O."""
    reasons: dict[int, str] = {}
    for event in found:
        delivery = event["delivery"]
        if delivery is None:
            continue
        if event["kind"] == "delivered":
            reasons.pop(delivery, None)
        elif event["kind"] in ("bounced", "deferred"):
            reason = json.loads(event["data"]).get("reason")
            if isinstance(reason, str):
                reasons[delivery] = reason
    return reasons


def ident(text: str) -> tuple[uuid.UUID | None, int | None]:
    """A queue id (UUID) or a delivery id (number), as (message, delivery). Sync, no I/O."""
    if text.isdigit():
        return None, int(text)
    try:
        return uuid.UUID(text), None
    except ValueError:
        raise errors.NotFound(f"{text!r} is neither a queue id (a UUID) nor a delivery id (a number)") from None


async def _resolve_ident(database: db.Database, text: str) -> uuid.UUID:
    message, delivery = ident(text)
    if message is not None:
        return message
    found = await database.fetchval("spool/message_of_delivery", delivery)
    if found is None:
        raise errors.NotFound(f"no delivery with id {text}")
    return uuid.UUID(str(found))
