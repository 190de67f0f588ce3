"""The JSON views the command line (`--json`) and the admin API share. Each returns
a dict of JSON-able values (datetimes are written by the caller's encoder)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mtad import db

if TYPE_CHECKING:  # `mtad queue ls --json` needs none of them
    from mtad.feedback import reputation
    from mtad.mailboxes import accounts, inboxes
    from mtad.spool import queue, quotas


def delivery(row: dict[str, Any]) -> dict[str, Any]:
    """One delivery (a row of queue.deliveries)."""
    reply = None
    if row["last_code"] is not None:
        reply = {"code": row["last_code"], "enhanced": row["last_enhanced"], "text": row["last_text"]}
    return {
        "id": row["id"],
        "queue_id": str(row["message"]),
        "message_id": row["message_id"],
        "tenant": row["tenant"],
        "sender": row["sender"],
        "recipient": row["recipient"],
        "state": row["state"],
        "priority": row["priority"],
        "attempts": row["attempts"],
        # null: held until its tenant is resumed or its suspension ends, or (unknown) until retried: infinity
        "next_attempt_at": None if row["next_attempt_at"].year == 9999 else row["next_attempt_at"].isoformat(),
        "reason": row["reason"],
        "last_reply": reply,
        "last_reason": row.get("last_reason"),  # mtad.base.reasons, shown by a message (None in lists)
        "status": row["last_enhanced"],
        "lease_owner": row["lease_owner"],
        "provider": row["route_group"],
        "created_at": row["created_at"].isoformat(),
    }


def message(view: queue.MessageView) -> dict[str, Any]:
    """A message with its header block, deliveries and events."""
    found = {k: v for k, v in view.message.items() if k not in ("head", "id")}
    head = bytes(view.message["head"])
    return {
        "queue_id": str(view.message["id"]),
        **found,
        "headers": head.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace"),
        "deliveries": [delivery(d) for d in view.deliveries],
        "events": [{**e, "data": json.loads(e["data"])} for e in view.events],
    }


def account(use: accounts.Usage, now: datetime, inbox: inboxes.Inbox | None) -> dict[str, Any]:
    """A sending account as it is now: never a secret."""
    a = use.account
    ended = a.state_until is not None and a.state_until <= now
    return {
        "name": a.name, "pool": a.pool, "address": a.address, "smarthost": f"{a.host}:{a.port}",
        "tls": a.tls.value, "login": a.login, "mechanism": a.mechanism.value,
        "state": "active" if ended else a.state.value, "until": None if ended else a.state_until,
        "reason": a.state_reason, "today": use.today, "daily_cap": a.limits.daily_cap,
        "last_send": use.last_send, "sending": use.sending, "gap_until": use.gap_until, "min_gap": a.limits.min_gap,
        "per_second": a.limits.per_second, "per_minute": a.limits.per_minute, "per_hour": a.limits.per_hour,
        "time_zone": a.time_zone, "health": use.health,
        "inbox": f"{inbox.host}:{inbox.port}" if inbox is not None else None,
        "inbox_read_at": inbox.read_at if inbox is not None else None,
        "inbox_error": inbox.error if inbox is not None else None,
    }  # fmt: skip


async def tenant(
    database: db.Database, name: str, quota: quotas.Quota, guard: reputation.Guard, now: datetime
) -> dict[str, Any]:
    """A tenant's state, probation, quotas used, limits and reputation windows (its own,
    and by provider group and source address)."""
    from mtad.feedback import reputation
    from mtad.spool import tenants

    state = await tenants.state(database, name)
    used = await database.fetchrow("tenants/usage", name, now)
    held = await database.fetch("tenants/queued_bytes", [name])
    [own] = await reputation.windows(database, "tenant", [name], now, tenant=name) or [
        {w: dict.fromkeys(reputation.OUTCOMES, 0) for w in reputation.WINDOWS}
    ]
    by = {scope: await reputation.windows(database, scope, None, now, tenant=name) for scope in ("provider", "source")}
    return {
        "tenant": name,
        "paused": state["paused_at"] is not None,
        "paused_at": state["paused_at"],
        "paused_by": state["paused_by"],
        "paused_reason": state["paused_reason"],
        "resumed_at": state["resumed_at"],
        "probation": state["probation"],
        "probation_since": state["probation_since"],
        "probation_sent": state["probation_sent"],
        "graduate_after": guard.graduate_after,
        "graduated_at": state["graduated_at"],
        "quotas": {
            "max_per_hour": quota.max_per_hour, "messages_this_hour": int(used["hour"]) if used else 0,
            "max_per_day": quota.max_per_day, "messages_today": int(used["day"]) if used else 0,
            "max_queued_bytes": quota.max_queued_bytes, "queued_bytes": int(held[0]["bytes"]) if held else 0,
        },
        "limits": {"max_complaint_rate": guard.max_complaint_rate, "max_bounce_rate": guard.max_bounce_rate,
                   "reputation_min_volume": guard.min_volume},
        "windows": {w: own[w] for w in reputation.WINDOWS},
        "providers": {r["key"]: {w: r[w] for w in reputation.WINDOWS} for r in by["provider"]},
        "sources": {r["key"]: {w: r[w] for w in reputation.WINDOWS} for r in by["source"]},
    }  # fmt: skip
