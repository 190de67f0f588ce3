"""Event consumers: what reads the event log and acts on it (suppression, and the
webhooks, reputation and reports to come).

Each consumer keeps its own position in PostgreSQL (`event_consumers`) and reads
the events after it in (xid, id) order, below the oldest transaction still
running, so that an event committed late is never skipped. A batch is handled
and the position moved in one transaction, on the connection given to the
handler: what a handler writes there is done exactly once, and anything it does
outside (a request) at least once. The position row is locked while a batch is
handled (SKIP LOCKED): on several nodes each event is handled once per consumer,
by whichever node holds the row (an Attempting handler's is claimed by a session
lock instead while its batch is attempted outside a transaction). A consumer wakes on NOTIFY `mtad_events` (sent
after the commit of what writes events; the busy writers, accept and record, send
one for the batches committed within 10 or 100 ms: spool.wakeups; it lingers a
moment so that a batch gathers what commits meanwhile), else every `poll`; it catches up by itself
after downtime or a kill -9, since nothing moves its position but a commit. A
handler that wants no event for now (no webhook endpoint exists: Idling) moves
past them unread; one that counts some kinds in SQL (Spanning: the reputation
windows' delivered events) is told the span of the log its batch covers. A
batch that fails is retried after a pause (doubling up to a minute), alone if it
fails again, and an event that fails `max_failures` times alone is skipped with
an error logged; one consumer's failures hold no other back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.feedback import event_log

log = structlog.get_logger("mtad.consumers")

CHANNEL = event_log.CHANNEL
MAX_PAUSE = 60.0  # seconds between retries of a failing batch, at most


# The log's events as read (feedback.event_log: `mtad events tail` reads them without the consumers).
Stored = event_log.Stored
stored = event_log.stored
after = event_log.after


class Handler(Protocol):
    """What a consumer does with its events."""

    @property
    def name(self) -> str:
        """Its position's name: never reuse one for another purpose."""
        ...

    @property
    def kinds(self) -> frozenset[str] | None:
        """The kinds it reads (None: every kind)."""
        ...

    async def handle(self, conn: db.Connection, batch: Sequence[Stored]) -> Callable[[], None] | None:
        """Act on a batch, in order; raise to have it retried. Writes on `conn` commit
        with the position; what it returns is called once they have."""
        ...


@runtime_checkable
class Idling(Handler, Protocol):
    """A handler that may want no event at all for now (no webhook endpoint exists)."""

    async def idle(self, conn: db.Connection) -> bool:
        """Whether it would do nothing with any event committed so far: then its position
        moves past them unread."""
        ...


Position = tuple[int, int]  # (xid, id): every event at or below it is done


@runtime_checkable
class Spanning(Handler, Protocol):
    """A handler that acts on the events of the log its batch spans that it does not
    read (its `kinds` leave them out), in SQL over the log itself: the consumer calls
    `spanned`, not `handle` (never for an Attempting handler)."""

    async def spanned(
        self, conn: db.Connection, batch: Sequence[Stored], start: Position, end: Position
    ) -> Callable[[], None] | None:
        """As `handle`, for the batch (perhaps empty) read after position `start`, and
        every event after `start` up to `end` (the position the consumer moves to)."""
        ...


@runtime_checkable
class Attempting(Handler, Protocol):
    """A handler that acts outside any transaction first (requests that must not hold
    one open: an open transaction holds back what every other can prune), then in
    the transaction that moves its position (`handle`, as any handler's)."""

    async def attempt(self, conn: db.Connection, batch: Sequence[Stored]) -> None:
        """Act on a batch before `handle` gets the same batch, on `conn` outside a
        transaction; raise to have the batch retried (attempted again)."""
        ...


@dataclass(frozen=True, slots=True)
class Settings:
    poll: float = 5.0  # seconds between looks when no NOTIFY comes
    # Seconds a consumer waits after a NOTIFY before it reads: the events of the
    # transactions that commit meanwhile join its batch (every transaction that writes
    # events notifies, and a batch costs a transaction of its own).
    linger: float = 0.25
    batch: int = 500  # events per transaction at most
    span: int = 10_000  # transactions of the log a Spanning handler's span covers at most
    max_failures: int = 5  # an event that fails this often alone is skipped


class Consumers:
    """Runs every handler until cancelled; see the module docstring."""

    def __init__(
        self,
        database: db.Database,
        handlers: Sequence[Handler],
        settings: Settings = Settings(),
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        names = [h.name for h in handlers]
        if len(set(names)) != len(names):
            raise ValueError(f"two event consumers share a name: {names}")
        self._db = database
        self._handlers = list(handlers)
        self.settings = settings
        self._now = now
        self._wake = {h.name: asyncio.Event() for h in handlers}
        self._listening = db.Listening(database.dsn, CHANNEL, self._woken)
        self._own: dict[str, db.Connection] = {}  # an attempting handler's connection (it claims)

    async def run(self) -> None:
        for handler in self._handlers:
            await self._db.execute("consumers/start", handler.name, self._now())
        try:
            async with asyncio.TaskGroup() as tasks:
                await self._listening.keep()
                for handler in self._handlers:
                    tasks.create_task(self._consume(handler), name=f"consumer:{handler.name}")
                tasks.create_task(self._watch(), name="consumer-lag")
        finally:
            await self._listening.close()
            await self._let_go()

    async def catch_up(self) -> int:
        """Handle every event due now, consumer by consumer; returns how many (tests, tools)."""
        total = 0
        try:
            for handler in self._handlers:
                await self._db.execute("consumers/start", handler.name, self._now())
                while True:
                    done, full = await self._step(handler, self.settings.batch)
                    total += done
                    if not full:
                        break
        finally:
            await self._let_go()
        return total

    def _woken(self) -> None:
        for event in self._wake.values():
            event.set()

    async def _consume(self, handler: Handler) -> None:
        wake = self._wake[handler.name]
        pause = 0.0  # after a failure
        failures = 0  # in a row, at the same position
        alone = 0  # events still to handle one at a time, to find the one a batch failed on
        while True:
            wake.clear()
            try:
                done, full = await self._step(handler, 1 if alone else self.settings.batch)
            except errors.DatabaseUnavailable as exc:  # the database went away: wait for it; no event is at fault
                log.warning("consumer_waiting", consumer=handler.name, error=str(exc))
                pause = min(MAX_PAUSE, max(0.5, pause * 2))
                await asyncio.sleep(pause)
                continue
            except Exception as exc:  # a handler's bug: it must not stop the others
                failures += 1
                metrics.CONSUMER_FAILURES.labels(consumer=handler.name).inc()
                log.warning("consumer_failed", consumer=handler.name, failures=failures, error=str(exc))
                if not alone and failures >= 2:
                    alone, failures = self.settings.batch, 0  # then one at a time
                elif alone and failures >= self.settings.max_failures:
                    with contextlib.suppress(errors.DatabaseUnavailable):  # not skipped now: tried again
                        await self._skip(handler, str(exc))
                        alone, failures, pause = max(0, alone - 1), 0, 0.0
                        continue
                pause = min(MAX_PAUSE, max(0.5, pause * 2))
                await asyncio.sleep(pause)
                continue
            alone = max(0, alone - done) if done else 0
            failures, pause = 0, 0.0
            if full:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll):
                    await wake.wait()
                    await asyncio.sleep(self.settings.linger)

    async def _step(self, handler: Handler, size: int) -> tuple[int, bool]:
        """One batch in one transaction; returns how many events and whether more may wait."""
        if isinstance(handler, Attempting):
            return await self._attempted(handler, size)
        committed = None
        async with self._db.transaction() as conn:
            position = await conn.fetchrow("consumers/lock", handler.name)
            if position is None:
                return 0, False  # another node is at it
            batch, xid, last = await _read(conn, handler, position, size)
            full = len(batch) == size
            if isinstance(handler, Spanning):
                if xid - position["xid"] > self.settings.span:  # a span as long as a transaction should be
                    xid, last, full = position["xid"] + self.settings.span, 0, True
                    batch = [e for e in batch if e.xid is not None and e.xid < xid]
                committed = await handler.spanned(conn, batch, (position["xid"], position["id"]), (xid, last))
            elif batch:
                committed = await handler.handle(conn, batch)
            await conn.execute("consumers/advance", handler.name, str(xid), last, self._now())
        if committed is not None:
            committed()
        metrics.EVENTS_CONSUMED.labels(consumer=handler.name).inc(len(batch))
        return len(batch), full

    async def _attempted(self, handler: Attempting, size: int) -> tuple[int, bool]:
        """One batch of an attempting handler, on the consumer's own connection, which
        claims the position meanwhile (a session lock: claim.sql): read and attempted
        outside a transaction, then handled and the position moved in one, unless
        another node moved it meanwhile (one that does not claim: its batch is
        dropped, the attempt was at least once)."""
        conn = self._own.get(handler.name)
        if conn is None:
            conn = self._own[handler.name] = await db.connect_once(self._db.dsn)
        committed = None
        try:
            if not await conn.fetchval("consumers/claim", handler.name):
                return 0, False  # another node is at it
            try:
                position = await conn.fetchrow("consumers/position", handler.name)
                if position is None:
                    return 0, False
                batch, xid, last = await _read(conn, handler, position, size)
                if batch:
                    await handler.attempt(conn, batch)
                async with conn.transaction():
                    locked = await conn.fetchrow("consumers/lock", handler.name)
                    if locked is None or (locked["xid"], locked["id"]) != (position["xid"], position["id"]):
                        return 0, False
                    if batch:
                        committed = await handler.handle(conn, batch)
                    await conn.execute("consumers/advance", handler.name, str(xid), last, self._now())
            finally:
                await conn.fetchval("consumers/unclaim", handler.name)
        except errors.DatabaseUnavailable:
            await db.close(self._own.pop(handler.name, conn))  # another connection next time
            raise
        if committed is not None:
            committed()
        metrics.EVENTS_CONSUMED.labels(consumer=handler.name).inc(len(batch))
        return len(batch), len(batch) == size

    async def _let_go(self) -> None:
        for conn in self._own.values():
            await db.close(conn)
        self._own.clear()

    async def _skip(self, handler: Handler, why: str) -> None:
        """Past the one event that keeps failing: logged, and never handled."""
        kinds = sorted(handler.kinds) if handler.kinds is not None else None
        async with self._db.transaction() as conn:
            position = await conn.fetchrow("consumers/lock", handler.name)
            if position is None:
                return
            rows = await conn.fetch("consumers/read", str(position["xid"]), position["id"], kinds, 1)
            if rows[0]["id"] is None:
                return
            await conn.execute("consumers/advance", handler.name, str(rows[0]["xid"]), rows[0]["id"], self._now())
        log.error("event_skipped", consumer=handler.name, event_id=rows[0]["id"], kind=rows[0]["kind"], error=why)

    async def _watch(self) -> None:
        """Every poll: LISTEN again if the connection was lost, and the lag of each consumer."""
        names = [h.name for h in self._handlers]
        while True:
            await self._listening.keep()
            try:
                rows = await self._db.fetch("consumers/lag", names)
            except errors.SpoolError as exc:
                log.warning("consumer_lag_unknown", error=str(exc))
            else:
                now = self._now()
                for row in rows:
                    oldest = row["oldest"]
                    lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
                    metrics.CONSUMER_LAG.labels(consumer=row["name"]).set(lag)
            await asyncio.sleep(self.settings.poll)


async def _read(conn: db.Connection, handler: Handler, position: db.Row, size: int) -> tuple[list[Stored], int, int]:
    """The batch after `position` (at most `size` events) and the position after it:
    none, and the horizon, when the handler is idle (the horizon is taken first, so
    that every event below it was committed before the handler said so)."""
    if isinstance(handler, Idling):
        horizon = await conn.fetchval("consumers/horizon")
        if await handler.idle(conn):
            return [], horizon, 0
    kinds = sorted(handler.kinds) if handler.kinds is not None else None
    rows = await conn.fetch("consumers/read", str(position["xid"]), position["id"], kinds, size)
    batch = [stored(r) for r in rows if r["id"] is not None]
    return batch, *after(batch, rows, size)
