"""The spool as the operator's tools read it: deliveries listed, a message shown."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from mtad import db
from mtad.base import errors


async def deliveries(
    database: db.Database, *, state: str | None = None, message: uuid.UUID | None = None, group: str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Stream deliveries (with their envelope), oldest first."""
    async with database.transaction() as tx:
        async for row in tx.cursor("spool/list_deliveries", state, message, group):
            yield dict(row)


@dataclass(frozen=True, slots=True)
class MessageView:
    message: dict[str, Any]
    deliveries: list[dict[str, Any]]  # each with its last_reason (mtad.base.reasons; None: none heard)
    events: list[dict[str, Any]]


async def show(database: db.Database, ident: str, *, head_bytes: int = 4096) -> MessageView:
    """A message with its deliveries and events, by queue id or delivery id."""
    message_id = await _resolve_ident(database, ident)
    row = await database.fetchrow("spool/get_message", message_id, head_bytes)
    if row is None:
        raise errors.NotFound(f"no message with queue id {ident}")
    found_events = [dict(e) for e in await database.fetch("spool/events_of_message", message_id)]
    reasons = last_reasons(found_events)
    found = [{**d, "last_reason": reasons.get(d["id"])} async for d in deliveries(database, message=message_id)]
    return MessageView(dict(row), found, found_events)


def last_reasons(found: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Each delivery's reason, as its last bounced or deferred event gives it (none
    once delivered since), from events in id order. Sync, no I/O."""
    reasons: dict[int, str] = {}
    for event in found:
        delivery = event["delivery"]
        if delivery is None:
            continue
        if event["kind"] == "delivered":
            reasons.pop(delivery, None)
        elif event["kind"] in ("bounced", "deferred"):
            reason = json.loads(event["data"]).get("reason")
            if isinstance(reason, str):
                reasons[delivery] = reason
    return reasons


async def _resolve_ident(database: db.Database, ident: str) -> uuid.UUID:
    if ident.isdigit():
        message = await database.fetchval("spool/message_of_delivery", int(ident))
        if message is None:
            raise errors.NotFound(f"no delivery with id {ident}")
        return uuid.UUID(str(message))
    try:
        return uuid.UUID(ident)
    except ValueError:
        raise errors.NotFound(f"{ident!r} is neither a queue id (a UUID) nor a delivery id (a number)") from None
