"""What the status page reads beside the rest of /v1: the sending rate per minute,
the nodes, the warm-up days. Each takes the query and returns what the API answers
(JSON-able), with one statement on a small table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.admin import filters
from mtad.deliver import warmup
from mtad.feedback import reputation
from mtad.spool import nodes

MINUTES, MAX_MINUTES = 60, 24 * 60  # the rate's history unless told, and at most (what reputation keeps)


class Status:
    def __init__(self, database: db.Database, node_timeout: float) -> None:
        self._db = database
        self._node_timeout = node_timeout

    def routes(self) -> dict[str, Callable[[Mapping[str, str]], Awaitable[dict[str, Any]]]]:
        """The GET routes, by path."""
        return {"/v1/rate": self.rate, "/v1/nodes": self.nodes, "/v1/warmup": self.warmup}

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


def _known(query: Mapping[str, str], known: set[str]) -> None:
    for name in query:
        if name not in known:
            raise filters.BadParameter(name, f"not a parameter here (known: {', '.join(sorted(known)) or 'none'})")
