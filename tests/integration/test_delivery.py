"""Delivery end to end inside one process: spool -> lease -> route -> sink -> outcome."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from prometheus_client import REGISTRY

from mtad import db
from mtad.deliver import delivery
from mtad.outbound import routing, sessions
from mtad.spool import commit, leases
from tests import waiting
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, deliveries, engine, new_message
from tests.integration.spooling import running
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

CONF = Path(__file__).parents[2] / "conf"


async def test_a_message_reaches_the_first_mx_and_is_recorded(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("a@sink.test", "b@sink.test", "c@other.test"))
    await engine(database, sink).run_until_idle()
    assert sorted(sorted(m.recipients) for m in sink.received) == [["a@sink.test", "b@sink.test"], ["c@other.test"]]
    assert {m.local for m in sink.received if "a@sink.test" in m.recipients} == {"127.0.0.2"}  # preference 10
    rows = await deliveries(database)
    assert {r["state"] for r in rows.values()} == {"delivered"}
    assert rows["a@sink.test"]["route_group"] == "mx:mx1.sink.test,mx2.sink.test"
    assert (rows["a@sink.test"]["last_code"], rows["a@sink.test"]["attempts"]) == (250, 1)
    [event] = await query(database, "SELECT data, tenant FROM events WHERE kind = 'delivered' AND delivery = $1",
                          rows["a@sink.test"]["id"])  # fmt: skip
    assert event["tenant"] == "t1"  # the job's, carried from the spool
    assert '"mx": "mx1.sink.test"' in event["data"]
    assert '"reply": "250 2.0.0 Ok: queued"' in event["data"]


async def test_each_recipient_gets_its_own_outcome(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("ok@sink.test", "tempfail-1@sink.test", "reject-1@sink.test"),
                 new_message("content-1@other.test"))  # fmt: skip
    before = datetime.now(UTC)
    await engine(database, sink).run_until_idle()
    rows = await deliveries(database)
    assert rows["ok@sink.test"]["state"] == "delivered"
    deferred = rows["tempfail-1@sink.test"]
    assert (deferred["state"], deferred["reason"], deferred["last_code"]) == ("deferred", "mx_tempfail", 451)
    assert deferred["next_attempt_at"] >= before + timedelta(seconds=59)  # type: ignore[operator]
    assert (rows["reject-1@sink.test"]["state"], rows["reject-1@sink.test"]["reason"]) == (
        "bounced",
        "recipient_rejected",
    )
    assert (rows["content-1@other.test"]["state"], rows["content-1@other.test"]["reason"]) == (
        "bounced",
        "content_rejected",
    )


async def test_a_deferral_then_a_delivery(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("flaky-1@sink.test"))
    clock = [datetime.now(UTC)]
    mtad = engine(database, sink, now=lambda: clock[0])
    await mtad.run_until_idle()
    assert (await deliveries(database))["flaky-1@sink.test"]["state"] == "deferred"
    await mtad.run_until_idle()  # not due yet: nothing happens
    assert sink.received == []
    clock[0] += timedelta(seconds=61)
    await mtad.run_until_idle()
    row = (await deliveries(database))["flaky-1@sink.test"]
    assert (row["state"], row["attempts"]) == ("delivered", 2)
    kinds = [r["kind"] for r in await query(database, "SELECT kind FROM events WHERE delivery IS NOT NULL ORDER BY id")]
    assert kinds == ["deferred", "delivered"]


async def test_the_records_say_where_each_attempts_time_went(database: db.Database, sink: Sink) -> None:
    message = new_message("flaky-1@sink.test", "nobody@nullmx.test")
    await accept(database, message)
    clock = [message.received_at + timedelta(seconds=100)]  # the first attempt starts 100 s after accept
    mtad = engine(database, sink, now=lambda: clock[0])
    with structlog.testing.capture_logs() as logs:
        await mtad.run_until_idle()
        clock[0] += timedelta(seconds=61)  # the retry was due 60 s after the first attempt: 1 s ago
        await mtad.run_until_idle()
    records = [r for r in logs if r["event"] in ("delivered", "deferred", "bounced")]
    first, retry = (r for r in records if r["recipient"] == "flaky-1@sink.test")
    [routeless] = (r for r in records if r["recipient"] == "nobody@nullmx.test")
    for record in records:
        assert (record["message_id"], record["sender"]) == (message.message_id, message.sender)
        assert record["size"] == len(message.body)
    assert (first["event"], first["code"], first["status"], first["attempt_number"]) == ("deferred", 451, "4.3.0", 1)
    assert (first["domain"], first["cipher"]) == ("sink.test", None)  # the sink offers no STARTTLS
    assert (first["delays"]["queue"], first["delays"]["tls"]) == (100.0, 0.0)
    assert first["delays"]["connect"] > 0
    assert first["delays"]["transfer"] > 0
    assert first["duration"] >= first["delays"]["connect"] + first["delays"]["transfer"]
    assert (retry["event"], retry["code"], retry["attempt_number"]) == ("delivered", 250, 2)
    assert retry["delays"]["queue"] == 1.0  # from when it was due, not from accept
    assert (retry["delays"]["connect"], retry["delays"]["tls"]) == (0.0, 0.0)  # over the first attempt's session
    assert retry["duration"] >= retry["delays"]["transfer"] > 0
    # Routing failed: no attempt, nothing measured.
    assert (routeless["event"], routeless["reason"], routeless["domain"]) == ("bounced", "no_route", "nullmx.test")
    assert routeless["attempt_number"] == 1
    assert [routeless[f] for f in ("attempt", "code", "duration", "delays", "tls", "cipher")] == [None] * 6


async def test_outcomes_are_counted_by_source_and_tenant_and_timed(database: db.Database, sink: Sink) -> None:
    message = new_message("ok@sink.test", "reject-1@sink.test", "tempfail-1@sink.test")
    await accept(database, message)
    later = message.received_at + timedelta(seconds=100)  # the attempt starts 100 s after accept
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test", source_address="127.0.0.1"))
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    mtad = delivery.Delivery(delivery.Settings(node="n1"), database, router, pool, RULES, now=lambda: later)

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    wanted = {
        ("mtad_delivery_source_outcomes_total", ("delivered", "127.0.0.1")): 1,
        ("mtad_delivery_source_outcomes_total", ("bounced", "127.0.0.1")): 1,
        ("mtad_delivery_source_outcomes_total", ("deferred", "127.0.0.1")): 1,
        ("mtad_delivery_tenant_outcomes_total", ("delivered", "t1")): 1,
        ("mtad_delivery_tenant_outcomes_total", ("bounced", "t1")): 1,
        ("mtad_delivery_tenant_outcomes_total", ("deferred", "t1")): 1,
    }

    def counts() -> dict[tuple[str, tuple[str, str]], float]:
        return {
            (name, (outcome, key)): sample(name, outcome=outcome, **{"source" if "source" in name else "tenant": key})
            for name, (outcome, key) in wanted
        }

    other = {"group": "other"}  # a receiver of no provider group
    waits = (sample("mtad_delivery_queue_wait_seconds_count", **other),
             sample("mtad_delivery_queue_wait_seconds_sum", **other),
             sample("mtad_delivery_queue_wait_seconds_bucket", le="60.0", **other))  # fmt: skip
    latencies = {o: sample("mtad_delivery_latency_seconds_count", outcome=o, **other) for o in ("delivered", "bounced")}
    before = counts()
    await mtad.run_until_idle()

    assert {k: v - before[k] for k, v in counts().items()} == wanted
    count, total, under_a_minute = waits
    # Each recipient's first attempt, 100 s after accept: above the 60 s bucket.
    assert sample("mtad_delivery_queue_wait_seconds_count", **other) == count + 3
    assert sample("mtad_delivery_queue_wait_seconds_sum", **other) - total == pytest.approx(300)
    assert sample("mtad_delivery_queue_wait_seconds_bucket", le="60.0", **other) == under_a_minute
    # Delivered and bounced are final; the deferral is not.
    assert {o: sample("mtad_delivery_latency_seconds_count", outcome=o, **other) - n for o, n in latencies.items()} == {
        "delivered": 1,
        "bounced": 1,
    }
    assert sample("mtad_delivery_latency_seconds_count", outcome="deferred", **other) == 0


async def test_routes_that_fail(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("a@nullmx.test", "b@broken.test", "c@down.test"))
    await engine(database, sink).run_until_idle()
    rows = await deliveries(database)
    assert (rows["a@nullmx.test"]["state"], rows["a@nullmx.test"]["reason"]) == ("bounced", "no_route")
    assert (rows["b@broken.test"]["state"], rows["b@broken.test"]["reason"]) == ("deferred", "dns_tempfail")
    assert (rows["c@down.test"]["state"], rows["c@down.test"]["reason"]) == ("deferred", "connect_failed")


async def test_too_old_is_bounced_without_an_attempt(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("old@sink.test"))
    later = datetime.now(UTC) + timedelta(days=6)
    await engine(database, sink, now=lambda: later).run_until_idle()
    row = (await deliveries(database))["old@sink.test"]
    assert (row["state"], row["reason"]) == ("bounced", "expired")
    assert sink.connections == 0


async def test_a_send_cut_by_a_crash_is_retried_and_flagged(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("a@sink.test"))
    now = datetime.now(UTC)
    [leased] = await leases.lease(database, "crashed", 1, now, now + timedelta(seconds=1))
    await leases.begin(database, "crashed", [leases.Attempt(uuid.uuid4(), (leased.id,), "g")], now)
    assert await leases.reap(database, now + timedelta(seconds=5)) == 1
    await engine(database, sink).run_until_idle()
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'delivered'")
    assert '"maybe_duplicate": true' in event["data"]
    assert len(sink.received) == 1


async def test_two_nodes_never_send_the_same_delivery(dsn: str, sink: Sink) -> None:
    first, second = await db.Database.connect(dsn, max_size=4), await db.Database.connect(dsn, max_size=4)
    try:
        await accept(first, *(new_message(f"r{i}@sink.test") for i in range(60)))
        await asyncio.gather(engine(first, sink, node="n1", lease_batch=7).run_until_idle(),
                             engine(second, sink, node="n2", lease_batch=7).run_until_idle())  # fmt: skip
        got = sink.recipients()
        assert sorted(got) == sorted(f"r{i}@sink.test" for i in range(60))  # each exactly once
        assert {r["state"] for r in (await deliveries(first)).values()} == {"delivered"}
    finally:
        await first.close()
        await second.close()


async def test_the_fast_path_and_an_orderly_stop(database: db.Database, sink: Sink) -> None:
    mtad = engine(database, sink, shutdown_timeout=10)
    runner = asyncio.create_task(mtad.run())
    try:
        async with running(commit.GroupCommitter(database, fast_path=mtad)) as committer:
            await committer.commit(new_message("fast@sink.test"))
            await mtad.wait_idle()
            assert (await deliveries(database))["fast@sink.test"]["state"] == "delivered"
            assert mtad.statistics().leased == 0  # never leased: the accept path handed it over
            await committer.commit(new_message("slow-1@sink.test", "waiting@down.test"))
            await sink.holding.wait()
    finally:
        mtad.stop()  # slow-1 is on the wire, held by the sink
        sink.release()  # and finishes within the shutdown timeout
        await runner
    rows = await deliveries(database)
    assert rows["slow-1@sink.test"]["state"] == "delivered"
    assert rows["waiting@down.test"]["state"] in ("queued", "deferred")  # handed back, or tried once
    assert all(r["lease_owner"] is None for r in rows.values())


async def test_repeated_failures_of_mtad_itself_end_as_a_dead_letter(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("a@sink.test"))
    await query(database, "DELETE FROM messages")  # the body is gone: mtad cannot send it
    clock = [datetime.now(UTC)]
    mtad = engine(database, sink, now=lambda: clock[0], max_failures=2)
    await mtad.run_until_idle()
    row = (await deliveries(database))["a@sink.test"]
    assert (row["state"], row["reason"], row["failures"]) == ("deferred", "internal", 1)
    clock[0] += timedelta(seconds=61)
    await mtad.run_until_idle()
    row = (await deliveries(database))["a@sink.test"]
    assert (row["state"], row["reason"], row["failures"]) == ("failed", "internal", 2)
    assert sink.connections == 0


async def test_a_full_node_leaves_new_deliveries_queued_for_any_node(database: db.Database, sink: Sink) -> None:
    mtad = engine(database, sink, max_held=1)
    async with running(commit.GroupCommitter(database, fast_path=mtad)) as committer:
        await committer.commit(new_message("first@down.test"))  # held (run() has not started)
        await committer.commit(new_message("second@down.test"))  # no room: queued
    rows = await deliveries(database)
    assert (rows["first@down.test"]["state"], rows["first@down.test"]["lease_owner"]) == ("leased", "n1")
    assert (rows["second@down.test"]["state"], rows["second@down.test"]["lease_owner"]) == ("queued", None)


async def test_bodies_beyond_the_body_cache_are_read_when_sent(database: db.Database, sink: Sink) -> None:
    """Whatever max_held is, only body_cache bytes of bodies are held: the rest are read
    from the spool when their message is sent, and every message goes out whole."""

    def body(i: int) -> bytes:
        return f"Subject: m{i}\r\n\r\n".encode() + (bytes([65 + i]) * 98 + b"\r\n") * 10

    mtad = engine(database, sink, body_cache=2500)  # room for about two bodies
    async with running(commit.GroupCommitter(database, fast_path=mtad)) as committer:  # handed over, held early
        for i in range(4):
            await committer.commit(new_message(f"fast{i}@sink.test", body=body(i)))
    assert mtad.statistics().body_bytes <= 2500
    await accept(database, *(new_message(f"leased{i}@sink.test", body=body(4 + i)) for i in range(4)))
    await mtad.run_until_idle()
    sent = {m.recipients[0]: m.data for m in sink.received}
    assert len(sent) == 8
    for i in range(4):
        assert sent[f"fast{i}@sink.test"].endswith(body(i))
        assert sent[f"leased{i}@sink.test"].endswith(body(4 + i))
    assert mtad.statistics().body_bytes == 0  # nothing held once everything is sent


async def test_a_send_slower_than_the_lease_keeps_its_lease_and_goes_once(database: db.Database, sink: Sink) -> None:
    mtad = engine(database, sink, lease_duration=0.6, shutdown_timeout=10)  # renewed every 0.2 s, reaped at 0.3
    runner = asyncio.create_task(mtad.run())
    try:
        async with running(commit.GroupCommitter(database, fast_path=mtad)) as committer:
            await committer.commit(new_message("slow-1@sink.test"))
            await sink.holding.wait()  # on the wire; the receiver holds its answer
            [first] = await query(database, "SELECT lease_expires_at FROM deliveries")

            async def outlived() -> bool:  # its first lease is long over, and it is still leased
                [row] = await query(database, "SELECT lease_expires_at FROM deliveries")
                return row["lease_expires_at"] is not None and row["lease_expires_at"] > first["lease_expires_at"] + (
                    timedelta(seconds=1.2)
                )

            await waiting.eventually_async(outlived, within=20)
            sink.release()
            await mtad.wait_idle()
    finally:
        mtad.stop()
        sink.release()
        await runner
    assert len(sink.received) == 1
    assert (await deliveries(database))["slow-1@sink.test"]["state"] == "delivered"
    assert await query(database, "SELECT 1 FROM events WHERE kind = 'requeued'") == []
