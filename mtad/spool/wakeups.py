"""Waking the event consumers and the delivering nodes after a commit, by a NOTIFY in
a transaction of its own.

A NOTIFY made by a transaction that writes takes a lock of the whole cluster at
its commit and holds it until its WAL is flushed (PostgreSQL sends notifications
in commit order): writers that each notified would commit one at a time instead
of sharing a flush. The accept, begin and record statements make none (they set
mtad.wake_after_commit, which the events trigger reads); their callers call these
once the statement is committed. A transaction that only notifies writes its
commit record alone (40 octets), which PostgreSQL does not wait to flush when
nothing else was written, so it holds that lock for a moment. A wake that fails only leaves the sleepers to
their next poll.
"""

from __future__ import annotations

import structlog

from mtad import db
from mtad.base import errors

log = structlog.get_logger("mtad.spool")


async def consumers(database: db.Database) -> None:
    """The event consumers of every node (NOTIFY mtad_events): events were committed."""
    await _notify(database, "events/wake")


async def consumers_and_nodes(database: db.Database, due: bool) -> None:
    """The event consumers, and the delivering nodes when `due` (queued deliveries
    were committed), in one transaction."""
    await _notify(database, "spool/wake", due)


async def _notify(database: db.Database, statement: str, *args: object) -> None:
    try:
        await database.execute(statement, *args)
    except errors.SpoolError as exc:
        log.info("wake_failed", statement=statement, error=str(exc))
