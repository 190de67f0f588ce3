"""The queue over the admin API: deliveries listed by filter a page at a time, the
summary, the actions by filter. Each takes the query (or body) as given and returns
what the API answers (JSON-able); a bad value raises filters.BadParameter (400)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from mtad import db
from mtad.admin import filters, names, views
from mtad.spool import actions, queue

LIMIT, MAX_LIMIT = 100, 1000  # deliveries a page has unless told, and at most
FILTERS = ("state", "tenant", "provider", "domain", "older_than")
_QUERY = frozenset({*FILTERS, "all", "limit", "cursor", "by"})
_BODY = frozenset({*FILTERS, "all", "dry_run"})


class Queue:
    def __init__(self, database: db.Database, configured: Callable[[], names.Configured], default_tenant: str):
        self._db = database
        self._configured = configured
        self._default_tenant = default_tenant

    async def _filters(self, given: Mapping[str, Any], now: datetime, *, every: bool) -> queue.Filters:
        for name in FILTERS:
            if given.get(name) is not None and not isinstance(given[name], str):
                raise filters.BadParameter(name, "a string")
        return await filters.build(self._db, now=now, configured=self._configured, default_tenant=self._default_tenant,
                                   state=given.get("state"), every=every, tenant=given.get("tenant"),
                                   provider=given.get("provider"), domain=given.get("domain"),
                                   older_than=given.get("older_than"), fielded=True)  # fmt: skip

    async def listing(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/queue: a page of deliveries, oldest first; its totals on the first page."""
        _known(query, _QUERY - {"by"})
        limit = _whole(query.get("limit"), "limit", LIMIT, 1, MAX_LIMIT)
        after = filters.after(query.get("cursor"))
        given = await self._filters(query, datetime.now(UTC), every=_flag(query.get("all"), "all"))
        found = [row async for row in queue.deliveries(self._db, given, after=after, limit=limit + 1)]
        more = len(found) > limit
        page = found[:limit]
        answer: dict[str, Any] = {
            "deliveries": [views.delivery(row) for row in page],
            "next_cursor": filters.cursor(page[-1]["id"]) if more else None,
        }
        if after == 0:
            counted = await queue.totals(self._db, given)
            answer["totals"] = {"total": counted.total, **counted.states}
        return answer

    async def summary(self, query: Mapping[str, str]) -> dict[str, Any]:
        """GET /v1/queue/summary: qshape's counts by key and age, the total first."""
        _known(query, _QUERY - {"all", "limit", "cursor"})
        by = query.get("by", "provider")
        if by not in queue.BY:
            raise filters.BadParameter("by", f"one of {', '.join(queue.BY)}")
        now = datetime.now(UTC)
        shapes = await queue.summary(self._db, await self._filters(query, now, every=False), by, now)
        return {
            "by": by,
            "buckets": list(queue.BUCKETS),
            "total": _shape(queue.overall(shapes)),
            "lines": [_shape(s) for s in shapes],
        }

    async def act(self, name: str, body: Any) -> dict[str, Any]:
        """POST /v1/queue/{action}: the action on every delivery the body's filters match
        (or "all": true); with "dry_run": true, only what it would do."""
        if not isinstance(body, dict):
            raise filters.BadParameter("body", 'a JSON object, e.g. {"tenant": "shop", "dry_run": true}')
        _known(body, _BODY)
        todo = actions.action(name)
        every, dry = _flag(body.get("all"), "all"), _flag(body.get("dry_run"), "dry_run")
        if not every and all(body.get(k) is None for k in FILTERS):
            raise filters.BadParameter("all", f'give a filter ({", ".join(FILTERS)}) or "all": true')
        state = body.get("state")
        if state is not None and state not in {s.value for s in todo.sources}:
            raise filters.BadParameter("state", f"{name} acts on deliveries {', '.join(sorted(todo.sources))}")
        now = datetime.now(UTC)
        given = await self._filters(body, now, every=False)
        if dry:
            would = await actions.preview(self._db, name, given)
            return {"action": name, "dry_run": True, "count": would.count, "would": would.would, "left": would.left,
                    "sending": would.sending}  # fmt: skip
        done = await actions.act(self._db, name, given, now)
        return {"action": name, "dry_run": False, "count": done.count, "was": done.was}

    async def act_on(self, ident: str, name: str) -> dict[str, Any]:
        """POST /v1/queue/{id}/{action}: one delivery, or every one of a message."""
        changed, left = await actions.act_on(self._db, name, ident, datetime.now(UTC))
        return {"changed": changed, "unchanged": [{"id": d["id"], "state": d["state"]} for d in left]}


def _shape(shape: queue.Shape | None) -> dict[str, Any] | None:
    if shape is None:
        return None
    due = None if shape.next_due is None or shape.next_due.year == 9999 else shape.next_due
    return {"key": shape.key, "total": shape.total, "ages": list(shape.buckets), "oldest": shape.oldest,
            "next_due": due}  # fmt: skip


def _known(given: Mapping[str, Any], known: frozenset[str]) -> None:
    for name in given:
        if name not in known:
            raise filters.BadParameter(name, f"not a parameter here (known: {', '.join(sorted(known))})")


def _whole(text: str | None, name: str, default: int, low: int, high: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise filters.BadParameter(name, f"a whole number from {low} to {high}")
    return int(text)


def _flag(value: Any, name: str) -> bool:
    """A boolean of a body, or "true"/"false" of a query."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if value in ("true", "false", "1", "0"):
        return value in ("true", "1")
    raise filters.BadParameter(name, "true or false")
