"""Retention: what the spool no longer needs is deleted, so that it stops growing.

A round deletes, in batches of `batch` rows, each batch one statement and its own
short transaction over a range of a primary key (never a scan of the hot indexes):
messages received more than `messages` ago whose every delivery is final, with
their deliveries; events older than `events` (account events no sooner than the
breaker and the health score stop reading them); settled mailbox reservations and
daily counts older than any limit reads; the reputation windows' and quotas'
counts as old; soft bounces older than their window ([suppression] soft_window);
webhook requests delivered or given up more than `events` ago. The campaigns'
moves are folded into their counts (mtad.spool.campaigns). At most one node
prunes at a time: a session advisory lock on a connection of the round's own.
`purge` does the same at once for everything before a given time (`mtad queue
purge`).

Expired idempotency keys ([spool] idempotency_window) go in the same rounds; a key
outlives its message harmlessly, since a resubmission needs only the key to be
recognised. After a round, an index of the spool's tables left mostly empty (a
backlog deleted) is rebuilt without blocking writes, so that its pages go back to
the file system ([retention] reindex).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

import structlog

from mtad import db
from mtad.base import errors, lifecycle, values
from mtad.spool import campaigns, settings

logger = structlog.get_logger("mtad.retention")

DAY = 86400.0
# What the account limits read at most: the daily cap (a day in any time zone),
# the health score (24 h), the rate windows (1 h). The breaker's window may be longer.
ACCOUNT_HISTORY = 2 * DAY
LOCK_KEY = 0x6D7461645F707275  # pg_advisory_lock key "mtad_pru"
FINAL = sorted(state.value for state in lifecycle.FINAL)
SPARSE_INDEX_SIZE = 1 << 20  # octets: smaller indexes are left as they are
SPARSE_ENTRIES_PER_PAGE = 10  # fewer entries a page on average: mostly empty (a rebuilt btree holds hundreds)
_NO_QUEUE_ID = uuid.UUID(int=0)
_NO_ID = 0


Settings = settings.Retention  # [retention]


@dataclass(slots=True)
class Pruned:
    """What a round (or a purge) deleted, and the old messages it kept."""

    messages: int = 0
    deliveries: int = 0
    kept: int = 0  # messages old enough but with a delivery not final yet
    events: int = 0
    reservations: int = 0
    days: int = 0
    keys: int = 0  # expired idempotency keys
    webhooks: int = 0  # webhook requests delivered or dead
    windows: int = 0  # reputation minute counts and quota counts of days gone
    soft_bounces: int = 0  # soft bounces older than their window
    indexes: int = 0  # indexes rebuilt, being mostly empty pages
    folded: int = 0  # campaign moves folded into their counts (nothing is lost)
    batches: int = 0

    def removed(self) -> int:
        return (self.messages + self.deliveries + self.events + self.reservations + self.days + self.keys
                + self.webhooks + self.windows + self.soft_bounces)  # fmt: skip

    def counts(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Everything older than these goes (a message only once its deliveries are final)."""

    messages: datetime
    events: datetime
    account_history: datetime  # account events, reservations and daily counts
    keys: datetime  # idempotency keys that expired before this
    soft_bounces: datetime | None = None  # soft bounces (None: none go)


def first_queue_id(at: datetime) -> uuid.UUID:
    """The smallest queue id made at `at` or later (spool.new_queue_id: milliseconds first)."""
    ms = int(at.timestamp() * 1000) & ((1 << 48) - 1)
    return uuid.UUID(int=ms << 80)


async def prune(
    database: db.Database,
    cutoffs: Cutoffs,
    *,
    batch: int,
    pause: float = 0.0,
    wait: bool = False,
    reindex: bool = False,
) -> Pruned | None:
    """Delete everything `cutoffs` let go, batch by batch; None when another node
    holds the pruning lock and `wait` is false (with `wait`, once it has finished).
    Each batch commits on its own: what was deleted stays deleted if this stops."""
    conn = await db.connect_once(database.dsn)
    try:
        await conn.fetchval("retention/session")
        if wait:
            await conn.fetchval("retention/wait_lock", LOCK_KEY)
        elif not await conn.fetchval("retention/lock", LOCK_KEY):
            return None
        pruned = Pruned()
        await _messages(conn, cutoffs.messages, batch, pause, pruned)
        accounts = min(cutoffs.events, cutoffs.account_history)  # account events: no sooner than the limits allow
        pruned.events += await _by_id(conn, "retention/events", cutoffs.events, accounts, batch=batch, pause=pause,
                                      pruned=pruned)  # fmt: skip
        pruned.reservations += await _by_id(conn, "retention/reservations", cutoffs.account_history, batch=batch,
                                            pause=pause, pruned=pruned)  # fmt: skip
        pruned.days = int(await conn.fetchval("retention/days", cutoffs.account_history))
        pruned.windows = int(await conn.fetchval("retention/windows", cutoffs.account_history))
        if cutoffs.soft_bounces is not None:
            pruned.soft_bounces += await _in_batches(conn, "retention/soft_bounces", cutoffs.soft_bounces,
                                                     batch=batch, pause=pause, pruned=pruned)  # fmt: skip
        pruned.webhooks += await _by_id(conn, "retention/webhooks", cutoffs.events, batch=batch, pause=pause,
                                        pruned=pruned)  # fmt: skip
        pruned.keys += await _in_batches(conn, "retention/keys", cutoffs.keys, batch=batch, pause=pause,
                                         pruned=pruned)  # fmt: skip
        pruned.folded += await _folded(conn, cutoffs.account_history, batch, pause, pruned)
        if reindex:  # still holding the lock: one node rebuilds
            await _rebuild_sparse(conn, pruned)
        return pruned
    finally:
        await db.close(conn)  # the lock goes with the session


async def purge(
    database: db.Database, before: datetime, *, account_history: float, batch: int, soft_window: float | None = None
) -> Pruned:
    """Delete at once the messages received before `before` whose every delivery is
    final, and the events before it (account history only as far as the limits allow,
    see Pruner; soft bounces only once out of `soft_window`), waiting for a round of
    another node to end first."""
    now = datetime.now(UTC)
    history = now - timedelta(seconds=max(ACCOUNT_HISTORY, account_history))
    soft = None if soft_window is None else min(before, now - timedelta(seconds=soft_window))
    cutoffs = Cutoffs(before, before, min(before, history), now, soft)
    pruned = await prune(database, cutoffs, batch=batch, wait=True)
    assert pruned is not None  # waited for the lock
    return pruned


async def compact(database: db.Database, *, reindex: bool) -> tuple[int, int]:
    """VACUUM the tables retention deletes from (the empty pages at their ends go back
    to the file system) and, with `reindex`, rebuild their indexes without blocking
    writes; returns the database's size before and after, in octets. Each statement
    runs outside a transaction, and a REINDEX waits for the transactions under way."""
    before = int(await database.fetchval("retention/size"))
    await database.execute("retention/vacuum")
    if reindex:
        for table in ("messages", "deliveries", "events"):
            await database.execute(f"retention/reindex_{table}")
    return before, int(await database.fetchval("retention/size"))


async def _messages(conn: db.Connection, before: datetime, batch: int, pause: float, pruned: Pruned) -> None:
    after, bound = _NO_QUEUE_ID, first_queue_id(before)
    while True:
        row = await conn.fetchrow("retention/messages", after, bound, batch, before, FINAL)
        assert row is not None
        pruned.batches += 1
        pruned.messages += row["messages"]
        pruned.deliveries += row["deliveries"]
        pruned.kept += row["kept"]
        if row["last"] is None:
            return
        after = row["last"]
        await _paused(pause)


async def _by_id(conn: db.Connection, statement: str, *args: object, batch: int, pause: float, pruned: Pruned) -> int:
    """Run a batch statement over a table whose ids follow time (events.sql,
    reservations.sql: after an id, `args`, a batch size) until it runs out of rows or
    reaches young ones; returns how many rows went."""
    after, deleted = _NO_ID, 0
    while True:
        row = await conn.fetchrow(statement, after, *args, batch)
        assert row is not None
        pruned.batches += 1
        deleted += int(row["deleted"])
        if row["last"] is None or row["young"]:
            return deleted
        after = row["last"]
        await _paused(pause)


async def _in_batches(conn: db.Connection, statement: str, before: datetime, *, batch: int, pause: float,
                      pruned: Pruned) -> int:  # fmt: skip
    """Run a statement that deletes up to `batch` rows older than `before` (and returns
    how many) until a batch comes short; returns how many rows went."""
    deleted = 0
    while True:
        went = int(await conn.fetchval(statement, before, batch))
        pruned.batches += 1
        deleted += went
        if went < batch:
            return deleted
        await _paused(pause)


async def _folded(conn: db.Connection, before: datetime, batch: int, pause: float, pruned: Pruned) -> int:
    """The campaigns' moves folded into their counts, batch by batch; their minutes
    before `before` forgotten."""
    total = 0
    while True:
        folded = await campaigns.fold(conn, before, batch)
        total += folded
        pruned.batches += 1
        if folded < batch:
            return total
        await _paused(pause)


async def _rebuild_sparse(conn: db.Connection, pruned: Pruned) -> None:
    """Rebuild, one at a time and without blocking writes, the spool's indexes that
    are mostly empty pages (sparse_indexes.sql). REINDEX CONCURRENTLY runs outside a
    transaction, waits for the transactions under way, and takes no parameter: the
    name comes from pg_class (regclass quotes it)."""
    for row in await conn.fetch("retention/sparse_indexes", SPARSE_INDEX_SIZE, SPARSE_ENTRIES_PER_PAGE):
        await conn.execute_text(f"REINDEX INDEX CONCURRENTLY {row['name']}")
        after = int(await conn.fetchval("retention/index_size", row["name"]))
        logger.info("index_rebuilt", index=row["name"], octets_before=int(row["octets"]), octets_after=after)
        pruned.indexes += 1


async def _paused(pause: float) -> None:
    if pause > 0:
        await asyncio.sleep(pause)


class Pruner:
    """The node's pruning loop: a round every `interval`, deleting what the windows
    of `settings` let go at `now()`; account history is kept `account_history`
    seconds (at least ACCOUNT_HISTORY: the caller adds the breaker's window), soft
    bounces `soft_window` seconds ([suppression] soft_window; None: kept)."""

    def __init__(
        self,
        database: db.Database,
        settings: Settings,
        *,
        account_history: float = ACCOUNT_HISTORY,
        soft_window: float | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._database = database
        self.settings = settings
        self._account_history = max(ACCOUNT_HISTORY, account_history)
        self._soft_window = soft_window
        self._now = now

    def cutoffs(self) -> Cutoffs:
        """The cutoffs at now(). Sync, no I/O."""
        now = self._now()
        return Cutoffs(
            messages=now - timedelta(seconds=self.settings.messages),
            events=now - timedelta(seconds=self.settings.events),
            account_history=now - timedelta(seconds=self._account_history),
            keys=now,
            soft_bounces=None if self._soft_window is None else now - timedelta(seconds=self._soft_window),
        )

    async def prune_once(self) -> Pruned | None:
        """One round, until nothing more is old enough; None when another node prunes now."""
        settings = self.settings
        started = time.monotonic()
        pruned = await prune(self._database, self.cutoffs(), batch=settings.batch, pause=settings.pause,
                             reindex=settings.reindex)  # fmt: skip
        if pruned is None:
            logger.debug("pruning_elsewhere", why="another node holds the pruning lock")
        elif pruned.removed() or pruned.kept:
            logger.info("pruned", **pruned.counts(), seconds=round(time.monotonic() - started, 3))
        return pruned

    async def run(self) -> None:
        """Rounds every `interval` until cancelled; a round that fails is logged and retried."""
        while True:
            try:
                await self.prune_once()
            except errors.SpoolError as exc:
                logger.warning("pruning_failed", error=str(exc))
            await asyncio.sleep(self.settings.interval)


def moment(text: str, now: datetime) -> datetime:
    """A time given by an operator: an ISO date or date and time (UTC unless it says
    otherwise), or a duration such as "3d" meaning that long before `now`. ValueError
    says what was expected. Sync, no I/O."""
    try:
        return now - timedelta(seconds=values.duration(text))
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f'expected an ISO date or time such as "2026-11-01" or "2026-11-01T12:00Z", or a duration '
            f'such as "3d" or "12h", got {text!r}'
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
