"""Source IP pools in delivery: each send bound to an address of its pool, with that
address's EHLO name and its own bucket; warm-up caps that spill; the fallback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from typing import Any

from mtad import db
from mtad.deliver import delivery, egress, shaping, warmup
from mtad.outbound import outcomes, routing, sessions
from tests.integration.delivering import RULES, ZONE, accept, engine, new_message
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

GROUP = "mx:mx1.sink.test,mx2.sink.test"
A, B = "127.0.0.10", "127.0.0.11"


async def events(database: db.Database) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT data FROM events WHERE kind = 'delivered' ORDER BY id")
    return [json.loads(r["data"]) for r in rows]


async def test_each_send_leaves_from_an_address_of_the_pool_with_its_ehlo_name_and_bucket(
    database: db.Database, sink: Sink
) -> None:
    ehlo = {A: "mta-a.example.com", B: "mta-b.example.com"}
    pool = egress.PoolSettings("transactional", (A, B), egress.Policy.ROUND_ROBIN, ehlo=ehlo)
    pools = egress.Egress({"transactional": pool})
    shaper = shaping.Shaper()
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(6)))
    await engine(database, sink, pools, shaper, default_pool="transactional").run_until_idle()
    assert Counter(m.peer for m in sink.received) == {A: 3, B: 3}  # round-robin over the pool
    assert {(m.peer, m.helo) for m in sink.received} == {(A, "mta-a.example.com"), (B, "mta-b.example.com")}
    assert {(e["source"], e["pool"]) for e in await events(database)} == {(A, "transactional"), (B, "transactional")}
    assert "egress" not in (await events(database))[0]  # the ordinary path says nothing more
    assert {(s.group, s.source) for s in shaper.statistics()} == {(GROUP, A), (GROUP, B)}  # a bucket per address


async def test_a_route_pool_wins_over_the_default(database: db.Database, sink: Sink) -> None:
    bulk, transactional = egress.PoolSettings("bulk", (A,)), egress.PoolSettings("transactional", (B,))
    pools = egress.Egress({"bulk": bulk, "transactional": transactional})
    await accept(database, new_message("a@sink.test"))
    mtad = engine(database, sink, pools, default_pool="transactional", route_pools={"sink.test": "bulk"})
    await mtad.run_until_idle()
    assert [m.peer for m in sink.received] == [A]


async def test_a_full_warming_address_spills_to_a_warm_one_and_the_day_is_saved(
    database: db.Database, sink: Sink
) -> None:
    schedule = warmup.Warmup(start=2, growth=2.0, target=1000)
    pool = egress.PoolSettings("p", (A, B), egress.Policy.ROUND_ROBIN, warming=frozenset({B}), warmup=schedule)
    pools = egress.Egress({"p": pool})
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(8)))
    mtad = engine(database, sink, pools, default_pool="p")
    await mtad.run_until_idle()
    assert Counter(m.peer for m in sink.received) == {A: 6, B: 2}  # B's cap on day 1 is 2
    spilled = [e for e in await events(database) if "egress" in e]
    assert spilled
    assert all(e["source"] == A and not e["egress_fallback"] for e in spilled)
    assert f"{B} is at its warm-up cap of 2" in spilled[0]["egress"]
    await warmup.save(database, pools.days, pools.now())
    [row] = await query(database, "SELECT address, provider, day, sent FROM warmup")
    assert dict(row) == {"address": B, "provider": GROUP, "day": 1, "sent": 2}


async def test_a_send_is_never_blocked_for_want_of_an_address(database: db.Database, sink: Sink) -> None:
    pool = egress.PoolSettings("p", (A,), warming=frozenset({A}), warmup=warmup.Warmup(start=1, target=10))
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(3)))
    await engine(database, sink, egress.Egress({"p": pool}), default_pool="p").run_until_idle()
    assert [m.peer for m in sink.received] == [A, A, A]  # all sent, from the primary
    fallbacks = [e for e in await events(database) if e.get("egress_fallback")]
    assert len(fallbacks) == 2
    assert "fell back to the primary 127.0.0.10" in fallbacks[0]["egress"]


async def test_the_pool_a_message_named_at_submission_is_used(database: db.Database, sink: Sink) -> None:
    """X-Mtad-Pool (or the tenant's pool) is stored with the message; delivery honours it,
    both for mail handed over by the accept path and for mail leased from the queue."""
    bulk, transactional = egress.PoolSettings("bulk", (A,)), egress.PoolSettings("transactional", (B,))
    pools = egress.Egress({"bulk": bulk, "transactional": transactional})
    named = dataclasses.replace(new_message("named@sink.test"), pool="bulk")
    await accept(database, named, new_message("unnamed@sink.test"))
    await engine(database, sink, pools, default_pool="transactional").run_until_idle()
    assert {m.recipients[0]: m.peer for m in sink.received} == {"named@sink.test": A, "unnamed@sink.test": B}


async def test_an_address_out_of_tokens_does_not_hold_back_mail_another_could_send(
    database: db.Database, sink: Sink
) -> None:
    """Sticky on A, whose bucket (1 a minute) the first message empties: the second
    leaves at once from B instead of waiting a minute behind A, and A keeps its turn."""
    slow = routing.parse_providers(
        {"default": {"rate": "1/min", "min_rate": "1/min", "max_rate": "1/min", "burst": 1, "sessions": 4}}, "test"
    )
    router = routing.Router(ZoneResolver(ZONE), slow, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0), default_pool="p")
    pools = egress.Egress({"p": egress.PoolSettings("p", (A, B), egress.Policy.STICKY)})
    provider = GROUP
    sticky = pools.choose("p", provider).address
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(2)))
    mtad = delivery.Delivery(settings, database, router, pool, RULES, pools=pools)
    async with asyncio.timeout(30):  # a minute's wait behind the sticky address would end this
        await mtad.run_until_idle()
    assert sorted(m.peer for m in sink.received) == [A, B]
    assert pools.choose("p", provider).address == sticky  # the spill moved nothing: A is still the sticky one


async def test_a_pool_whose_addresses_all_wait_holds_back_no_mail_of_another_pool(
    database: db.Database, sink: Sink
) -> None:
    """One provider group, two pools: the bulk pool's only address is out of tokens
    (1 a minute) after its first message; the transactional message queued behind
    the second bulk one leaves at once, from its own pool's queue."""
    slow = routing.parse_providers(
        {"default": {"rate": "1/min", "min_rate": "1/min", "max_rate": "1/min", "burst": 1, "sessions": 4}}, "test"
    )
    router = routing.Router(ZoneResolver(ZONE), slow, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0), shutdown_timeout=5)
    pools = egress.Egress(
        {"bulk": egress.PoolSettings("bulk", (A,)), "transactional": egress.PoolSettings("transactional", (B,))}
    )
    bulk = [dataclasses.replace(new_message(f"bulk{i}@sink.test"), pool="bulk") for i in range(2)]
    await accept(database, *bulk, dataclasses.replace(new_message("reset@sink.test"), pool="transactional"))
    mtad = delivery.Delivery(settings, database, router, pool, RULES, pools=pools)
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(mtad.run())
        received = await sink.wait_for(2, within=30)  # a minute's wait behind bulk1 would end this
        mtad.stop()
        await running
    assert sorted((m.recipients[0], m.peer) for m in received) == [("bulk0@sink.test", A), ("reset@sink.test", B)]


async def test_a_rotate_pool_sends_a_turn_from_each_address_then_rests_them(database: db.Database, sink: Sink) -> None:
    """Each address's turn (2 or 3 sends, counted in PostgreSQL) is sent from it; once
    both turns are given out and answered, both rest, and the rest leaves from the
    primary as a fallback that says so."""
    pool = egress.PoolSettings("p", (A, B), egress.Policy.ROTATE, rotate_after=(2, 3), park=600)
    pools = egress.Egress({"p": pool})
    await accept(database, *(new_message(f"r{i}@sink.test") for i in range(8)))
    await engine(database, sink, pools, default_pool="p").run_until_idle()
    assert len(sink.received) == 8
    sent = await events(database)
    turns = Counter(e["source"] for e in sent if not e.get("egress_fallback"))
    assert set(turns) == {A, B}
    assert all(2 <= n <= 3 for n in turns.values()), turns
    fallbacks = [e for e in sent if e.get("egress_fallback")]
    assert len(fallbacks) == 8 - sum(turns.values())
    assert all(e["source"] == A and "fell back to the primary" in e["egress"] for e in fallbacks)
    assert "has no turn to give" in fallbacks[0]["egress"]
    stored = await query(database, "SELECT address, turn, turn_sends FROM source_addresses ORDER BY address")
    assert [(r["address"], r["turn"]) for r in stored] == [(A, None), (B, None)]  # both turns over
