"""An operator's suspensions and reroutes, honoured by delivery against real
PostgreSQL and a real SMTP sink: mail of a suspended provider group, tenant, pool
or source address waits (queued, due when the suspension ends) and goes when it
is resumed; a suspended address is left out of its pool; a reroute sends a
provider group's mail from another pool; a suspended account is disabled; a send
begun after a suspension is set aside whatever the node's view of it; a command
over HTTP answers once the live nodes hold it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.admin import control
from mtad.deliver import delivery, egress
from mtad.mailboxes import accounts
from mtad.outbound import outcomes, routing, sessions
from mtad.spool import controls, leases, nodes, suspensions
from tests.integration.admin_api import serving
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, new_message
from tests.integration.mailboxes import make
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

GROUP = "mx:mx1.sink.test,mx2.sink.test"
A, B, C = "127.0.0.10", "127.0.0.11", "127.0.0.12"
POOLS = egress.Egress({"bulk": egress.PoolSettings("bulk", (C,)),
                       "pair": egress.PoolSettings("pair", (A, B), egress.Policy.ROUND_ROBIN)})  # fmt: skip


async def engine(database: db.Database, sink: Sink, **kw: Any) -> delivery.Delivery:
    """An engine that has read the suspensions in force now."""
    controls = suspensions.Controls(database)
    await controls.load(datetime.now(UTC))
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0), **kw)
    return delivery.Delivery(settings, database, router, pool, RULES, pools=egress.Egress(POOLS.pools),
                             controls=controls)  # fmt: skip


async def waiting(database: db.Database) -> list[tuple[str, datetime]]:
    rows = await query(database, "SELECT state::text, next_attempt_at FROM deliveries ORDER BY id")
    return [(r["state"], r["next_attempt_at"]) for r in rows]


async def test_a_suspended_provider_groups_mail_waits_until_resumed(database: db.Database, sink: Sink) -> None:
    now = datetime.now(UTC)
    await suspensions.suspend(database, "provider", GROUP, "deferring everything", None, now)
    await accept(database, new_message("a@sink.test"), new_message("b@sink.test"))
    await (await engine(database, sink)).run_until_idle()
    assert sink.received == []
    assert [state for state, _ in await waiting(database)] == ["queued", "queued"]
    assert all(due.year == 9999 or due == datetime.max for _, due in await waiting(database))  # infinity
    [event, _] = await query(database, "SELECT data FROM events WHERE kind = 'requeued' ORDER BY id")
    said = json.loads(event["data"])
    assert (said["reason"], said["suspended"], said["key"], said["why"]) == (
        "suspended", "provider", GROUP, "deferring everything")  # fmt: skip
    [listed], _ = await suspensions.listing(database, now)
    assert (listed.kind, listed.key, listed.until) == ("provider", GROUP, None)

    assert await suspensions.resume(database, "provider", GROUP, datetime.now(UTC)) == 2
    assert await suspensions.resume(database, "provider", GROUP, datetime.now(UTC)) is None
    await (await engine(database, sink)).run_until_idle()
    assert sorted(sink.recipients()) == ["a@sink.test", "b@sink.test"]


async def test_a_tenant_suspended_for_a_while_is_due_when_it_ends_or_when_resumed(
    database: db.Database, sink: Sink
) -> None:
    now = datetime.now(UTC)
    until = now + timedelta(hours=2)
    await suspensions.suspend(database, "tenant", "t1", "a bad list", until, now)
    await accept(database, new_message("a@sink.test"))
    await (await engine(database, sink)).run_until_idle()
    assert await waiting(database) == [("queued", until)]
    assert await suspensions.resume(database, "tenant", "t1", datetime.now(UTC)) == 1  # early: due now
    await (await engine(database, sink)).run_until_idle()
    assert sink.recipients() == ["a@sink.test"]


async def test_a_suspended_address_is_left_out_of_its_pool_and_a_pool_of_none_waits(
    database: db.Database, sink: Sink
) -> None:
    now = datetime.now(UTC)
    await suspensions.suspend(database, "source", A, "listed on a block list", None, now)
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(4)))
    await (await engine(database, sink, default_pool="pair")).run_until_idle()
    assert Counter(m.peer for m in sink.received) == {B: 4}

    await suspensions.suspend(database, "source", C, "listed too", None, now)
    await accept(database, new_message("bulk@sink.test"))
    await (await engine(database, sink, default_pool="bulk")).run_until_idle()  # its one address is suspended
    assert "bulk@sink.test" not in sink.recipients()
    await suspensions.suspend(database, "pool", "pair", "maintenance", None, now)
    await accept(database, new_message("pair@sink.test"))
    await (await engine(database, sink, default_pool="pair")).run_until_idle()
    assert len(sink.received) == 4
    held = await query(database, "SELECT data FROM events WHERE kind = 'requeued' ORDER BY id")
    assert [(json.loads(e["data"])["suspended"], json.loads(e["data"])["key"]) for e in held] == [
        ("source", C), ("pool", "pair")]  # fmt: skip


async def test_a_reroute_sends_a_groups_mail_from_another_pool_until_it_ends(database: db.Database, sink: Sink) -> None:
    now = datetime.now(UTC)
    await suspensions.reroute(database, GROUP, "bulk", "pair is throttled", None, now)
    await accept(database, new_message("a@sink.test"))
    await (await engine(database, sink, default_pool="pair")).run_until_idle()
    assert [m.peer for m in sink.received] == [C]
    [delivered] = await query(database, "SELECT data FROM events WHERE kind = 'delivered'")
    assert json.loads(delivered["data"])["pool"] == "bulk"
    _, [rerouted] = await suspensions.listing(database, now)
    assert (rerouted.provider, rerouted.pool) == (GROUP, "bulk")
    assert await suspensions.unroute(database, GROUP) is not None
    assert await suspensions.listing(database, now) == ([], [])


async def test_what_ended_is_no_longer_in_force(database: db.Database) -> None:
    now = datetime.now(UTC)
    await suspensions.suspend(database, "provider", "google", "an hour", now + timedelta(hours=1), now)
    await suspensions.reroute(database, "google", "bulk", "an hour", now + timedelta(hours=1), now)
    later = now + timedelta(hours=2)
    assert await suspensions.listing(database, later) == ([], [])
    controls = suspensions.Controls(database)
    await controls.load(now)
    assert controls.suspended("provider", "google", now) is not None
    assert controls.suspended("provider", "google", later) is None
    assert controls.rerouted("google", later) is None


async def test_a_suspended_account_is_disabled_until_resumed(database: db.Database) -> None:
    await make(database, "box")
    now = datetime.now(UTC)
    await control.suspend(database, "account", "box", "its provider complained", now + timedelta(hours=1), now)
    account = await accounts.get(database, "box")
    assert (account.state, account.state_until) == (accounts.State.DISABLED, now + timedelta(hours=1))
    assert await control.resume(database, "account", "box", now) == 0
    assert (await accounts.get(database, "box")).state is accounts.State.ACTIVE


async def test_a_node_whose_view_is_behind_does_not_send_what_was_suspended(database: db.Database, sink: Sink) -> None:
    """The engine read the controls before the suspension: where the send is handed
    out (leases/begin.sql) the suspension is found all the same, the delivery set
    aside, and the engine reads the controls again."""
    behind = await engine(database, sink)
    now = datetime.now(UTC)
    await suspensions.suspend(database, "provider", GROUP, "an incident", None, now)
    await accept(database, new_message("a@sink.test"))
    await behind.run_until_idle()
    assert sink.received == []
    assert [state for state, _ in await waiting(database)] == ["queued"]
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'requeued'")
    said = json.loads(event["data"])
    assert (said["suspended"], said["key"], said["until"], said["before_attempt"]) == ("provider", GROUP, None, True)
    assert await suspensions.resume(database, "provider", GROUP, datetime.now(UTC)) == 1
    await behind.run_until_idle()  # its view was read again: nothing held now
    assert sink.recipients() == ["a@sink.test"]


async def test_the_begin_of_a_send_checks_every_kind_of_control(database: db.Database) -> None:
    now = datetime.now(UTC)
    until = now + timedelta(hours=2)
    box = await make(database, "box")
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(7)))
    ids = sorted(d.id for d in await leases.lease(database, "n1", 7, now + timedelta(minutes=1), until))
    await suspensions.suspend(database, "provider", "held-group", "incident", None, now)
    await suspensions.suspend(database, "tenant", "held-tenant", "a bad list", until, now)
    await suspensions.suspend(database, "pool", "held-pool", "maintenance", None, now)
    await suspensions.suspend(database, "source", A, "listed", None, now)
    await accounts.disable(database, "box", "its owner asked", now)
    await suspensions.reroute(database, "rerouted", "bulk", "pair is throttled", None, now)
    attempts = [
        leases.Attempt(uuid.uuid4(), (ids[0],), "held-group", "t1"),
        leases.Attempt(uuid.uuid4(), (ids[1],), GROUP, "held-tenant"),
        leases.Attempt(uuid.uuid4(), (ids[2],), GROUP, "t1", "held-pool", C),
        leases.Attempt(uuid.uuid4(), (ids[3],), GROUP, "t1", "pair", A),  # another address of the pool may send it
        leases.Attempt(uuid.uuid4(), (ids[4],), "accounts:p", "t1", None, None, box),  # another account may
        leases.Attempt(uuid.uuid4(), (ids[5],), "rerouted", "t1", "pair", B),  # from the reroute's pool
        leases.Attempt(uuid.uuid4(), (ids[6],), "rerouted", "t1", "bulk", C),  # as the reroute says: sent
    ]
    begun = await leases.begin(database, "n1", attempts, now)
    assert (begun.owned, begun.set_aside) == ({ids[6]}, set(ids[:6]))
    rows = await query(database, "SELECT id, state::text, next_attempt_at, lease_owner, route_group FROM deliveries "
                                  "WHERE id = ANY($1) ORDER BY id", ids[:6])  # fmt: skip
    assert [(r["state"], r["lease_owner"]) for r in rows] == [("queued", None)] * 6
    due = [r["next_attempt_at"] for r in rows]
    assert due[0].year == due[2].year == 9999 or due[0] == due[2] == datetime.max  # until resumed
    assert due[1:2] + due[3:] == [until, now, now, now]  # when it ends; or now, to leave another way
    assert rows[4]["route_group"] == "accounts:p"
    events = await query(database, "SELECT delivery, data FROM events WHERE kind = 'requeued' ORDER BY delivery")
    said = [json.loads(e["data"]) for e in events]
    assert [(s["reason"], s.get("suspended") or s.get("account") or s.get("pool")) for s in said] == [
        ("suspended", "provider"), ("suspended", "tenant"), ("suspended", "pool"), ("suspended", "source"),
        ("account_disabled", "box"), ("rerouted", "bulk")]  # fmt: skip
    assert said[1]["why"] == "a bad list"
    # Resumed, what was set aside until then is due (the pool's too: it is set aside again when taken).
    assert await suspensions.resume(database, "provider", "held-group", datetime.now(UTC)) == 2
    assert await suspensions.resume(database, "tenant", "held-tenant", datetime.now(UTC)) == 1  # due at its end: now


async def test_a_command_over_http_answers_once_the_live_nodes_hold_it(database: db.Database) -> None:
    """The node's view of the controls holds a suspension by the time the admin API
    answers (it waits for the node's acknowledgement), and the answer says so."""
    await nodes.register(database, "n1", datetime.now(UTC))
    view = suspensions.Controls(database)

    async def apply() -> None:
        await view.load(datetime.now(UTC))

    heeding = controls.Heeding(database, "n1", apply, every=3600.0)  # woken by NOTIFY only
    async with asyncio.TaskGroup() as tasks, serving(database) as client:
        running = tasks.create_task(heeding.run())
        status, made = await client.call("POST", "/v1/suspensions", json={"kind": "provider", "key": "google"})
        assert (status, made["acknowledged"]["applied"], made["acknowledged"]["late"]) == (201, ["n1"], [])
        assert view.suspended("provider", "google", datetime.now(UTC)) is not None
        status, resumed = await client.call("DELETE", "/v1/suspensions/provider/google")
        assert (status, resumed["acknowledged"]["applied"]) == (200, ["n1"])
        assert view.suspended("provider", "google", datetime.now(UTC)) is None
        running.cancel()


async def test_an_account_enabled_makes_what_its_pool_handed_back_due_now(database: db.Database) -> None:
    await make(database, "box", pool="p")
    now = datetime.now(UTC)
    await accounts.disable(database, "box", "on leave", now)
    await accept(database, dataclasses.replace(new_message("a@sink.test", "b@sink.test"), account_pool="p"),
                 dataclasses.replace(new_message("c@sink.test"), account_pool="q"))  # fmt: skip
    leased = sorted(d.id for d in await leases.lease(database, "n1", 3, now + timedelta(minutes=1), now))
    due = now + timedelta(minutes=1)  # no account of the pool free: handed back until then
    for pool, ids in (("p", leased[:2]), ("q", leased[2:])):
        why = {"reason": "account_pool_busy", "account_pool": pool, "until": due.isoformat()}
        assert await leases.release(database, "n1", ids, now, due, why) == set(ids)
    account, released = await control.enable(database, "box", "back", now)
    assert (account.state, released) == (accounts.State.ACTIVE, 2)
    rows = await query(database, "SELECT next_attempt_at FROM deliveries ORDER BY id")
    assert [r["next_attempt_at"] for r in rows] == [now, now, due]  # another pool's waits on
    assert (await control.enable(database, "box", "again", now))[1] == 0
