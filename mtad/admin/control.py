"""An operator's suspensions, as the command line and the admin API make them: a
suspended account is disabled too (until the suspension ends), so that the
account pools skip it; everything else is held by delivery (mtad.spool.suspensions).

Every command that changes what may be sent or submitted (suspend, resume, tenants
pause|resume, queue reroute, accounts disable|enable) calls `held()` once its change
is committed: it returns once every live node has applied it (mtad.spool.controls),
so that it holds when the command answers."""

from __future__ import annotations

from datetime import datetime

from mtad import db
from mtad.mailboxes import accounts
from mtad.spool import controls, suspensions


async def suspend(
    database: db.Database, kind: str, key: str, reason: str, until: datetime | None, now: datetime
) -> suspensions.Suspension:
    if kind == "account":
        await accounts.set_state(database, key, accounts.State.DISABLED, until, f"suspended: {reason}", now)
    return await suspensions.suspend(database, kind, key, reason, until, now)


async def resume(database: db.Database, kind: str, key: str, now: datetime) -> int | None:
    released = await suspensions.resume(database, kind, key, now)
    if released is not None and kind == "account":
        released += (await enable(database, key, "resumed", now))[1]
    return released


async def enable(database: db.Database, name: str, reason: str | None, now: datetime) -> tuple[accounts.Account, int]:
    """Make the account active again, and what its pool handed back to the spool
    while no account of it could send due now: (the account, how many deliveries)."""
    account = await accounts.enable(database, name, reason, now)
    return account, await suspensions.release_pool(database, account.pool, now)


async def held(database: db.Database, node_timeout: float, *, within: float = controls.WITHIN) -> controls.Acks:
    """Tell every node of the change just committed and wait (at most `within`
    seconds) until each live node has applied it; then wake delivery, for what a
    resume made due (each node has applied the change before it leases it)."""
    acks = await controls.held(database, node_timeout, within=within)
    await database.execute("leases/notify_due")
    return acks
