"""Shaping against a receiver that throttles, and the checkpoint in PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from mtad import db
from mtad.deliver import delivery, shaping
from mtad.outbound import limits, outcomes, routing, sessions
from mtad.spool import commit
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, new_message
from tests.integration.spooling import running
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

GROUP = "mx:mx1.sink.test,mx2.sink.test"


@pytest.fixture
async def throttling_sink() -> AsyncIterator[Sink]:
    started = await Sink(("127.0.0.2", "127.0.0.3"), max_per_second=30).start()
    yield started
    await started.stop()


def engine(database: db.Database, sink: Sink, shaper: shaping.Shaper, lim: limits.Limits) -> delivery.Delivery:
    router = routing.Router(ZoneResolver(ZONE), routing.Providers((), lim), port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(
        node="n1", retry=outcomes.RetrySchedule((0.5,), jitter=0), poll_interval=0.1, checkpoint_interval=0.5
    )
    return delivery.Delivery(settings, database, router, pool, RULES, shaper=shaper)


async def test_a_throttling_receiver_slows_mtad_below_its_limit_and_nothing_is_lost(
    database: db.Database, throttling_sink: Sink
) -> None:
    """The sink takes 30 transactions a second and answers 421 4.7.0 beyond; mtad starts
    at 60/s. It backs off, the deferred mail comes back through the same bucket, and
    every message arrives once."""
    lim = limits.Limits(rate=60.0, min_rate=1.0, max_rate=100.0, burst=10, sessions=4, min_sessions=1,
                        step=2.0, factor=0.5, increase_after=10)  # fmt: skip
    total = 150
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(total)))
    shaper = shaping.Shaper()
    mtad = engine(database, throttling_sink, shaper, lim)
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(mtad.run())
        await throttling_sink.wait_until(lambda received: len(received) >= total, within=60)
        mtad.stop()
        await running
    recipients = [r for m in throttling_sink.received for r in m.recipients]
    assert sorted(recipients) == sorted(f"r{i}@sink.test" for i in range(total))  # each once
    states = await query(database, "SELECT state, count(*) AS n FROM deliveries GROUP BY state")
    assert {r["state"]: r["n"] for r in states} == {"delivered": total}

    refused = [at for at, was_refused in throttling_sink.transactions if was_refused]
    [bucket] = shaper.statistics()
    assert refused, "the sink never throttled: the test proves nothing"
    assert bucket.decreases >= 1
    assert bucket.rate < lim.rate  # it came down from where it started
    # Once it had learned (two seconds after the first refusal), mtad's attempts, refused
    # ones included, ran at about the receiver's limit and were rarely refused.
    tail = [(at, was_refused) for at, was_refused in throttling_sink.transactions if at > refused[0] + 2.0]
    assert len(tail) >= 20, "the run ended too soon after the first refusal to tell"
    duration = tail[-1][0] - tail[0][0]
    assert len(tail) / duration <= 30 * 1.1
    assert sum(r for _, r in tail) <= len(tail) * 0.2
    deferred = await query(database, "SELECT count(*) AS n FROM events WHERE kind = 'deferred'")
    assert deferred[0]["n"] == len(refused)  # every refusal was a deferral, later delivered


async def test_buckets_are_checkpointed_and_restored(database: db.Database) -> None:
    lim = limits.Limits(rate=20.0, min_rate=1.0, max_rate=40.0, burst=5, sessions=6, min_sessions=1,
                        step=1.0, factor=0.5, increase_after=5)  # fmt: skip
    first = shaping.Shaper()
    assert first.take("google", "192.0.2.1", lim).go
    first.done("google", "192.0.2.1", throttled=True)
    assert first.take("yahoo", "", lim).go
    first.done("yahoo", "")
    now = datetime.now(UTC)
    await shaping.sync(database, first, "n1", now)

    rows = {r["route_group"]: dict(r) for r in await shaping.listing(database, now - timedelta(minutes=1))}
    assert (rows["google"]["rate"], rows["google"]["sessions"], rows["google"]["changed_by"]) == (10.0, 5, "n1")
    assert rows["yahoo"]["changed_at"] is None  # never learned anything: the configured start

    restarted = shaping.Shaper()
    await shaping.load(database, restarted)
    assert restarted.take("google", "192.0.2.1", lim).go
    assert restarted.take("yahoo", "", lim).go
    state = {b.group: (b.rate, b.sessions) for b in restarted.statistics()}
    assert state == {"google": (10.0, 5), "yahoo": (20.0, 6)}  # Gmail asked for less, and that is remembered


async def test_a_later_change_on_another_node_wins_and_an_older_one_does_not(database: db.Database) -> None:
    lim = limits.Limits(rate=20.0, min_rate=1.0, max_rate=40.0, burst=5, sessions=6, min_sessions=1,
                        step=1.0, factor=0.5, increase_after=1)  # fmt: skip
    clock = [1000.0]
    walls = [datetime(2026, 1, 1, tzinfo=UTC)]
    a = shaping.Shaper(lambda: clock[0], lambda: walls[0])
    b = shaping.Shaper(lambda: clock[0], lambda: walls[0])
    for shaper in (a, b):
        shaper.take("g", "", lim)
    a.done("g", "", throttled=True)  # a learns first: 10/s
    walls[0] += timedelta(seconds=1)
    b.done("g", "", delivered=1)  # b learns later: 21/s
    await shaping.sync(database, a, "a", walls[0])
    await shaping.sync(database, b, "b", walls[0])  # later: replaces a's row
    await shaping.sync(database, a, "a", walls[0])  # a adopts b's
    assert [s.rate for s in a.statistics()] == [21.0]
    [row] = await shaping.listing(database, walls[0] - timedelta(minutes=1))
    assert (row["rate"], row["changed_by"]) == (21.0, "b")


async def test_nodes_share_a_bucket_and_usage_is_listed_for_live_nodes(database: db.Database) -> None:
    lim = limits.Limits(rate=20.0, min_rate=1.0, max_rate=40.0, burst=10, sessions=6, min_sessions=1,
                        step=1.0, factor=0.5, increase_after=5)  # fmt: skip
    now = datetime.now(UTC)
    for node in ("a", "b"):
        await query(database, "INSERT INTO nodes VALUES ($1, 'h', 1, $2, $2)", node, now)
    shaper = shaping.Shaper()
    shaper.set_nodes(2)
    assert sum(shaper.take("g", "", lim).go for _ in range(10)) == 3  # half of 6 sessions
    await shaping.sync(database, shaper, "a", now)
    [row] = await shaping.listing(database, now - timedelta(seconds=30))
    assert (row["nodes"], row["in_flight"]) == (1, 3)
    await shaping.leave(database, "a")
    [row] = await shaping.listing(database, now - timedelta(seconds=30))
    assert (row["nodes"], row["in_flight"]) == (0, 0)


async def test_a_small_tenant_is_not_starved_by_a_big_campaign(database: db.Database) -> None:
    """10,000 messages of one tenant, then 10 of another, all waiting together: the small
    tenant's mail takes turns with the campaign and is out within the first few percent."""
    sink = await Sink(("127.0.0.2", "127.0.0.3")).start()
    try:
        big = [dataclasses.replace(new_message(f"c{i}@sink.test"), tenant="campaign") for i in range(10_000)]
        small = [dataclasses.replace(new_message(f"s{i}@sink.test"), tenant="shop") for i in range(10)]
        async with running(commit.GroupCommitter(database)) as committer:  # committed in batches
            await asyncio.gather(*(committer.commit(m) for m in big))
            await asyncio.gather(*(committer.commit(m) for m in small))
        router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
        pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
        mtad = delivery.Delivery(delivery.Settings(node="n1"), database, router, pool, RULES)
        await mtad.run_until_idle()
    finally:
        await sink.stop()
    arrivals = [r for m in sink.received for r in m.recipients]
    assert len(arrivals) == 10_010
    last_small = max(arrivals.index(f"s{i}@sink.test") for i in range(10))
    assert last_small < 0.03 * len(arrivals), last_small


async def test_mail_that_expired_in_the_queue_bounces_without_waiting_for_a_token(database: db.Database) -> None:
    """A bucket of one message a minute must not hold back bounces of expired mail."""
    lim = limits.Limits(rate=1 / 60, min_rate=1 / 60, max_rate=1 / 60, burst=1, sessions=1, min_sessions=1,
                        step=1 / 60, factor=0.5, increase_after=5)  # fmt: skip
    await accept(database, *(new_message(f"old{i}@sink.test") for i in range(5)))
    later = datetime.now(UTC) + timedelta(days=6)  # past the default max_age of 5 days
    shaper = shaping.Shaper()
    router = routing.Router(ZoneResolver(ZONE), routing.Providers((), lim), port=9)
    pool = sessions.Pool(sessions.Settings(port=9, ehlo_hostname="mtad.test"))
    mtad = delivery.Delivery(delivery.Settings(node="n1"), database, router, pool, RULES, shaper=shaper,
                             now=lambda: later)  # fmt: skip
    async with asyncio.timeout(30):
        await mtad.run_until_idle()
    rows = await query(database, "SELECT state, reason FROM deliveries")
    assert {(r["state"], r["reason"]) for r in rows} == {("bounced", "expired")}
    assert shaper.statistics() == []  # no bucket was asked
