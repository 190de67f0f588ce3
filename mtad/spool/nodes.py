"""Nodes: every running mtad registers in `nodes` and heartbeats.

Delivery reads the table to share bucket rates among the live nodes that deliver
(a node that only accepts shares nothing); a node whose heartbeat is older than a
few intervals is taken for dead.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from typing import Any

from mtad import db


async def register(database: db.Database, node_id: str, now: datetime, *, delivers: bool = True) -> None:
    """Join (or rejoin) the cluster; `delivers`: [delivery] enabled (only delivering
    nodes share the buckets)."""
    await database.execute("nodes/register", node_id, socket.gethostname(), os.getpid(), now, delivers)


async def previous_life_gone(database: db.Database, node_id: str, now: datetime, silent_for: float) -> bool:
    """Whether the process that last registered `node_id` is gone (call it before
    `register`): it never registered, its heartbeat is older than `silent_for` seconds,
    or it ran on this host and its pid is no longer alive (or is this process)."""
    row = await database.fetchrow("nodes/get", node_id)
    if row is None or (now - row["heartbeat_at"]).total_seconds() > silent_for:
        return True
    if row["hostname"] != socket.gethostname():
        return False  # alive elsewhere, as far as its heartbeat says
    if row["pid"] == os.getpid():
        return True
    try:
        os.kill(row["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # a process of another user holds that pid
    return False


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
