"""What the operator's tools read and do to the queue, against real PostgreSQL:
deliveries by filter, their totals and shape (qshape's), actions by filter in
batches, and a hold that a node holding the delivery in memory cannot get past."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from mtad import db
from mtad.base import errors
from mtad.spool import actions, commit, leases, queue
from tests.integration.spooling import NOW, message, running
from tests.pg import query


async def spooled(database: db.Database) -> dict[str, int]:
    """Six deliveries: tenants t1 and t2, to example.com and example.net, accepted
    at ages 1 minute to 2 days; recipient -> id."""
    async with running(commit.GroupCommitter(database, now=lambda: NOW)) as committer:
        await committer.commit(message("a@example.com", "b@example.net", tenant="t1"))
        await committer.commit(message("c@example.com", "d@example.com", tenant="t2"))
        await committer.commit(message("e@example.net", "f@example.net", tenant="t2"))
    ages = {"a": 1, "b": 7, "c": 30, "d": 90, "e": 600, "f": 2880}  # minutes
    for local, minutes in ages.items():
        await query(database, "UPDATE deliveries SET created_at = $2, next_attempt_at = $2 WHERE recipient LIKE $1",
                    f"{local}@%", NOW - timedelta(minutes=minutes))  # fmt: skip
    rows = await query(database, "SELECT id, recipient FROM deliveries")
    return {r["recipient"].split("@")[0]: r["id"] for r in rows}


async def listed(database: db.Database, filters: queue.Filters, **kw: object) -> list[str]:
    return [r["recipient"].split("@")[0] async for r in queue.deliveries(database, filters, **kw)]  # type: ignore[arg-type]


async def states(database: db.Database) -> dict[str, str]:
    rows = await query(database, "SELECT recipient, state::text AS state FROM deliveries")
    return {r["recipient"].split("@")[0]: r["state"] for r in rows}


async def test_deliveries_are_listed_and_counted_by_filter(database: db.Database) -> None:
    ids = await spooled(database)
    await query(database, "UPDATE deliveries SET state = 'delivered' WHERE id = $1", ids["a"])
    await query(database, "UPDATE deliveries SET state = 'deferred', route_group = 'google' WHERE id = ANY($1)",
                [ids["c"], ids["d"]])  # fmt: skip
    assert await listed(database, queue.Filters()) == ["b", "c", "d", "e", "f"]  # pending only
    assert await listed(database, queue.Filters(states=None)) == ["a", "b", "c", "d", "e", "f"]
    assert await listed(database, queue.Filters(tenant="t2", domain="example.net")) == ["e", "f"]
    assert await listed(database, queue.Filters(group="google")) == ["c", "d"]
    assert await listed(database, queue.Filters(group=queue.NEVER)) == ["b", "e", "f"]
    assert await listed(database, queue.Filters(older_than=timedelta(hours=1), now=NOW)) == ["d", "e", "f"]
    assert await listed(database, queue.Filters(), after=ids["c"], limit=2) == ["d", "e"]  # a page
    found = await queue.totals(database, queue.Filters(states=None))
    assert (found.total, found.states) == (6, {"delivered": 1, "deferred": 2, "queued": 3})
    assert found.said() == "6 deliveries: 3 queued, 2 deferred, 1 delivered"


async def test_the_summary_counts_by_key_and_qshapes_age_buckets(database: db.Database) -> None:
    ids = await spooled(database)
    due = NOW + timedelta(minutes=10)
    await query(database, "UPDATE deliveries SET state = 'deferred', route_group = 'google', next_attempt_at = $2"
                          " WHERE id = ANY($1)", [ids["c"], ids["d"]], due)  # fmt: skip
    shapes = await queue.summary(database, queue.Filters(), "provider", NOW)
    assert [(s.key, s.total, s.buckets) for s in shapes] == [
        ("-", 4, (1, 1, 0, 0, 0, 0, 0, 1, 0, 1)),  # 1m, 7m, 600m, 2880m
        ("google", 2, (0, 0, 0, 1, 0, 1, 0, 0, 0, 0)),  # 30m, 90m
    ]
    assert (shapes[1].oldest, shapes[1].next_due) == (NOW - timedelta(minutes=90), due)
    total = queue.overall(shapes)
    assert total is not None
    assert (total.total, total.oldest) == (6, NOW - timedelta(minutes=2880))
    by_domain = await queue.summary(database, queue.Filters(tenant="t2"), "domain", NOW)
    assert [(s.key, s.total) for s in by_domain] == [("example.com", 2), ("example.net", 2)]
    assert [s.key for s in await queue.summary(database, queue.Filters(), "source", NOW)] == ["-"]
    with pytest.raises(errors.UsageError):
        await queue.summary(database, queue.Filters(), "colour", NOW)


async def test_an_action_by_filter_goes_in_batches_and_counts(database: db.Database) -> None:
    await spooled(database)
    t2 = queue.Filters(tenant="t2")
    would = await actions.preview(database, "cancel", t2)
    assert (would.count, would.would) == (4, {"queued": 4})
    done = await actions.act(database, "cancel", t2, NOW, batch=3)  # two batches of 3, then none
    assert (done.count, done.was) == (4, {"queued": 4})
    assert await states(database) == {"a": "queued", "b": "queued", "c": "cancelled", "d": "cancelled",
                                      "e": "cancelled", "f": "cancelled"}  # fmt: skip
    kinds = await query(database, "SELECT kind, tenant, data->>'action' AS action FROM events WHERE kind = 'cancelled'")
    assert {(k["kind"], k["tenant"], k["action"]) for k in kinds} == {("cancelled", "t2", "cancel")}
    assert (await actions.preview(database, "bounce", t2)).count == 0  # none pending
    assert (await actions.preview(database, "bounce", queue.Filters(tenant="t2", states=None))).left == {
        "cancelled": 4}  # fmt: skip
    with pytest.raises(errors.UsageError, match="release acts on deliveries held"):
        actions.sources("release", queue.Filters(states=("queued",)))


async def test_a_hold_takes_what_a_node_leased_but_not_what_it_is_sending(database: db.Database) -> None:
    ids = await spooled(database)
    taken = await leases.lease(database, "n1", 2, NOW, NOW + timedelta(minutes=5))
    sending, waiting = sorted(d.id for d in taken)
    await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (sending,), "g", "t1")], NOW)
    would = await actions.preview(database, "hold", queue.Filters())
    assert (would.would, would.sending) == ({"queued": 4, "leased": 1}, 1)
    done = await actions.act(database, "hold", queue.Filters(), NOW)
    assert done.was == {"queued": 4, "leased": 1}
    # The node that leased it cannot begin it: its lease is gone, and nothing is sent.
    begun = await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (waiting,), "g", "t1")], NOW)
    assert begun.owned == set()
    assert await leases.renew(database, "n1", [sending, waiting], NOW + timedelta(minutes=9)) == {sending}
    assert not await leases.lease(database, "n2", 10, NOW + timedelta(days=1), NOW + timedelta(days=2))  # held
    held = await states(database)
    assert sorted(held.values()) == ["held"] * 5 + ["leased"]
    # Released: due now, leased again.
    done = await actions.act(database, "release", queue.Filters(domain="example.com"), NOW)
    assert done.was == {"held": len([k for k in ("a", "c", "d") if ids[k] != sending])}
    assert {d.recipient for d in await leases.lease(database, "n2", 10, NOW, NOW + timedelta(minutes=5))} <= {
        "a@example.com", "c@example.com", "d@example.com"}  # fmt: skip
    changed, left = await actions.act_on(database, "release", str(sending), NOW)
    assert (changed, left) == ([], [{"id": sending, "state": "leased"}])
