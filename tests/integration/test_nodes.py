"""Nodes in the `nodes` table: only live nodes that deliver share the buckets; a node
that starts knows whether its previous life is gone."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from datetime import UTC, datetime, timedelta

from mtad import db
from mtad.spool import nodes
from tests.conftest import query


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


async def test_a_previous_life_is_gone_when_its_process_is_or_its_heartbeat_stopped(database: db.Database) -> None:
    now = datetime.now(UTC)
    assert await nodes.previous_life_gone(database, "n1", now, 30)  # never registered
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
    try:
        await query(database, "INSERT INTO nodes (id, hostname, pid, started_at, heartbeat_at, delivers) "
                              "VALUES ('n1', $1, $2, $3, $3, true)", socket.gethostname(), child.pid, now)  # fmt: skip
        assert not await nodes.previous_life_gone(database, "n1", now, 30)  # alive, on this host
        assert await nodes.previous_life_gone(database, "n1", now + timedelta(seconds=31), 30)  # silent too long
    finally:
        child.kill()
        await child.wait()
    assert await nodes.previous_life_gone(database, "n1", now, 30)  # its process is gone
    await query(database, "UPDATE nodes SET hostname = 'elsewhere', pid = $1", os.getpid())
    assert not await nodes.previous_life_gone(database, "n1", now, 30)  # another host's, heartbeating
    await query(database, "UPDATE nodes SET hostname = $1", socket.gethostname())
    assert await nodes.previous_life_gone(database, "n1", now, 30)  # this very process
