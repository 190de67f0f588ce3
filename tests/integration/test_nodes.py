"""Nodes in the `nodes` table: only live nodes that deliver share the buckets; one
process at a time claims a node id."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta

import pytest

from mtad import db
from mtad.base import errors
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
