"""Event consumers against real PostgreSQL: each event handled once per consumer
across nodes, none skipped when a transaction commits late, catch-up after a
failure, a poison event skipped without holding another consumer back, NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from mtad import db
from mtad.base import errors, metrics
from mtad.feedback import consumers
from mtad.feedback.consumers import Consumers, Stored
from tests import waiting
from tests.pg import query

SEEN = "CREATE TABLE seen (consumer text, event bigint, PRIMARY KEY (consumer, event))"


class Recording:
    """Writes each event it handles into `seen`, in the consumer's transaction: a
    second handling of one event would break the primary key."""

    def __init__(self, name: str, kinds: frozenset[str] | None = None, poison: int | None = None) -> None:
        self._name, self._kinds, self.poison = name, kinds, poison
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def kinds(self) -> frozenset[str] | None:
        return self._kinds

    async def handle(self, conn: db.Connection, batch: Sequence[Stored]) -> None:
        self.calls += 1
        for event in batch:
            if event.id == self.poison:
                raise ValueError(f"cannot handle event {event.id}")
            await conn.execute_text("INSERT INTO seen VALUES ($1, $2)", self._name, event.id)


async def write(database: db.Database, count: int, kind: str = "delivered") -> list[int]:
    rows = await query(
        database,
        "INSERT INTO events (at, kind, tenant, data) SELECT now(), $1, 't1', jsonb_build_object('n', n)"
        " FROM generate_series(1, $2) AS n RETURNING id",
        kind,
        count,
    )
    return [r["id"] for r in rows]


async def seen(database: db.Database, name: str) -> list[int]:
    return [
        r["event"] for r in await query(database, "SELECT event FROM seen WHERE consumer = $1 ORDER BY event", name)
    ]


@pytest.fixture
async def ready(database: db.Database) -> db.Database:
    await query(database, SEEN)
    return database


async def test_a_new_consumer_starts_after_what_is_written_then_handles_each_event_once(ready: db.Database) -> None:
    await write(ready, 3)  # before the consumer existed
    one = Consumers(ready, [Recording("a")], consumers.Settings(batch=7))
    assert await one.catch_up() == 0
    ids = await write(ready, 20)
    two = Consumers(ready, [Recording("a")], consumers.Settings(batch=7))  # another node, the same consumer
    counts = await asyncio.gather(one.catch_up(), two.catch_up())
    assert sum(counts) == 20
    assert await seen(ready, "a") == ids
    assert await one.catch_up() == 0


async def test_an_event_committed_late_is_not_skipped(ready: db.Database, dsn: str) -> None:
    handler = Recording("a")
    consuming = Consumers(ready, [handler])
    await consuming.catch_up()
    late = await db.connect_once(dsn)
    try:
        async with late.transaction():
            early_id = await late._conn.fetchval(
                "INSERT INTO events (at, kind, tenant, data) VALUES (now(), 'delivered', 't1', '{}') RETURNING id"
            )
            later = await write(ready, 2)  # written and committed after it, with higher ids
            assert later[0] > early_id
            assert await consuming.catch_up() == 0  # not past the transaction still open
        assert await consuming.catch_up() == 3
    finally:
        await db.close(late)
    assert await seen(ready, "a") == [early_id, *later]


async def test_a_failed_batch_is_handled_again_and_a_poison_event_skipped(ready: db.Database) -> None:
    failing = Recording("failing")
    other = Recording("other")
    consuming = Consumers(ready, [failing, other], consumers.Settings(poll=0.05, max_failures=2))
    await consuming.catch_up()  # both start here
    ids = await write(ready, 5)
    failing.poison = ids[2]
    running = asyncio.create_task(consuming.run())
    try:
        await waiting.eventually_async(lambda: _has(ready, "other", 5))  # the other consumer is not held back
        await waiting.eventually_async(lambda: _has(ready, "failing", 4))  # every event but the poison one, once
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert await seen(ready, "failing") == [i for i in ids if i != ids[2]]
    assert failing.calls > 4  # the batch failed, then went one by one
    assert metrics.CONSUMER_FAILURES.labels(consumer="failing")._value.get() >= 2


class Unreachable(Recording):
    """Finds the database gone for its first `times` batches, as a handler does while
    PostgreSQL restarts (the database layer raises DatabaseUnavailable)."""

    def __init__(self, name: str, times: int) -> None:
        super().__init__(name)
        self.times = times

    async def handle(self, conn: db.Connection, batch: Sequence[Stored]) -> None:
        if self.times > 0:
            self.times -= 1
            raise errors.DatabaseUnavailable("connection refused")
        await super().handle(conn, batch)


async def test_a_database_away_skips_no_event_and_ends_no_consumer(ready: db.Database) -> None:
    away = Unreachable("waiting", times=5)  # more than the failures that skip a poison event (4)
    consuming = Consumers(ready, [away], consumers.Settings(poll=0.05, max_failures=2))
    await consuming.catch_up()
    ids = await write(ready, 5)
    running = asyncio.create_task(consuming.run())
    try:
        await waiting.eventually_async(lambda: _has(ready, "waiting", 5), within=60)
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert await seen(ready, "waiting") == ids  # every event, once: none was taken for a poison one
    assert away.times == 0


async def test_a_consumer_is_woken_by_notify_and_reports_its_lag(ready: db.Database) -> None:
    consuming = Consumers(ready, [Recording("a", kinds=frozenset({"complained"}))], consumers.Settings(poll=3600))
    running = asyncio.create_task(consuming.run())
    try:
        await waiting.eventually_async(lambda: _started(ready))
        await write(ready, 3)  # not its kind
        [wanted] = await write(ready, 1, kind="complained")
        async with asyncio.timeout(10):  # the poll is an hour away: only NOTIFY wakes it
            await waiting.eventually_async(lambda: _has(ready, "a", 1))
        assert await seen(ready, "a") == [wanted]
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    assert metrics.CONSUMER_LAG.labels(consumer="a")._value.get() == 0


class Holding(Recording):
    """Holds its batch (and its transaction open) until released."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.holding = asyncio.Event()
        self.released = asyncio.Event()

    async def handle(self, conn: db.Connection, batch: Sequence[Stored]) -> None:
        self.holding.set()
        await self.released.wait()
        await super().handle(conn, batch)


async def test_the_lag_is_the_age_of_the_oldest_event_still_to_handle(ready: db.Database) -> None:
    written = datetime(2030, 1, 1, tzinfo=UTC)
    holding = Holding("held")
    consuming = Consumers(ready, [holding], consumers.Settings(poll=0.05), now=lambda: written + timedelta(minutes=2))
    await consuming.catch_up()  # it starts here
    await query(ready, "INSERT INTO events (at, kind, tenant, data) VALUES ($1, 'delivered', 't1', '{}'),"
                       " ($2, 'delivered', 't1', '{}')", written, written + timedelta(seconds=30))  # fmt: skip
    lag = metrics.CONSUMER_LAG.labels(consumer="held")
    running = asyncio.create_task(consuming.run())
    try:
        await holding.holding.wait()  # the batch is being handled: its position has not moved
        await waiting.eventually_async(lambda: _is(lag._value.get(), 120.0))
        holding.released.set()
        await waiting.eventually_async(lambda: _has(ready, "held", 2))
        await waiting.eventually_async(lambda: _is(lag._value.get(), 0.0))  # caught up
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


async def _is(value: float, wanted: float) -> bool:
    return value == wanted


async def test_two_consumers_may_not_share_a_name(ready: db.Database) -> None:
    with pytest.raises(ValueError, match="share a name"):
        Consumers(ready, [Recording("a"), Recording("a")])


async def _has(database: db.Database, name: str, count: int) -> bool:
    return len(await seen(database, name)) >= count


async def _started(database: db.Database) -> bool:
    return bool(await query(database, "SELECT 1 FROM event_consumers"))
