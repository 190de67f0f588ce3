"""An operator's suspensions, as the command line and the admin API make them: a
suspended account is disabled too (until the suspension ends), so that the
account pools skip it; everything else is held by delivery (mtad.spool.suspensions)."""

from __future__ import annotations

from datetime import datetime

from mtad import db
from mtad.mailboxes import accounts
from mtad.spool import suspensions


async def suspend(
    database: db.Database, kind: str, key: str, reason: str, until: datetime | None, now: datetime
) -> suspensions.Suspension:
    if kind == "account":
        await accounts.set_state(database, key, accounts.State.DISABLED, until, f"suspended: {reason}", now)
    return await suspensions.suspend(database, kind, key, reason, until, now)


async def resume(database: db.Database, kind: str, key: str, now: datetime) -> int | None:
    released = await suspensions.resume(database, kind, key, now)
    if released is not None and kind == "account":
        await accounts.enable(database, key, "resumed", now)
    return released
