"""An operator's suspensions and reroutes, honoured by delivery against real
PostgreSQL and a real SMTP sink: mail of a suspended provider group, tenant, pool
or source address waits (queued, due when the suspension ends) and goes when it
is resumed; a suspended address is left out of its pool; a reroute sends a
provider group's mail from another pool; a suspended account is disabled."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.admin import control
from mtad.deliver import delivery, egress
from mtad.mailboxes import accounts
from mtad.outbound import outcomes, routing, sessions
from mtad.spool import suspensions
from tests.conftest import query
from tests.integration.test_accounts import make
from tests.integration.test_delivery import PROVIDERS, RULES, ZONE, accept, new_message
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
