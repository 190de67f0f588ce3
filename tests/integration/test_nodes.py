"""Nodes in the `nodes` table: only live nodes that deliver share the buckets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mtad import db, nodes


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
