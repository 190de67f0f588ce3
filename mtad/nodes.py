"""Nodes: every running mtad registers in `nodes` and heartbeats.

Delivery reads the table to share bucket rates among the live nodes that deliver
(a node that only accepts shares nothing); a node whose heartbeat is older than a
few intervals is taken for dead.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

from mtad import db


async def register(database: db.Database, node_id: str, now: datetime, *, delivers: bool = True) -> None:
    """Join (or rejoin) the cluster; `delivers`: [delivery] enabled (only delivering
    nodes share the buckets)."""
    await database.execute("nodes/register", node_id, socket.gethostname(), os.getpid(), now, delivers)


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
