"""The campaigns over the API: listed, shown, made, paused, resumed, cancelled. A
name that is not one is a 400 naming its field; a campaign that does not exist a 404."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mtad import db
from mtad.admin import filters
from mtad.base import errors
from mtad.spool import campaigns

ACTIONS = ("pause", "resume", "cancel", "limit")
_REASONS = {"pause": "paused by an operator", "resume": "resumed by an operator", "cancel": "cancelled by an operator",
            "limit": "limited by an operator"}  # fmt: skip


def limits_of(body: dict[str, Any]) -> campaigns.Limits:
    """The limits of the body's "max_per_hour" and "max_per_day" (absent or null: none)."""
    found = []
    for field in ("max_per_hour", "max_per_day"):
        value = body.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31):
            raise filters.BadParameter(field, f"{value!r}: a whole number above 0, or null")
        found.append(value)
    return campaigns.Limits(*found)


def name_of(given: Any, field: str = "name") -> str:
    if not isinstance(given, str) or not campaigns.valid(given):
        raise filters.BadParameter(field, f"{given!r} is not a campaign name ({campaigns.NAME_RULE})")
    return given


async def listing(database: db.Database, tenant: str | None) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"campaigns": [c.view(now) for c in await campaigns.listing(database, now, tenant)]}


async def show(database: db.Database, tenant: str, name: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return (await campaigns.get(database, tenant, name_of(name), now)).view(now)


async def add(database: db.Database, tenant: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or "name" not in body:
        raise errors.MtadError(
            'give {"name": NAME, "tenant": ... (absent: the default tenant), '
            '"max_per_hour": N, "max_per_day": N (absent: none)}'
        )
    name = name_of(body["name"])
    await campaigns.add(database, tenant, name, datetime.now(UTC), limits_of(body))
    return await show(database, tenant, name)


async def act(database: db.Database, tenant: str, name: str, action: str, body: Any) -> dict[str, Any]:
    """Pause, resume, cancel or limit; what it did and the campaign's state after."""
    name, now = name_of(name), datetime.now(UTC)
    if action not in ACTIONS:
        raise errors.NotFound(f"no action {action!r} of a campaign: {', '.join(ACTIONS)}")
    reason = body.get("reason", _REASONS[action]) if isinstance(body, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        raise errors.MtadError('reason: a string, e.g. {"reason": "the wrong list"}')
    done: dict[str, Any] = {"tenant": tenant, "name": name}
    if action == "pause":
        done["held"] = await campaigns.pause(database, tenant, name, reason, now)
    elif action == "resume":
        done["released"] = await campaigns.resume(database, tenant, name, now)
    elif action == "limit":
        limits = limits_of(body if isinstance(body, dict) else {})
        await campaigns.limit(database, tenant, name, limits, now)
        done["max_per_hour"], done["max_per_day"] = limits.per_hour, limits.per_day
    else:
        done["cancelled"], done["already"] = await campaigns.cancel(database, tenant, name, reason, now)
    done["state"] = (await campaigns.get(database, tenant, name, now)).state.value
    return done
