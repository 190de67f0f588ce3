"""Suppression: the addresses mail must not go to again.

One list per tenant and a global one (tenant ""), in the `suppressions` table,
addresses in lower case. An entry says why (Reason), what put it there (a
bounce's reply, an operator's note), the event that did, and until when it holds
(None: until removed). A hard or soft bounce may expire (`[suppression]
bounce_expiry`); a complaint or an unsubscribe never expires by itself, and is
never replaced by a weaker reason. The lists are checked at accept
(spool/accept.sql: the delivery is cancelled, or the RCPT refused for a tenant
that asks for it) and again just before each attempt (leases/begin.sql).

`Suppressor` is the event consumer that turns what comes back into entries: an
asynchronous bounce that says the address is gone (hard_bounce), a complaint
that says the mail was unwanted, an unsubscribe; and soft bounces (a full
mailbox, an expiry: signals.soft_bounce), in the session or after it, counted
per (tenant, address) in `soft_bounces`, once `soft_after` of them fall within
`soft_window` (soft_bounce; the count then starts again). Import and export are
CSV (address, tenant, reason, created) by COPY: a million rows take seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from mtad import db
from mtad.base import errors, events, values
from mtad.base.batching import Batcher
from mtad.feedback import consumers, settings, signals

log = structlog.get_logger("mtad.suppression")

GLOBAL = ""  # the tenant of the global list


class Reason(enum.StrEnum):
    HARD_BOUNCE = "hard_bounce"  # the receiver said the address does not exist
    SOFT_BOUNCE = "soft_bounce"  # soft bounces (a full mailbox, an expiry...) repeated: [suppression] soft_after
    COMPLAINT = "complaint"  # the recipient reported the mail as spam
    UNSUBSCRIBE = "unsubscribe"  # the recipient asked for no more
    MANUAL = "manual"  # an operator put it there


@dataclass(frozen=True, slots=True)
class Entry:
    tenant: str  # "": the global list
    address: str
    reason: Reason
    detail: str | None
    event: int | None
    delivery: int | None
    created_at: datetime
    expires_at: datetime | None

    def active(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now


def _entry(row: db.Row) -> Entry:
    return Entry(row["tenant"], row["address"], Reason(row["reason"]), row["detail"], row["event"],
                 row["delivery"], row["created_at"], row["expires_at"])  # fmt: skip


def check_address(address: str) -> str:
    """The address as the lists keep it (lower case); ValueError when it is not one."""
    found = address.strip().lower()
    local, at, domain = found.rpartition("@")
    if not at or not local or not domain or any(c.isspace() for c in found):
        raise ValueError(f"{address!r} is not an email address")
    return found


async def add(
    database: db.Database | db.Connection,
    address: str,
    reason: Reason,
    now: datetime,
    *,
    tenant: str = GLOBAL,
    detail: str | None = None,
    event: int | None = None,
    delivery: int | None = None,
    expires_at: datetime | None = None,
) -> Entry | None:
    """Suppress an address (see add.sql for what an existing entry keeps); returns the
    entry written, None when the one there was kept."""
    try:
        address = check_address(address)
    except ValueError as exc:
        raise errors.ConfigError([str(exc)]) from None
    row = await database.fetchrow("suppression/add", tenant, address, reason.value, detail, event, delivery, now,
                                  expires_at)  # fmt: skip
    return _entry(row) if row is not None else None


async def remove(database: db.Database, address: str, tenant: str = GLOBAL) -> bool:
    """True when the address was on the list."""
    return await database.fetchrow("suppression/remove", tenant, address) is not None


async def entries(database: db.Database, tenant: str | None = None, reason: Reason | None = None) -> list[Entry]:
    """The entries of a tenant's list (None: every list), with a reason (None: any)."""
    rows = await database.fetch("suppression/list", tenant, reason.value if reason else None)
    return [_entry(r) for r in rows]


class Checker:
    """Whether a recipient is suppressed for a tenant, asked at RCPT by tenants that
    refuse suppressed recipients there: the lookups of concurrent sessions go to
    PostgreSQL together (one round trip)."""

    def __init__(self, database: db.Database, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._db = database
        self._now = now
        self._asks: Batcher[tuple[str, str], bool] = Batcher(self._look)

    async def suppressed(self, tenant: str, address: str) -> bool:
        return await self._asks.submit((tenant, address))

    async def _look(self, asks: list[tuple[str, str]]) -> list[bool]:
        rows = await self._db.fetch("suppression/check_many", [t for t, _ in asks], [a for _, a in asks], self._now())
        return [r["suppressed"] for r in rows]


async def import_csv(
    database: db.Database, source: Path | BinaryIO, now: datetime, *, default_tenant: str | None = None
) -> int:
    """Take the rows of a CSV file with a header line (address, tenant, reason,
    created; tenant empty: the global list, reason empty: manual, created empty:
    now) into the lists; an address already on its list stays as it is. All or
    nothing: the first row that cannot be taken is refused with its line. With
    `default_tenant` (the tenant that needs no row), a row's tenant must be one.
    Returns how many were added."""
    async with database.transaction() as conn:
        await conn.execute("suppression/import_table")
        try:
            await conn.copy_in("suppressions_import", source, ("address", "tenant", "reason", "created"))
        except errors.SpoolError as exc:
            raise errors.ConfigError([f"the CSV cannot be read: {exc}"]) from exc
        bad = await conn.fetchrow("suppression/import_check")
        if bad is not None:
            raise errors.ConfigError([f"line {bad['line']}: {bad['why']} ({bad['value']!r})"])
        unknown = None if default_tenant is None else await conn.fetchrow("suppression/import_tenant", default_tenant)
        if unknown is not None:
            known = [t["name"] for t in await conn.fetch("tenants/list")] + [default_tenant]
            hint = values.did_you_mean(unknown["tenant"], known)
            raise errors.ConfigError([f"line {unknown['line']}: tenant: no tenant {unknown['tenant']!r}{hint}"])
        return int(await conn.fetchval("suppression/import", now))


async def export_csv(database: db.Database, output: Path | BinaryIO) -> None:
    """Every entry as CSV with a header line: address, tenant, reason, created."""
    async with database.connection() as conn:
        await conn.copy_out("suppression/export", output)


DAY = 86400.0


Settings = settings.Suppression  # [suppression]


class Suppressor:
    """The event consumer that suppresses what comes back (see the module docstring)."""

    name = "suppression"
    kinds = frozenset({events.Kind.BOUNCED.value, events.Kind.COMPLAINED.value, events.Kind.UNSUBSCRIBED.value})

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else Settings()

    async def handle(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> None:
        found: list[tuple[consumers.Stored, str, Reason]] = []
        soft: list[tuple[consumers.Stored, str]] = []
        for event in batch:
            address = event.data.get("recipient")
            if not isinstance(address, str) or not event.tenant:
                continue
            reason = self._reason(event)
            if reason is None:
                continue
            try:
                address = check_address(address)
            except ValueError:
                log.info("suppression_skipped", event_id=event.id, recipient=address, why="not an address")
                continue
            if reason is Reason.SOFT_BOUNCE:
                soft.append((event, address))
            else:
                found.append((event, address, reason))
        if soft:
            found.extend(await self._repeated(conn, soft))
            found.sort(key=lambda f: f[0].id)
        rows = []
        for event, address, reason in found:
            expires = None
            if reason in (Reason.HARD_BOUNCE, Reason.SOFT_BOUNCE) and self.settings.bounce_expiry is not None:
                expires = event.at + timedelta(seconds=self.settings.bounce_expiry)
            detail = event.data.get("reply") or event.data.get("detail")
            rows.append((event.tenant, address, reason.value, _text(detail), event.id, event.delivery, event.at,
                         expires))  # fmt: skip
        if rows:  # in the events' order: what add.sql keeps of an address is decided as they come
            await conn.executemany("suppression/add", rows)

    def _reason(self, event: consumers.Stored) -> Reason | None:
        """What the event may suppress its address for (a soft bounce: once repeated)."""
        data = event.data
        if event.kind == events.Kind.COMPLAINED.value:
            return Reason.COMPLAINT if signals.suppressing_complaint(data) else None
        if event.kind == events.Kind.UNSUBSCRIBED.value:
            return Reason.UNSUBSCRIBE
        if _gone_after_the_fact(data):  # one in the SMTP session was suppressed as it was recorded
            return Reason.HARD_BOUNCE
        if self.settings.soft_after > 0 and signals.soft_bounce(data):
            return Reason.SOFT_BOUNCE
        return None

    async def _repeated(
        self, conn: db.Connection, soft: Sequence[tuple[consumers.Stored, str]]
    ) -> list[tuple[consumers.Stored, str, Reason]]:
        """Count the soft bounces; those that make `soft_after` within `soft_window`
        suppress, and their address's count starts again."""
        tenants = [e.tenant for e, _ in soft]
        addresses = [a for _, a in soft]
        ats = [e.at for e, _ in soft]
        ids = [e.id for e, _ in soft]
        await conn.execute("suppression/soft_add", tenants, addresses, ats, ids, [e.delivery for e, _ in soft])
        window = timedelta(seconds=self.settings.soft_window)
        rows = await conn.fetch("suppression/soft_counts", tenants, addresses, ats, ids, window)
        counts = {r["event"]: r["count"] for r in rows}
        reached = [(e, a) for e, a in soft if counts.get(e.id, 0) >= self.settings.soft_after]
        if reached:
            await conn.execute("suppression/soft_clear", [e.tenant for e, _ in reached], [a for _, a in reached],
                               [e.at for e, _ in reached])  # fmt: skip
            for event, address in reached:
                log.info("soft_bounces_suppress", tenant=event.tenant, recipient=address, event_id=event.id,
                         count=counts[event.id])  # fmt: skip
        return [(e, a, Reason.SOFT_BOUNCE) for e, a in reached]


def _gone_after_the_fact(data: dict[str, Any]) -> bool:
    """A bounce that came back after a 250 (a DSN) and says the address is gone."""
    return bool(data.get("async")) and data.get("hard", True) is not False and data.get("action") != signals.DELAYED


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
