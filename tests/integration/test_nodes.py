"""Nodes in the `nodes` table: only live nodes that deliver share the buckets; one
process at a time claims a node id; an operator's command waits until every live
node has applied it."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import UTC, datetime, timedelta

import pytest

from mtad import db
from mtad.base import errors
from mtad.spool import controls, nodes
from tests.pg import query


async def test_only_live_delivering_nodes_share_the_buckets(database: db.Database) -> None:
    now = datetime.now(UTC)
    await nodes.register(database, "a", now)
    await nodes.register(database, "accepts-only", now, delivers=False)
    await nodes.register(database, "gone", now - timedelta(minutes=5))
    since = now - timedelta(seconds=30)
    assert await nodes.live(database, since) == 1  # neither the accept-only node nor the dead one
    await nodes.register(database, "accepts-only", now, delivers=True)  # restarted with delivery on
    assert await nodes.live(database, since) == 2
    await nodes.heartbeat(database, "gone", now)  # back from a pause
    assert await nodes.live(database, since) == 3
    listed = {n["id"]: n["delivers"] for n in await nodes.list_all(database)}
    assert listed == {"a": True, "accepts-only": True, "gone": True}
    await nodes.deregister(database, "a")
    assert await nodes.live(database, since) == 2


async def test_one_process_claims_a_node_id_until_its_session_ends(dsn: str, database: db.Database) -> None:
    first = await nodes.Claim.take(dsn, "n1")
    try:
        await nodes.register(database, "n1", datetime.now(UTC))
        await nodes.listening(database, "n1", {"submission": ["127.0.0.1:2525"], "http": []})
        with pytest.raises(errors.SpoolInUse) as refused:
            await nodes.Claim.take(dsn, "n1")
        assert f"pid {os.getpid()} on {socket.gethostname()}" in str(refused.value)
        assert "listening on 127.0.0.1:2525 (submission)" in str(refused.value)
        other = await nodes.Claim.take(dsn, "n2")  # another id: its own claim
        await other.release()
        await first.keep()  # still held: nothing to do
        await query(database, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                              "AND classid = hashtext('mtad_node')::oid")  # fmt: skip
        await first.keep()  # its connection was lost (a restart of the server): claimed again
        with pytest.raises(errors.SpoolInUse):
            await nodes.Claim.take(dsn, "n1")
    finally:
        await first.release()
    again = await nodes.Claim.take(dsn, "n1")  # released with its session
    await again.release()


# --- an operator's command held on every live node ---------------------------------------


async def test_a_command_waits_until_every_live_node_has_applied_it(database: db.Database) -> None:
    now = datetime.now(UTC)
    for node in ("a", "b"):
        await nodes.register(database, node, now)
    await nodes.register(database, "dead", now - timedelta(minutes=5))  # not waited for
    version = await controls.announce(database)
    assert await controls.version(database) == version
    await controls.applied(database, "a", version)
    early = await controls.acks(database, version, now - timedelta(seconds=30))
    assert (early.applied, [late.node for late in early.late]) == (("a",), ["b"])
    await controls.applied(database, "b", version + 1)  # a later version holds this one too
    await controls.applied(database, "b", version)  # and is not taken back by an older one
    acks = await controls.wait(database, version, 30.0)
    assert (acks.applied, acks.late, acks.said()) == (("a", "b"), (), "held on 2 of 2 live nodes (a, b)")
    assert (await controls.acks(database, version + 1, now - timedelta(seconds=30))).applied == ("b",)


async def test_a_live_node_that_does_not_apply_it_is_named_once_the_wait_is_over(database: db.Database) -> None:
    now = datetime.now(UTC)
    await nodes.register(database, "a", now)
    await nodes.register(database, "stuck", now - timedelta(seconds=12))
    version = await controls.announce(database)
    await controls.applied(database, "a", version)
    acks = await controls.wait(database, version, 30.0, within=0.2)
    assert (acks.applied, [late.node for late in acks.late], acks.live) == (("a",), ["stuck"], 2)
    assert acks.said() == "held on 1 of 2 live nodes (a)"
    [warning] = acks.warnings(0.2, now)
    assert warning.startswith("node stuck did not apply it within 0.2 s (its last heartbeat 12 s ago)")
    assert acks.as_dict() == {"version": version, "live": 2, "applied": ["a"], "late": ["stuck"]}
    assert (await controls.wait(database, version, 30.0, within=0)).said() == "held on 1 of 2 live nodes (a)"
    await nodes.deregister(database, "stuck")
    await nodes.deregister(database, "a")
    assert (await controls.wait(database, version, 30.0)).said() == "no live node: each node reads it as it starts"


async def test_a_node_told_by_notify_applies_then_acknowledges(database: db.Database) -> None:
    """Heeding wakes on the NOTIFY alone (its periodic read is an hour away), applies
    the controls, then acknowledges; an apply that fails acknowledges nothing."""
    await nodes.register(database, "n1", datetime.now(UTC))
    applied: list[int] = []
    failing = False

    async def apply() -> None:
        if failing:
            raise errors.SpoolError("the states could not be read")
        applied.append(await controls.version(database))

    heeding = controls.Heeding(database, "n1", apply, every=3600.0)
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(heeding.run())
        acks = await controls.wait(database, await controls.version(database), 30.0, within=30.0)
        assert acks.applied == ("n1",)  # its first read, as it starts
        version = await controls.announce(database)
        acks = await controls.wait(database, version, 30.0, within=30.0)
        assert (acks.applied, applied[-1]) == (("n1",), version)
        assert await heeding.heed() == version  # nothing new: not applied again
        assert applied.count(version) == 1
        failing = True
        version = await controls.announce(database)
        acks = await controls.wait(database, version, 30.0, within=0.5)
        assert [late.node for late in acks.late] == ["n1"]
        assert heeding.applied == version - 1
        running.cancel()
