"""Nodes: every running mtad claims its node id, registers in `nodes` and heartbeats.

One process per node id on a database: the daemon claims its id (`Claim`) before
it migrates or registers anything, and a second one is refused. Delivery reads the
table to share bucket rates among the live nodes that deliver (a node that only
accepts shares nothing); a node whose heartbeat is older than a few intervals is
taken for dead.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from mtad import db
from mtad.base import errors
from mtad.db import owner


class Claim:
    """This process's claim on its node id: a session advisory lock on a connection of
    its own (sql/nodes/claim.sql). It ends with the process, kill -9 included (its
    session ends), so a dead holder never blocks a restart; while it is held, the
    process that registered the id before is gone and what it held may be reclaimed."""

    def __init__(self, dsn: str, node_id: str, conn: db.Connection, session: int) -> None:
        self.dsn = dsn
        self.node_id = node_id
        self._conn = conn
        self._session = session  # the backend pid that holds the claim

    @classmethod
    async def take(cls, dsn: str, node_id: str) -> Claim:
        """Claim node_id on the database of dsn; SpoolInUse names the process that holds it."""
        conn = await db.connect_once(dsn)
        try:
            async with asyncio.timeout(db.CONNECT_TIMEOUT):
                if not await conn.fetchval("nodes/claim", node_id):
                    raise errors.SpoolInUse(await _in_use(conn, node_id))
                found = await conn.fetchrow("nodes/claimed", node_id)
        except BaseException:
            await db.close(conn)
            raise
        assert found is not None
        return cls(dsn, node_id, conn, found["pid"])

    async def keep(self) -> None:
        """Claim the id again on a new connection when the one that held it was lost (the
        server restarted). SpoolInUse: another process claimed it meanwhile;
        DatabaseUnavailable: not now (the database cannot be reached, or the session
        that held the claim has not ended yet): keep again later."""
        try:
            async with asyncio.timeout(db.CONNECT_TIMEOUT):
                found = await self._conn.fetchrow("nodes/claimed", self.node_id)
                if found is not None and found["mine"]:
                    return
        except (errors.DatabaseUnavailable, TimeoutError):
            await db.close(self._conn)
            self._conn = await db.connect_once(self.dsn)
            found = None
        try:
            async with asyncio.timeout(db.CONNECT_TIMEOUT):
                if await self._conn.fetchval("nodes/claim", self.node_id):
                    mine = await self._conn.fetchrow("nodes/claimed", self.node_id)
                    assert mine is not None
                    self._session = mine["pid"]
                    return
                holder = await self._conn.fetchrow("nodes/claimed", self.node_id)
                if holder is None or holder["pid"] == self._session:
                    raise errors.DatabaseUnavailable(f"node {self.node_id}: the session that held its claim is ending")
                raise errors.SpoolInUse(await _in_use(self._conn, self.node_id))
        except TimeoutError:
            raise errors.DatabaseUnavailable(f"node {self.node_id}: its claim not taken within "
                                             f"{db.CONNECT_TIMEOUT:g} s") from None  # fmt: skip

    async def release(self) -> None:
        await db.close(self._conn)


async def _in_use(conn: db.Connection, node_id: str) -> str:
    row = await conn.fetchrow("nodes/get", node_id)
    if row is None:
        who = "another process (not registered yet)"
    else:
        listening = json.loads(row["listening"]) if row["listening"] else {}
        who = f"mtad run (pid {row['pid']} on {row['hostname']}), {owner.addresses(listening)},"
    return (
        f"node {node_id} is in use: {who} holds it on this database; stop that one first, "
        "or give this one another [node] id"
    )


async def register(database: db.Database, node_id: str, now: datetime, *, delivers: bool = True) -> None:
    """Join (or rejoin) the cluster; `delivers`: [delivery] enabled (only delivering
    nodes share the buckets). Call it holding the node's Claim."""
    await database.execute("nodes/register", node_id, socket.gethostname(), os.getpid(), now, delivers)


async def listening(database: db.Database, node_id: str, addresses: Mapping[str, Sequence[str]]) -> None:
    """Record where the node's process listens (a refused second process names it)."""
    await database.execute("nodes/listening", node_id, json.dumps({k: list(v) for k, v in addresses.items() if v}))


async def heartbeat(database: db.Database, node_id: str, now: datetime) -> None:
    await database.execute("nodes/heartbeat", node_id, now)


async def deregister(database: db.Database, node_id: str) -> None:
    await database.execute("nodes/deregister", node_id)


async def list_all(database: db.Database) -> list[dict[str, Any]]:
    return [dict(row) for row in await database.fetch("nodes/list")]


async def live(database: db.Database, since: datetime) -> int:
    """How many delivering nodes heartbeat at or after `since` (this one included when
    it does): they share every bucket's rate and sessions."""
    return int(await database.fetchval("nodes/live", since))


async def reloaded(database: db.Database, node_id: str, now: datetime, result: dict[str, Any]) -> None:
    """Record what the node's reload came to (`mtad reload` waits for it)."""
    await database.execute("nodes/reloaded", node_id, now, json.dumps(result))


async def reload_of(database: db.Database, node_id: str) -> dict[str, Any] | None:
    """The node's process (hostname, pid) and its last reload; None: never registered."""
    row = await database.fetchrow("nodes/reload_of", node_id)
    if row is None:
        return None
    found = dict(row)
    found["reload_result"] = json.loads(found["reload_result"]) if found["reload_result"] else None
    return found
