"""Waking the event consumers and the delivering nodes after a commit, by a NOTIFY in
a transaction of its own.

A NOTIFY made by a transaction that writes takes a lock of the whole cluster at
its commit and holds it until its WAL is flushed (PostgreSQL sends notifications
in commit order): writers that each notified would commit one at a time instead
of sharing a flush. The accept, begin and record statements make none (they set
mtad.wake_after_commit, which the events trigger reads); their callers call these
once the statement is committed, the busy ones spaced: the group commit every
SPACING at most, the record of outcomes every CONSUMERS_SPACING (Spaced). A
transaction that only notifies writes its commit record alone (40 octets), which
PostgreSQL does not wait to flush when nothing else was written, so it holds that
lock for a moment. A wake that fails only leaves the sleepers to their next poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from mtad import db
from mtad.base import errors

log = structlog.get_logger("mtad.spool")

# Seconds from one wake-up to the next at least, for the group commit: the batches
# committed meanwhile share the next (a lone session commits a batch a message, and
# each wake-up is a transaction). Its wake-ups wake the delivering nodes too.
SPACING = 0.01
# The same for wake-ups of the consumers alone: they linger 0.25 s after one anyway.
CONSUMERS_SPACING = 0.1


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


class Spaced:
    """The consumers' wake-ups of a writer that commits batch after batch (the record
    of outcomes): one NOTIFY on its way at a time, CONSUMERS_SPACING apart, each
    covering the batches committed before it; sent by a task of `spawn`'s, so no
    writer waits."""

    def __init__(self, database: db.Database, spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self._db = database
        self._spawn = spawn
        self._asked = False  # a batch was committed since the last wake-up went
        self._sending = False  # the task is on its way

    def consumers(self) -> None:
        """Events were committed: the consumers are woken soon. Sync, no I/O."""
        self._asked = True
        if not self._sending:
            self._sending = True
            self._spawn(self._send())

    async def _send(self) -> None:
        try:
            while self._asked:
                self._asked = False
                await consumers(self._db)
                await asyncio.sleep(CONSUMERS_SPACING)
        finally:
            self._sending = False
