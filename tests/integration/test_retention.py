"""Retention against real PostgreSQL: what a round deletes, what it keeps, and one pruner at a time."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.base import envelope
from mtad.mailboxes import accounts
from mtad.spool import commit, retention
from tests import waiting
from tests.integration.mailboxes import make
from tests.pg import query

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
WEEK = retention.Settings(messages=7 * retention.DAY, events=30 * retention.DAY, batch=10)


async def spooled(database: db.Database, at: datetime, *states: str) -> uuid.UUID:
    """A message received at `at`, with one delivery per state given (set as if delivery had moved it)."""
    queue_id = commit.new_queue_id(at.timestamp())
    message = commit.NewMessage(
        id=queue_id,
        tenant="t1",
        sender="app@example.org",
        recipients=tuple(envelope.parse_mailbox(f"r{i}@example.com") for i in range(len(states))),
        message_id=f"<{queue_id.hex}@test>",
        idempotency_key=None,
        body=b"Subject: x\r\n\r\nhi\r\n",
        client_address="127.0.0.1",
        received_at=at,
    )
    committer = commit.GroupCommitter(database)
    task = asyncio.create_task(committer.run())
    try:
        await committer.commit(message)
    finally:
        committer.close()
        await task
    for i, state in enumerate(states):
        leased = state == "leased"
        await query(
            database,
            "UPDATE deliveries SET state = $3::delivery_state, lease_owner = $4, lease_expires_at = $5"
            " WHERE message = $1 AND recipient = $2",
            queue_id, f"r{i}@example.com", state, "n1" if leased else None, NOW if leased else None,
        )  # fmt: skip
    return queue_id


async def messages(database: db.Database) -> set[uuid.UUID]:
    return {r["id"] for r in await query(database, "SELECT id FROM messages")}


async def deliveries_of(database: db.Database, queue_id: uuid.UUID) -> int:
    [row] = await query(database, "SELECT count(*) AS n FROM deliveries WHERE message = $1", queue_id)
    return int(row["n"])


def pruner(database: db.Database, settings: retention.Settings = WEEK) -> retention.Pruner:
    return retention.Pruner(database, settings, now=lambda: NOW)


async def test_a_round_deletes_old_messages_whose_every_delivery_is_final(database: db.Database) -> None:
    old = NOW - timedelta(days=8)
    done = await spooled(database, old, "delivered", "bounced", "cancelled")
    failed = await spooled(database, old, "failed")
    waiting = await spooled(database, old, "delivered", "deferred")
    queued = await spooled(database, old, "queued")
    on_the_wire = await spooled(database, old, "delivered", "leased")
    young = await spooled(database, NOW - timedelta(days=6), "delivered")

    pruned = await pruner(database).prune_once()

    assert pruned is not None
    assert (pruned.messages, pruned.deliveries, pruned.kept) == (2, 4, 3)
    assert await messages(database) == {waiting, queued, on_the_wire, young}
    assert [await deliveries_of(database, m) for m in (done, failed, waiting, on_the_wire)] == [0, 0, 2, 2]
    again = await pruner(database).prune_once()
    assert again is not None
    assert (again.messages, again.kept) == (0, 3)


async def test_batches_go_through_the_whole_range(database: db.Database) -> None:
    old = NOW - timedelta(days=8)
    ids = [await spooled(database, old + timedelta(seconds=i), "delivered") for i in range(25)]
    kept = await spooled(database, old + timedelta(seconds=30), "deferred")
    young = await spooled(database, NOW - timedelta(hours=1), "delivered")

    pruned = await pruner(database, retention.Settings(messages=retention.DAY, batch=10)).prune_once()

    assert pruned is not None
    assert (pruned.messages, pruned.deliveries, pruned.kept) == (25, 25, 1)
    assert pruned.batches >= 3 + 1 + 1 + 1  # 26 messages in batches of 10, then events, reservations
    assert await messages(database) == {kept, young}
    assert not set(ids) & await messages(database)


async def add_event(database: db.Database, kind: str, at: datetime, account: int | None = None) -> int:
    data = f'{{"account": {account}}}' if account is not None else "{}"
    [row] = await query(
        database, "INSERT INTO events (at, kind, data) VALUES ($1, $2, $3::jsonb) RETURNING id", at, kind, data
    )
    return int(row["id"])


async def test_events_go_after_their_window_account_events_after_what_the_breaker_reads(
    database: db.Database,
) -> None:
    hour = retention.Settings(messages=retention.DAY, events=3600.0, batch=2)
    gone = [await add_event(database, "delivered", NOW - timedelta(hours=h)) for h in (50, 30, 2)]
    history_gone = await add_event(database, "account_failure", NOW - timedelta(hours=50), account=1)
    history_kept = await add_event(database, "account_state", NOW - timedelta(hours=30), account=1)
    young = [await add_event(database, "received", NOW - timedelta(minutes=m)) for m in (50, 10)]

    pruned = await pruner(database, hour).prune_once()

    assert pruned is not None
    assert pruned.events == len(gone) + 1
    left = {r["id"] for r in await query(database, "SELECT id FROM events")}
    assert left == {history_kept, *young}
    assert history_gone not in left


async def test_a_longer_breaker_window_keeps_account_history_longer(database: db.Database) -> None:
    hour = retention.Settings(events=3600.0)
    kept = await add_event(database, "account_failure", NOW - timedelta(hours=50), account=1)
    three_days = retention.Pruner(database, hour, account_history=3 * retention.DAY, now=lambda: NOW)
    assert (await three_days.prune_once()) is not None
    assert [r["id"] for r in await query(database, "SELECT id FROM events")] == [kept]


async def test_settled_reservations_go_once_no_limit_reads_them(database: db.Database) -> None:
    busy = await make(database, "busy", daily_cap=1000)
    quiet = await make(database, "quiet")
    rng = random.Random(0)
    for i in range(5):  # settled, three days ago
        made = await accounts.reserve(database, busy, NOW - timedelta(days=3, seconds=-i), rng)
        assert made.reservation is not None
        assert await accounts.keep(database, made.reservation, made.reserved_at)
    in_flight = await accounts.reserve(database, busy, NOW - timedelta(days=3, seconds=-10), rng)
    only = await accounts.reserve(database, quiet, NOW - timedelta(days=4), rng)
    assert only.reservation is not None
    assert await accounts.keep(database, only.reservation, only.reserved_at)
    today = await accounts.reserve(database, busy, NOW - timedelta(hours=1), rng)
    assert today.reservation is not None
    assert await accounts.keep(database, today.reservation, today.reserved_at)

    pruned = await pruner(database).prune_once()

    assert pruned is not None
    assert pruned.reservations == 5
    left = {r["id"] for r in await query(database, "SELECT id FROM account_reservations")}
    # Not settled: its outcome may still come. The quiet account's latest: its gap runs from it.
    assert left == {in_flight.reservation, only.reservation, today.reservation}
    days = {(r["account"], r["day"]) for r in await query(database, "SELECT account, day FROM account_days")}
    # The day before the cutoff's is over in every time zone; the cutoff's day may not be.
    assert days == {(busy, (NOW - timedelta(days=3)).date()), (busy, NOW.date())}
    assert pruned.days == 1


async def test_one_pruner_at_a_time(database: db.Database) -> None:
    old = NOW - timedelta(days=8)
    for i in range(30):
        await spooled(database, old + timedelta(seconds=i), "delivered")
    other_node = await db.connect_once(database.dsn)
    try:
        assert await other_node.fetchval("retention/lock", retention.LOCK_KEY)
        assert await pruner(database).prune_once() is None
        assert len(await messages(database)) == 30
        # An operator's purge waits for the round of the node that holds it.
        purge = asyncio.create_task(retention.prune(database, pruner(database).cutoffs(), batch=10, wait=True))
        await wait_for_lock_waiter(database)
        assert not purge.done()
    finally:
        await db.close(other_node)  # the node's session ends: its lock goes with it
    purged = await asyncio.wait_for(purge, 10)
    assert purged is not None
    assert purged.messages == 30


async def test_two_pruners_at_once_delete_each_message_once(database: db.Database) -> None:
    old = NOW - timedelta(days=8)
    for i in range(40):
        await spooled(database, old + timedelta(seconds=i), "delivered")
    rounds = await asyncio.gather(pruner(database).prune_once(), pruner(database).prune_once())
    done = [r for r in rounds if r is not None]
    assert done
    assert sum(r.messages for r in done) == 40
    assert await messages(database) == set()


async def wait_for_lock_waiter(database: db.Database) -> None:
    """Until a session waits for an advisory lock (bounded)."""
    waits = (
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    await waiting.eventually_async(lambda: query(database, waits), within=10, every=0.02)


def test_the_first_queue_id_of_a_time_is_below_every_id_made_then_or_later() -> None:
    at = NOW.timestamp()
    bound = retention.first_queue_id(NOW)
    assert all(commit.new_queue_id(at - 0.002) < bound <= commit.new_queue_id(at + d) for d in (0, 0.001, 60))


async def test_expired_idempotency_keys_go_in_the_rounds(database: db.Database) -> None:
    at = NOW - timedelta(hours=2)
    await query(database, "INSERT INTO idempotency_keys (tenant, key, message, expires_at)"
                          " SELECT 't1', 'key:' || n, gen_random_uuid(), $1::timestamptz + n * interval '1 minute'"
                          " FROM generate_series(1, 25) AS n", at)  # fmt: skip
    pruned = await pruner(database).prune_once()  # all expired: the last at NOW - 95 minutes
    assert pruned is not None
    assert pruned.keys == 25
    assert await query(database, "SELECT key FROM idempotency_keys") == []
    await query(database, "INSERT INTO idempotency_keys (tenant, key, message, expires_at)"
                          " VALUES ('t1', 'key:later', gen_random_uuid(), $1)", NOW + timedelta(seconds=1))  # fmt: skip
    kept = await pruner(database).prune_once()
    assert kept is not None
    assert kept.keys == 0


async def test_soft_bounces_go_once_out_of_their_window(database: db.Database) -> None:
    await query(database, "INSERT INTO soft_bounces (event, tenant, address, delivery, at)"
                          " SELECT n, 't1', 'full@example.com', n, $1::timestamptz - n * interval '1 day'"
                          " FROM generate_series(1, 45) AS n", NOW)  # fmt: skip
    month = retention.Pruner(database, WEEK, soft_window=30 * retention.DAY, now=lambda: NOW)
    pruned = await month.prune_once()
    assert pruned is not None
    assert pruned.soft_bounces == 15  # in batches of 10; exactly 30 days ago (n = 30) still counts
    [row] = await query(database, "SELECT count(*) AS n, max(event) AS oldest FROM soft_bounces")
    assert (row["n"], row["oldest"]) == (30, 30)
    early = NOW - timedelta(days=60)
    purged = await retention.purge(database, early, account_history=0.0, batch=10, soft_window=30 * retention.DAY)
    assert purged.soft_bounces == 0  # a purge goes no further than its time, nor into the window
    assert (await pruner(database).prune_once()) is not None  # a pruner told no window keeps them all
    [row] = await query(database, "SELECT count(*) AS n FROM soft_bounces")
    assert row["n"] == 30


async def test_an_index_a_drained_backlog_left_mostly_empty_is_rebuilt(database: db.Database) -> None:
    # 60,000 old events, pruned: the primary key's pages stay, empty, until a rebuild.
    await query(database, "INSERT INTO events (at, kind, message) SELECT $1, 'delivered', gen_random_uuid()"
                          " FROM generate_series(1, 60000)", NOW - timedelta(days=40))  # fmt: skip
    settings = retention.Settings(messages=7 * retention.DAY, events=30 * retention.DAY, batch=5000, reindex=False)
    pruned = await pruner(database, settings).prune_once()
    assert pruned is not None
    assert pruned.events == 60000

    def size(index: str) -> Any:
        return query(database, "SELECT pg_relation_size($1::text::regclass) AS octets", index)

    [big] = await size("events_pkey")
    assert big["octets"] > retention.SPARSE_INDEX_SIZE
    await query(database, "VACUUM (ANALYZE) events")  # what autovacuum does: the statistics say it is empty
    assert (await pruner(database, settings).prune_once() or retention.Pruned()).indexes == 0  # reindex off

    rebuilt = await pruner(database, replace(settings, reindex=True)).prune_once()
    assert rebuilt is not None
    assert rebuilt.indexes >= 2  # events_pkey and events_message
    [small] = await size("events_pkey")
    assert small["octets"] < big["octets"] / 10
    again = await pruner(database, replace(settings, reindex=True)).prune_once()
    assert again is not None
    assert again.indexes == 0  # rebuilt ones are not sparse
