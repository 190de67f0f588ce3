"""LISTEN kept: the Listenings of a process on one database share one connection
(PostgreSQL wakes every listening connection at every NOTIFY, whatever its channel),
each hears its own channel, one lets go without the others, and a lost connection is
opened again with every channel."""

from __future__ import annotations

import asyncio

from mtad import db
from tests.pg import query

LISTENING = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"


async def listening(database: db.Database) -> list[int]:
    """The pids of the backends whose connection last said LISTEN."""
    return [row["pid"] for row in await query(database, LISTENING)]


async def heard(event: asyncio.Event) -> None:
    async with asyncio.timeout(10):
        await event.wait()
    event.clear()


async def test_listenings_share_one_connection_and_hear_their_own_channels(database: db.Database) -> None:
    due, events, also = asyncio.Event(), asyncio.Event(), asyncio.Event()
    keeping = [db.Listening(database.dsn, "mtad_due", due.set), db.Listening(database.dsn, "mtad_events", events.set),
               db.Listening(database.dsn, "mtad_events", also.set)]  # fmt: skip
    try:
        for each in keeping:
            await each.keep()
        first = await listening(database)
        assert len(first) == 1
        await query(database, "SELECT pg_notify('mtad_events', '')")
        await heard(events)
        await heard(also)
        assert not due.is_set()
        await query(database, "SELECT pg_notify('mtad_due', '')")
        await heard(due)

        await keeping[1].close()  # the other mtad_events listener still hears it
        await query(database, "SELECT pg_notify('mtad_events', '')")
        await heard(also)
        assert not events.is_set()

        await query(database, "SELECT pg_terminate_backend($1)", first[0])
        for _ in range(1000):  # until the loss is seen and the connection opened again
            await keeping[0].keep()
            again = await listening(database)
            if again and first[0] not in again:
                break
            await asyncio.sleep(0.01)
        assert len(again) == 1
        assert first[0] not in again
        await query(database, "SELECT pg_notify('mtad_due', ''), pg_notify('mtad_events', '')")
        await heard(due)
        await heard(also)
    finally:
        for each in keeping:
            await each.close()
    for _ in range(1000):  # the last to let go closed it: until its backend is gone
        if not await listening(database):
            break
        await asyncio.sleep(0.01)
    assert await listening(database) == []
