"""Inboxes: which sending accounts' inboxes mtad reads, who reads each, and how far.

An account whose inbox is read has a row in `inboxes` (migration 0015): its IMAP
server (implicit TLS, the account's own login), its read position (the mailbox's
UIDVALIDITY and the last UID done) and the lease of the node reading it. One node
of the cluster reads an inbox at a time: it takes the lease when none is held or
the holder's has run out, renews it while it reads, and moves the position only
while it holds it. Everything here is one statement and raises what mtad.db raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mtad import db

IMAP_PORT = 993
# The IMAP server of the providers whose smarthost names it: the inbox read when
# `mtad accounts add` is given no --imap-host.
PROVIDER_IMAP = {
    "smtp.gmail.com": "imap.gmail.com",
    "smtp-relay.gmail.com": "imap.gmail.com",
    "smtp.office365.com": "outlook.office365.com",
    "smtp-mail.outlook.com": "outlook.office365.com",
}


@dataclass(frozen=True, slots=True)
class Inbox:
    """An inbox that is read, and how far."""

    account: int  # accounts.id
    host: str
    port: int
    uidvalidity: int | None  # None: never read
    last_uid: int  # every message up to this UID is done
    name: str = ""  # the account's
    account_created: datetime | None = None  # the first read starts at this day's mail
    node: str | None = None  # the reader, while lease_until is ahead
    lease_until: datetime | None = None
    read_at: datetime | None = None  # when it was last read to its end
    error: str | None = None  # why the last session failed


def provider_host(smarthost: str) -> str | None:
    """The IMAP server of a provider's smarthost (Google, Microsoft), else None."""
    return PROVIDER_IMAP.get(smarthost.lower().rstrip("."))


async def configure(database: db.Database, account: int, host: str, port: int = IMAP_PORT) -> bool:
    """Read the account's inbox at host:port (another server starts afresh); False
    when no such account."""
    return bool(await database.fetchval("inboxes/set", account, host, port))


async def remove(database: db.Database, account: int) -> bool:
    """Stop reading the account's inbox; False when it was not read."""
    return bool(await database.fetchval("inboxes/remove", account))


async def listing(database: db.Database, account: int | None = None) -> list[Inbox]:
    """Every inbox that is read (of one account), by account name."""
    return [_inbox(row) for row in await database.fetch("inboxes/list", account)]


async def take(database: db.Database, account: int, node: str, now: datetime, until: datetime) -> Inbox | None:
    """The lease on the account's inbox for `node` until `until`, unless another node's
    runs past `now`; the inbox when taken."""
    row = await database.fetchrow("inboxes/take", account, node, now, until)
    return _inbox(row) if row is not None else None


async def renew(database: db.Database, node: str, accounts: Sequence[int], until: datetime) -> set[int]:
    """Extend the node's leases; returns the accounts whose inbox it still reads."""
    return {row["account"] for row in await database.fetch("inboxes/renew", node, list(accounts), until)}


async def release(database: db.Database, node: str, accounts: Sequence[int]) -> None:
    await database.execute("inboxes/release", node, list(accounts))


async def advance(
    database: db.Database,
    account: int,
    node: str,
    uidvalidity: int,
    last_uid: int,
    *,
    read_at: datetime | None = None,
    error: str | None = None,
) -> bool:
    """Every message up to `last_uid` is done (and the inbox was read to its end at
    `read_at`, when given); False when the node no longer reads it."""
    return bool(await database.fetchval("inboxes/advance", account, node, uidvalidity, last_uid,
                                        read_at is not None, read_at, error))  # fmt: skip


async def failed(database: db.Database, account: int, node: str, error: str) -> None:
    await database.execute("inboxes/failed", account, node, error[:500])


def _inbox(row: db.Row) -> Inbox:
    return Inbox(
        row["account"], row["host"], row["port"], row["uidvalidity"], row["last_uid"], row["name"],
        row["account_created"], row["node"], row["lease_until"], row["read_at"], row["error"],
    )  # fmt: skip
