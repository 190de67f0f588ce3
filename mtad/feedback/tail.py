"""Reading the event log as it grows, for `mtad events tail`: the last events, or
those since a time, then (following) each new one as it is written, in the order
consumers read them (see consumers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

from mtad import db
from mtad.base import errors
from mtad.feedback import event_log


@dataclass(frozen=True, slots=True)
class Filter:
    kind: str | None = None
    tenant: str | None = None

    def keeps(self, event: event_log.Stored) -> bool:
        return (self.kind is None or event.kind == self.kind) and (self.tenant is None or event.tenant == self.tenant)


async def horizon(database: db.Database) -> int:
    """Where following starts: every event below it is written for good."""
    return int(await database.fetchval("events/horizon"))


async def recent(database: db.Database, where: Filter, lines: int) -> list[event_log.Stored]:
    """The last `lines` events that pass, oldest first."""
    rows = await database.fetch("events/recent", where.kind, where.tenant, lines)
    return [event_log.stored(r) for r in reversed(rows)]


async def since(database: db.Database, where: Filter, moment: datetime) -> AsyncIterator[event_log.Stored]:
    """Every event that passes written at `moment` or later, in id order."""
    async with database.transaction() as conn:
        async for row in conn.cursor("events/since", where.kind, where.tenant, moment):
            yield event_log.stored(row)


async def listing(
    database: db.Database, where: Filter, moment: datetime | None, lines: int
) -> AsyncIterator[event_log.Stored]:
    """Every event that passes since `moment`, else the last `lines` of them."""
    if moment is not None:
        async for event in since(database, where, moment):
            yield event
    else:
        for event in await recent(database, where, lines):
            yield event


async def follow(
    database: db.Database, where: Filter, start: int, shown: set[int], poll: float = 1.0
) -> AsyncIterator[event_log.Stored]:
    """Each event that passes written from horizon `start` on, as it is written, but
    those in `shown` (listed already: those of the listing at or above `start`);
    never ends by itself. Woken by NOTIFY, else
    every `poll` seconds."""
    wake = asyncio.Event()
    listener: db.Listener | None = None
    with contextlib.suppress(errors.DatabaseUnavailable):
        listener = await db.Listener.open(database.dsn, event_log.CHANNEL, wake.set)
    xid, last = start, 0
    kinds = [where.kind] if where.kind is not None else None
    try:
        while True:
            wake.clear()
            rows = await database.fetch("consumers/read", str(xid), last, kinds, 500)
            batch = [event_log.stored(r) for r in rows if r["id"] is not None]
            for event in batch:
                if event.id not in shown and where.keeps(event):
                    yield event
            xid, last = event_log.after(batch, rows, 500)
            if len(batch) < 500:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll):
                        await wake.wait()
    finally:
        if listener is not None:
            await listener.close()
