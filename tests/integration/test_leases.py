"""Leases against real PostgreSQL: SKIP LOCKED, renewals, outcomes, the reaper."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from mtad import db
from mtad.base import errors
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.spool import actions, commit, leases, wakeups
from tests.integration.spooling import Collector, message, outcome, running, spool_messages
from tests.pg import query


async def states(database: db.Database) -> dict[int, str]:
    return {r["id"]: r["state"] for r in await query(database, "SELECT id, state::text FROM deliveries")}


async def test_lease_takes_due_deliveries_priority_first_then_oldest(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com", "c@example.com")
    await query(database, "UPDATE deliveries SET priority = 5 WHERE recipient = 'c@example.com'")
    later = datetime.now(UTC) + timedelta(hours=1)
    await query(database, "UPDATE deliveries SET next_attempt_at = $1 WHERE recipient = 'b@example.com'", later)
    leased = await leases.lease(database, "n1", 10, datetime.now(UTC), datetime.now(UTC) + timedelta(minutes=5))
    assert [d.recipient for d in leased] == ["c@example.com", "a@example.com"]  # b is not due
    assert not any(d.maybe_sent for d in leased)
    rows = await query(database, "SELECT recipient, state::text, lease_owner FROM deliveries ORDER BY recipient")
    assert [tuple(r) for r in rows] == [
        ("a@example.com", "leased", "n1"), ("b@example.com", "queued", None), ("c@example.com", "leased", "n1")
    ]  # fmt: skip


async def test_two_nodes_leasing_at_once_never_share_a_delivery(dsn: str) -> None:
    first, second = await db.Database.connect(dsn, max_size=4), await db.Database.connect(dsn, max_size=4)
    try:
        await spool_messages(first, *(f"r{i}@example.com" for i in range(50)), count=10)  # 500 deliveries
        now, until = datetime.now(UTC), datetime.now(UTC) + timedelta(minutes=5)
        taken = await asyncio.gather(*(leases.lease(db_, f"n{i % 2}", 20, now, until)
                                       for i, db_ in enumerate([first, second] * 15)))  # fmt: skip
        ids = [d.id for batch in taken for d in batch]
        assert len(ids) == len(set(ids)) == 500
        owners = await query(first, "SELECT lease_owner, count(*) AS n FROM deliveries GROUP BY lease_owner")
        assert sum(r["n"] for r in owners) == 500
    finally:
        await first.close()
        await second.close()


async def test_renew_and_begin_only_touch_own_leases(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com")
    now = datetime.now(UTC)
    mine = await leases.lease(database, "n1", 1, now, now + timedelta(minutes=1))
    theirs = await leases.lease(database, "n2", 1, now, now + timedelta(minutes=1))
    ids = [mine[0].id, theirs[0].id]
    assert await leases.renew(database, "n1", ids, now + timedelta(minutes=5)) == {mine[0].id}
    attempt = uuid.uuid4()
    begun = await leases.begin(database, "n1", [leases.Attempt(attempt, tuple(ids), "mx:x")], now)
    assert begun == leases.Begun(frozenset({mine[0].id}))  # to send; none suppressed or held
    [row] = await query(database, "SELECT attempt_id, route_group FROM deliveries WHERE id = $1", mine[0].id)
    assert (row["attempt_id"], row["route_group"]) == (attempt, "mx:x")


async def test_a_renewal_waits_for_no_row_another_statement_holds(database: db.Database) -> None:
    """A renewal and a batch of records lock rows in different orders: the renewal
    skips a row that is locked (and counts it held) rather than wait, so the two
    never deadlock."""
    await spool_messages(database, "a@example.com", "b@example.com")
    now = datetime.now(UTC)
    a, b = await leases.lease(database, "n1", 2, now, now + timedelta(minutes=1))
    later = now + timedelta(minutes=5)
    async with database.transaction() as holding:
        await holding._conn.execute("SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE", a.id)
        kept = await asyncio.wait_for(leases.renew(database, "n1", [a.id, b.id], later), 10)
    assert kept == {a.id, b.id}
    found = await query(database, "SELECT id, lease_expires_at FROM deliveries")
    rows = {r["id"]: r["lease_expires_at"] for r in found}
    assert rows[b.id] == later
    assert rows[a.id] < later  # renewed at the next turn, unless its statement let it go


@pytest.mark.parametrize("statement", ["begin", "record", "renew", "unbegin", "release"])
async def test_deliveries_found_by_id_are_found_by_primary_key_alone(database: db.Database, statement: str) -> None:
    """After a drain, statistics say the table is empty: a partial index whose
    predicate matches the statement's state condition (every lease, every due
    delivery) must not be scanned whole to find a batch of deliveries by id."""
    await query(database, "VACUUM ANALYZE deliveries")  # taken while empty, as after a drain
    await spool_messages(database, *(f"r{i}@example.com" for i in range(50)), count=20)
    now = datetime.now(UTC)
    assert len(await leases.lease(database, "n1", 500, now, now + timedelta(minutes=5))) == 500
    text = db.sql(f"leases/{statement}")
    settings = "SET plan_cache_mode = force_generic_plan"
    if statement in ("begin", "record"):  # the statement its function runs, with the function's settings
        text, settings = db.sql(f"leases/{statement}_query"), f"{settings}; SET enable_seqscan = off"
    async with database.connection() as conn:
        arguments = len((await conn._conn.prepare(text)).get_parameters())
        await conn._conn.execute(f"PREPARE probe AS {text}; {settings}")
        rows = await conn._conn.fetch(f"EXPLAIN EXECUTE probe({', '.join(['NULL'] * arguments)})")
        await conn._conn.execute("DEALLOCATE probe; RESET plan_cache_mode; RESET enable_seqscan")
    plan = "\n".join(r[0] for r in rows)
    assert "deliveries_pkey" in plan
    assert "deliveries_lease_expiry" not in plan
    assert "deliveries_due" not in plan


async def test_record_outcomes_with_their_events(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com", "c@example.com")
    now = datetime.now(UTC)
    a, b, c = await leases.lease(database, "n1", 3, now, now + timedelta(minutes=5))
    later = now + timedelta(minutes=5)
    recorded = await leases.record(
        database,
        "n1",
        [
            outcome(a.id, State.DELIVERED, None, Reply(250, "2.0.0", "ok")),
            outcome(b.id, State.DEFERRED, Reason.THROTTLED, Reply(421, "4.7.0", "slow down"), next_attempt_at=later),
            outcome(c.id, State.BOUNCED, Reason.RECIPIENT_REJECTED, Reply(550, "5.1.1", "no such user")),
        ],
        now,
    )
    assert recorded == {a.id, b.id, c.id}
    rows = {r["id"]: r for r in await query(database, "SELECT * FROM deliveries")}
    assert rows[a.id]["state"] == "delivered"
    assert (rows[b.id]["state"], rows[b.id]["reason"], rows[b.id]["next_attempt_at"]) == (
        "deferred",
        "throttled",
        later,
    )
    assert (rows[c.id]["last_code"], rows[c.id]["last_enhanced"], rows[c.id]["last_text"]) == (
        550,
        "5.1.1",
        "no such user",
    )
    assert all(r["attempts"] == 1 and r["lease_owner"] is None and r["attempt_id"] is None for r in rows.values())
    kinds = [
        r["kind"] for r in await query(database, "SELECT kind FROM events WHERE delivery IS NOT NULL ORDER BY delivery")
    ]
    assert kinds == ["delivered", "deferred", "bounced"]


async def test_a_node_cannot_record_over_a_lease_it_lost(database: db.Database) -> None:
    await spool_messages(database, "a@example.com")
    now = datetime.now(UTC)
    [d] = await leases.lease(database, "n1", 1, now, now + timedelta(minutes=5))
    assert await leases.record(database, "n2", [outcome(d.id, State.DELIVERED, None, None)], now) == set()
    assert (await states(database))[d.id] == "leased"
    with pytest.raises(errors.IllegalTransition):
        await leases.record(database, "n1", [outcome(d.id, State.CANCELLED, Reason.ADMIN, None)], now)


async def test_expired_leases_are_reaped_and_say_whether_they_may_have_been_sent(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com")
    now = datetime.now(UTC)
    a, b = await leases.lease(database, "dead-node", 2, now, now + timedelta(seconds=30))
    await leases.begin(database, "dead-node", [leases.Attempt(uuid.uuid4(), (a.id,), "g")], now)  # a was on the wire
    assert await leases.reap(database, now) == 0  # not expired yet
    assert await leases.reap(database, now + timedelta(minutes=1)) == 2
    assert set((await states(database)).values()) == {"queued"}
    events = {
        r["delivery"]: r["data"]
        for r in await query(database, "SELECT delivery, data::text FROM events WHERE kind = 'requeued'")
    }
    assert '"maybe_sent": true' in events[a.id]
    assert '"maybe_sent": false' in events[b.id]
    again = await leases.lease(database, "n2", 2, now + timedelta(minutes=1), now + timedelta(minutes=6))
    assert {d.id: d.maybe_sent for d in again} == {a.id: True, b.id: False}


async def test_release_hands_back_what_was_not_started(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com")
    now = datetime.now(UTC)
    a, b = await leases.lease(database, "n1", 2, now, now + timedelta(minutes=5))
    await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (a.id,), "g")], now)
    assert len(await leases.release(database, "n1", [a.id, b.id], now)) == 1
    assert await states(database) == {a.id: "leased", b.id: "queued"}


async def test_operator_actions(database: db.Database) -> None:
    [queue_id] = await spool_messages(database, "a@example.com", "b@example.com", "c@example.com")
    now = datetime.now(UTC)
    await query(database, "UPDATE deliveries SET state = 'deferred', next_attempt_at = $1", now + timedelta(hours=1))
    ids = sorted(await states(database))
    changed, untouched = await actions.act_on(database, "retry", str(ids[0]), now)
    assert (changed, untouched) == ([ids[0]], [])
    [row] = await query(database, "SELECT state::text, next_attempt_at FROM deliveries WHERE id = $1", ids[0])
    assert (row["state"], row["next_attempt_at"]) == ("queued", now)
    await leases.lease(database, "n1", 1, now, now + timedelta(minutes=5))  # ids[0] is now in flight
    changed, untouched = await actions.act_on(database, "cancel", str(queue_id), now)
    assert changed == ids[1:]
    assert untouched == [{"id": ids[0], "state": "leased"}]
    assert (await states(database))[ids[2]] == "cancelled"
    with pytest.raises(errors.NotFound):
        await actions.act_on(database, "bounce", "424242", now)


async def test_accepted_deliveries_take_the_fast_path(database: db.Database) -> None:
    collector = Collector()
    async with running(commit.GroupCommitter(database, fast_path=collector)) as committer:
        msg = message("a@example.com", "b@example.net", key="key:once")
        await committer.commit(msg)
        await committer.commit(commit.NewMessage(**{**_fields(msg), "id": commit.new_queue_id()}))  # a duplicate
    assert [(d.message.id, d.recipient, d.domain) for d in collector.deliveries] == [
        (msg.id, "a@example.com", "example.com"), (msg.id, "b@example.net", "example.net")
    ]  # fmt: skip
    rows = await query(database, "SELECT state::text, lease_owner FROM deliveries")
    assert {(r["state"], r["lease_owner"]) for r in rows} == {("leased", "n1")}


def _fields(msg: commit.NewMessage) -> dict[str, object]:
    return {name: getattr(msg, name) for name in msg.__dataclass_fields__}


async def test_the_reaper_takes_back_every_expired_lease_not_a_slice(database: db.Database) -> None:
    await spool_messages(database, *(f"r{i}@example.com" for i in range(25)))
    now = datetime.now(UTC)
    assert len(await leases.lease(database, "dead-node", 25, now, now + timedelta(seconds=30))) == 25
    assert await leases.reap(database, now + timedelta(minutes=1), batch=10) == 25  # three statements, one call
    assert set((await states(database)).values()) == {"queued"}


async def test_a_restarted_node_takes_back_what_its_previous_life_held(database: db.Database) -> None:
    await spool_messages(database, "a@example.com", "b@example.com", "c@example.com")
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    a, b = await leases.lease(database, "n1", 2, now, now + timedelta(minutes=5))
    [c] = await leases.lease(database, "n2", 1, now, now + timedelta(minutes=5))
    await query(database, "UPDATE deliveries SET next_attempt_at = $1 WHERE id = $2", later, b.id)
    await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (a.id,), "g")], now)  # a was on the wire
    assert await leases.reclaim(database, "n1", now + timedelta(seconds=1)) == 2
    rows = {r["id"]: r for r in await query(database, "SELECT id, state::text, reason::text, lease_owner, "
                                                      "next_attempt_at FROM deliveries")}  # fmt: skip
    assert {i: (rows[i]["state"], rows[i]["reason"]) for i in (a.id, b.id)} == {
        a.id: ("queued", "reclaimed"), b.id: ("queued", "reclaimed")
    }  # fmt: skip
    assert rows[b.id]["next_attempt_at"] == now + timedelta(seconds=1)  # due at once, not in an hour
    assert (rows[c.id]["state"], rows[c.id]["lease_owner"]) == ("leased", "n2")  # another node's: untouched
    events = {
        r["delivery"]: r["data"]
        for r in await query(database, "SELECT delivery, data::text FROM events WHERE kind = 'requeued'")
    }
    assert '"maybe_sent": true' in events[a.id]
    assert '"reclaimed"' in events[b.id]
    again = await leases.lease(database, "n1", 5, now + timedelta(seconds=2), now + timedelta(minutes=6))
    assert {d.id: d.maybe_sent for d in again} == {a.id: True, b.id: False}


async def test_an_attempt_ends_only_in_an_outcome_a_lease_handed_back_is_released(database: db.Database) -> None:
    await spool_messages(database, "a@example.com")
    now = datetime.now(UTC)
    [a] = await leases.lease(database, "n1", 1, now, now + timedelta(minutes=5))
    with pytest.raises(errors.IllegalTransition, match="release"):
        await leases.record(database, "n1", [outcome(a.id, State.QUEUED, Reason.RELEASED, None)], now)
    assert await states(database) == {a.id: "leased"}


class Heard:
    """The notifications of mtad_events, in the order PostgreSQL sends them (commit order)."""

    def __init__(self) -> None:
        self.payloads: asyncio.Queue[str] = asyncio.Queue()

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self.payloads.put_nowait(payload)

    async def until_marker(self, database: db.Database) -> list[str]:
        """What came before a marker notified now (so in commit order after all that was)."""
        await query(database, "SELECT pg_notify('mtad_events', 'marker')")
        heard = []
        while (payload := await asyncio.wait_for(self.payloads.get(), 10)) != "marker":
            heard.append(payload)
        return heard


async def test_the_busy_writers_wake_the_consumers_after_their_commit_not_in_it(
    database: db.Database, dsn: str
) -> None:
    """A NOTIFY holds a cluster-wide lock through its transaction's WAL flush: accept,
    begin and record leave it out; accept notifies once committed, with one
    notification (two would mean its own transaction notified too), and record's
    caller does (wakeups.Spaced)."""
    heard, listening = Heard(), await asyncpg.connect(dsn)
    await listening.add_listener("mtad_events", heard)
    try:
        await spool_messages(database, "a@example.com")
        assert await heard.until_marker(database) == [""]  # accept: its `received` event
        now = datetime.now(UTC)
        [d] = await leases.lease(database, "n1", 1, now, now + timedelta(minutes=5))
        await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (d.id,), "g")], now)
        assert await heard.until_marker(database) == []  # no event written: nobody woken
        await leases.record(database, "n1", [outcome(d.id, State.DELIVERED, None, Reply(250, "2.0.0", "ok"))], now)
        assert await heard.until_marker(database) == []
        await query(database, "INSERT INTO events (at, kind) VALUES (now(), 'received')")  # any other writer
        assert await heard.until_marker(database) == [""]
    finally:
        await listening.close()


async def test_wakeups_asked_for_batch_after_batch_share_a_notify(database: db.Database, dsn: str) -> None:
    """The record's wake-ups: those asked for before one goes share it, and one asked
    for while it is on its way or spaced is sent after it, never dropped."""
    heard, listening = Heard(), await asyncpg.connect(dsn)
    await listening.add_listener("mtad_events", heard)
    try:
        async with asyncio.TaskGroup() as tasks:
            spaced = wakeups.Spaced(database, tasks.create_task)
            for _ in range(100):
                spaced.consumers()
        assert await heard.until_marker(database) == [""]
        async with asyncio.TaskGroup() as tasks:
            spaced = wakeups.Spaced(database, tasks.create_task)
            spaced.consumers()
            assert await asyncio.wait_for(heard.payloads.get(), 10) == ""
            spaced.consumers()  # after the first went: the next follows it
        assert await heard.until_marker(database) == [""]
    finally:
        await listening.close()
