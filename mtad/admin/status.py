"""What the status page reads beside the rest of /v1: the queue by state and provider
group, the sending rate per minute, the nodes, the warm-up days. Each takes the query and returns what the API answers
(JSON-able), with one statement on a small table; the queue's, one pass over the deliveries, is shared by every
reader for COUNTED_FOR seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.admin import filters
from mtad.deliver import warmup
from mtad.feedback import reputation
from mtad.spool import nodes, queue

MINUTES, MAX_MINUTES = 60, 24 * 60  # the rate's history unless told, and at most (what reputation keeps)
COUNTED_FOR = 10.0  # seconds the queue's overview is answered again before it is counted again


class Status:
    def __init__(self, database: db.Database, node_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = database
        self._node_timeout = node_timeout
        self._clock = clock
        self._counting = asyncio.Lock()  # one pass at a time: who comes meanwhile gets its result
        self._counted: tuple[float, dict[str, Any]] | None = None  # (clock, the overview)

    def routes(self) -> dict[str, Callable[[Mapping[str, str]], Awaitable[dict[str, Any]]]]:
        """The GET routes, by path."""
        return {
            "/v1/queue/overview": self.queue,
            "/v1/rate": self.rate,
            "/v1/nodes": self.nodes,
            "/v1/warmup": self.warmup,
        }

    async def queue(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/queue/overview: the deliveries still to be done by state and by provider
        group, each group's by state too, with the oldest and the next due, most first,
        as counted at its "now": at most COUNTED_FOR seconds ago, for every reader."""
        _known(query, set())
        async with self._counting:
            if self._counted is None or self._clock() - self._counted[0] >= COUNTED_FOR:
                self._counted = (self._clock(), await self._count())
            return self._counted[1]

    async def _count(self) -> dict[str, Any]:
        """The overview now (sql/queue/overview.sql: one pass over deliveries alone)."""
        now, total = datetime.now(UTC), _empty()
        groups: dict[str, dict[str, Any]] = {}
        for row in await queue.overview(self._db):
            for counted in (total, groups.setdefault(row["key"], {"key": row["key"], **_empty()})):
                counted["total"] += row["n"]
                counted["states"][row["state"]] = counted["states"].get(row["state"], 0) + row["n"]
                counted["oldest"] = _earliest(counted["oldest"], row["oldest"])
                counted["next_due"] = _earliest(counted["next_due"], _due(row["next_due"]))
        ordered = sorted(groups.values(), key=lambda g: (-g["total"], g["key"]))
        return {"now": now, "total": total, "groups": ordered}

    async def rate(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/rate?minutes=60: delivered, deferred and hard-bounced per minute, the
        oldest first, from the reputation windows' counts (sql/reputation/minutes.sql;
        none while [reputation] enabled = false)."""
        _known(query, {"minutes"})
        text = query.get("minutes", str(MINUTES))
        if not text.isdigit() or not 1 <= int(text) <= MAX_MINUTES:
            raise filters.BadParameter("minutes", f"a whole number from 1 to {MAX_MINUTES}")
        now = datetime.now(UTC)
        since = now.replace(second=0, microsecond=0) - timedelta(minutes=int(text) - 1)
        return {"since": since, "now": now, "minutes": await reputation.per_minute(self._db, since)}

    async def nodes(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/nodes: every registered node, live when it heartbeat lately (sql/nodes/list.sql)."""
        _known(query, set())
        now = datetime.now(UTC)
        live_since = now - timedelta(seconds=self._node_timeout)
        found = await nodes.list_all(self._db)
        return {"now": now, "nodes": [{**n, "live": n["heartbeat_at"] >= live_since} for n in found]}

    async def warmup(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/warmup: the stored warm-up days (sql/egress/list.sql)."""
        _known(query, set())
        return {"warmup": await warmup.listing(self._db)}


def _empty() -> dict[str, Any]:
    return {"total": 0, "states": {}, "oldest": None, "next_due": None}


def _earliest(one: datetime | None, other: datetime | None) -> datetime | None:
    return other if one is None else one if other is None else min(one, other)


def _due(at: datetime | None) -> datetime | None:
    """None for a delivery that waits for no time (a paused tenant's: infinity)."""
    return None if at is None or at.year == 9999 else at


def _known(query: Mapping[str, str], known: set[str]) -> None:
    for name in query:
        if name not in known:
            raise filters.BadParameter(name, f"not a parameter here (known: {', '.join(sorted(known)) or 'none'})")
