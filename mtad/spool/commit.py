"""The spool: accepted messages, their deliveries and events, in PostgreSQL.

`GroupCommitter` is the durable accept path: concurrent SMTP sessions hand it
messages, it writes them in batches (one statement, so one round trip and one
transaction, per batch: claim idempotency keys, make the campaigns named for the
first time, insert messages, deliveries and `received` events) and resolves each
session's wait only after COMMIT. While a batch is being written, new messages
queue up and form the next one, so batches grow with the load without holding a
lone message back; an optional window waits for more, and a batch closes at a
maximum count or size in bytes. Durability costs one fsync per batch, not per
message. Each message waits at most the commit timeout from its submission,
however many batches are queued ahead of it. The event consumers and the
delivering nodes are woken beside the writing, once for the batches committed
within wakeups.SPACING of each other.

The rest are the queries behind `mtad queue`.
"""

from __future__ import annotations

import asyncio
import collections
import operator
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.base.envelope import Address
from mtad.spool import settings, wakeups

log = structlog.get_logger("mtad.spool")

_DECLARED = settings.Spool()  # [spool]: the group commit's keys


def new_queue_id(now: float | None = None) -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): 48 bits of ms, then random bits.

    The random bits need to be unique, not secret: the process's PRNG (seeded
    from the OS) is 4x cheaper than a getrandom() call per message.
    """
    ms = int((time.time() if now is None else now) * 1000) & ((1 << 48) - 1)
    value = (ms << 80) | random.getrandbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message ready to be spooled, with everything delivery will need."""

    id: uuid.UUID
    tenant: str
    sender: str
    recipients: tuple[Address, ...]
    message_id: str
    idempotency_key: str | None  # "key:<Idempotency-Key>" or "msgid:<Message-ID>:<envelope digest>"
    body: bytes
    client_address: str
    received_at: datetime
    smtputf8: bool = False
    priority: int = 0  # higher goes first (-100..100 from submission)
    pool: str | None = None  # the source IP pool chosen at submission; None: not chosen
    account_pool: str | None = None  # the account pool to relay through; None: the route's, else MX
    campaign: str | None = None  # its tenant's campaign (mtad.spool.campaigns.NAME), made on first use
    # The max_per_hour and max_per_day a campaign made by this message gets: its tenant's defaults.
    campaign_limits: tuple[int | None, int | None] = (None, None)

    def __reduce__(self) -> tuple[type[NewMessage], tuple[Any, ...]]:
        """Pickled as its constructor's arguments: dataclasses' own pickling of a
        slotted class looks the fields up for every object, and a submission process
        hands every message it accepts to the daemon's delivery."""
        return NewMessage, _message_fields(self)


_message_fields = operator.attrgetter(*(f.name for f in fields(NewMessage)))


@dataclass(frozen=True, slots=True)
class Accepted:
    queue_id: uuid.UUID
    duplicate: bool


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """A delivery just created by an accept, already leased to this node (fast path)."""

    id: int
    message: NewMessage
    recipient: str
    domain: str

    def __reduce__(self) -> tuple[type[NewDelivery], tuple[int, NewMessage, str, str]]:
        return NewDelivery, (self.id, self.message, self.recipient, self.domain)  # see NewMessage's


class FastPath(Protocol):
    """Takes new deliveries leased to this node at accept time, so that a message is
    on the wire without a polling round trip (implemented by delivery's scheduler)."""

    node: str

    def lease_until(self, now: datetime) -> datetime: ...

    def has_room(self) -> bool:
        """False when the node holds all it may: new deliveries stay queued for any node."""
        ...

    def accepted(self, deliveries: list[NewDelivery]) -> None:
        """Sync: enqueue, never wait."""
        ...


@dataclass(slots=True)
class _Pending:
    message: NewMessage
    future: asyncio.Future[Accepted]
    deadline: float  # loop time after which its submitter no longer waits
    sent: bool = False  # in a batch that was written (or is being written)
    followers: list[_Pending] = field(default_factory=list)


@dataclass(slots=True)
class CommitterStats:
    batches: int = 0
    messages: int = 0
    duplicates: int = 0
    failures: int = 0
    expired: int = 0  # messages left out of their batch: their submitter no longer waited
    queued: int = 0


class GroupCommitter:
    """Batches concurrent accepts into few transactions.

    `commit()` returns after COMMIT, or raises DatabaseUnavailable (nothing was
    written) or OutcomeUnknown (the connection broke during COMMIT: the message
    may be spooled; a resubmission is recognised by its idempotency key), within
    `timeout` seconds of the call: at its deadline a message in a batch being
    written gets OutcomeUnknown, one still queued DatabaseUnavailable, and is then
    left out of its batch. A batch being written is given up (OutcomeUnknown) when
    the last of its messages' deadlines passes. One timer serves every deadline:
    messages wait in submission order, so the oldest waiting one is due first.
    """

    def __init__(
        self,
        database: db.Database,
        *,
        window: float = _DECLARED.commit_window,
        max_batch: int = _DECLARED.commit_max_batch,
        max_batch_bytes: int = _DECLARED.commit_max_batch_bytes,
        timeout: float = _DECLARED.commit_timeout,
        idempotency_window: float = _DECLARED.idempotency_window,
        fast_path: FastPath | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = database
        self._fast_path = fast_path
        self._window = window
        self._max_batch = max_batch
        self._max_bytes = max_batch_bytes
        self._timeout = timeout
        self._key_window = timedelta(seconds=idempotency_window)
        self._now = now
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._waiting: collections.deque[_Pending] = collections.deque()  # submission order; done ones leave lazily
        self._expiry: asyncio.TimerHandle | None = None  # armed while a message waits
        self._closed = False
        self._stats = CommitterStats()
        self._to_wake = False  # batches were committed since the last wake-up sent
        self._due = False  # and deliveries were left queued by one of them
        self._committed = asyncio.Event()  # for _waking: a batch was committed, or run() ends
        self._ending = False

    def statistics(self) -> CommitterStats:
        self._stats.queued = self._queue.qsize()
        return self._stats

    async def commit(self, message: NewMessage) -> Accepted:
        if self._closed:
            raise errors.DatabaseUnavailable("the spool is shutting down")
        loop = asyncio.get_running_loop()
        pending = _Pending(message, loop.create_future(), loop.time() + self._timeout)
        self._queue.put_nowait(pending)
        self._waiting.append(pending)
        if self._expiry is None:
            self._expiry = loop.call_at(pending.deadline, self._expire, pending.deadline)
        return await pending.future

    def _expire(self, due: float) -> None:
        """The timer: fail every message due by now (or by `due`, should the timer
        fire a little early), then wait for the next."""
        due = max(due, asyncio.get_running_loop().time())
        waiting = self._waiting
        while waiting and (waiting[0].future.done() or waiting[0].deadline <= due):
            self._give_up(waiting.popleft())
        self._expiry = None
        if waiting:
            deadline = waiting[0].deadline
            self._expiry = asyncio.get_running_loop().call_at(deadline, self._expire, deadline)

    def _give_up(self, pending: _Pending) -> None:
        """Answer a message whose deadline has passed, unless it already is."""
        if pending.future.done():
            return
        if pending.sent:  # its batch may still commit: a resubmission is recognised
            exc: errors.SpoolError = errors.OutcomeUnknown(f"no commit within {self._timeout:g}s")
        else:
            exc = errors.DatabaseUnavailable(f"not written within {self._timeout:g}s")
        pending.future.set_exception(exc)

    def close(self) -> None:
        """Refuse new messages; `run()` returns once what is queued is written."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    async def run(self) -> None:
        """Write batches until close(); owned by the daemon's TaskGroup.

        One batch is in flight at a time, but a batch closed by its size in bytes is
        written beside the next one: large bodies keep PostgreSQL busy for long enough
        that the next batch's writing overlaps it (100 KB at 50 sessions: 1.4x the
        rate). Two writers of small batches only made smaller batches, and slower.
        """
        async with asyncio.TaskGroup() as tasks:
            waking = tasks.create_task(self._waking())
            beside: asyncio.Task[None] | None = None  # a heavy batch being written
            stopping = False
            while not stopping:
                first = await self._queue.get()
                if first is None:
                    break
                if self._window > 0 and self._queue.qsize() < self._max_batch - 1:
                    await asyncio.sleep(self._window)
                batch = [first]
                size = len(first.message.body)
                while len(batch) < self._max_batch and size < self._max_bytes and not self._queue.empty():
                    item = self._queue.get_nowait()
                    if item is None:
                        stopping = True
                        break
                    batch.append(item)
                    size += len(item.message.body)
                if size >= self._max_bytes and (beside is None or beside.done()):
                    beside = tasks.create_task(self._write(batch))
                    continue
                await self._write(batch)
            if beside is not None:
                await beside
            self._ending = True  # _waking sends what is left and returns
            self._committed.set()
            await waking

    async def run_until_idle(self) -> None:
        """Write what is queued now, then return (for tests and tools)."""
        batch: list[_Pending] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                batch.append(item)
        for start in range(0, len(batch), self._max_batch):
            await self._write(batch[start : start + self._max_batch])
        await self._wake()

    async def _waking(self) -> None:
        """Send the wake-ups of committed batches, beside the writing: the next batch
        never waits for them, and one wake-up covers the batches committed while the
        previous one was on its way or within wakeups.SPACING after it was sent."""
        while True:
            await self._committed.wait()
            self._committed.clear()
            await self._wake()
            if self._ending and not self._to_wake:  # else a batch committed during that wake
                return
            if not self._ending:
                await asyncio.sleep(wakeups.SPACING)

    async def _wake(self) -> None:
        """Wake the event consumers and, for queued deliveries, the delivering nodes
        (spool.wakeups), when a batch was committed since the last time."""
        if not self._to_wake:
            return
        due, self._to_wake, self._due = self._due, False, False
        await wakeups.consumers_and_nodes(self._db, due)

    async def _write(self, queued: list[_Pending]) -> None:
        now = asyncio.get_running_loop().time()
        batch = []
        for pending in queued:
            if pending.future.done() or pending.deadline <= now:
                self._give_up(pending)  # never written: 451, or its session went away
            else:
                pending.sent = True
                batch.append(pending)
        if len(batch) < len(queued):
            self._stats.expired += len(queued) - len(batch)
        if batch:
            await self._write_live(batch)
        waiting = self._waiting
        while waiting and waiting[0].future.done():  # answered: drop them (and their bodies) now
            waiting.popleft()

    async def _write_live(self, batch: list[_Pending]) -> None:
        primaries = _fold_duplicates(batch)
        started = time.perf_counter()
        try:
            # No one waits past the latest deadline: a write still hanging then is given up.
            async with asyncio.timeout_at(max(pending.deadline for pending in batch)):
                results, queued = await db.retrying(lambda: self._write_batch([p.message for p in primaries]))
        except TimeoutError:
            self._fail(batch, errors.OutcomeUnknown("the group commit timed out"), "unknown_outcome")
            return
        except errors.OutcomeUnknown as exc:
            self._fail(batch, exc, "unknown_outcome")
            return
        except errors.DatabaseUnavailable as exc:
            self._fail(batch, exc, "unavailable")
            return
        except errors.SpoolError as exc:
            log.error("group_commit_failed", error=str(exc), batch=len(batch))
            self._fail(batch, exc, "error")
            return
        metrics.COMMIT_LATENCY.observe(time.perf_counter() - started)
        metrics.COMMIT_BATCH.observe(len(batch))
        self._stats.batches += 1
        for pending, accepted in zip(primaries, results, strict=True):
            self._stats.messages += not accepted.duplicate
            _resolve(pending.future, accepted)
            for follower in pending.followers:
                _resolve(follower.future, Accepted(accepted.queue_id, duplicate=True))
            self._stats.duplicates += len(pending.followers) + accepted.duplicate
        self._to_wake, self._due = True, self._due or queued
        self._committed.set()  # its events are committed: _waking sends the NOTIFY

    def _fail(self, batch: list[_Pending], exc: errors.SpoolError, kind: str) -> None:
        metrics.COMMIT_FAILURES.labels(kind=kind).inc()
        self._stats.failures += 1
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(exc)

    async def _write_batch(self, messages: Sequence[NewMessage]) -> tuple[list[Accepted], bool]:
        """The messages written, and whether deliveries were left queued (for any node)."""
        now = self._now()
        fast = self._fast_path if self._fast_path is not None and self._fast_path.has_room() else None
        row = await self._db.call(
            "spool/accept",
            *accept_arguments(messages, now, now + self._key_window, fast.node if fast else None,
                              fast.lease_until(now) if fast else None, wake_after_commit=True),
        )  # fmt: skip
        assert row is not None
        if fast is not None and row["delivery_ids"]:
            by_id = {m.id: m for m in messages}
            fast.accepted(
                [
                    NewDelivery(delivery, by_id[message], recipient, recipient.rpartition("@")[2])
                    for delivery, message, recipient in zip(
                        row["delivery_ids"], row["delivery_messages"], row["delivery_recipients"], strict=True
                    )
                ]
            )
        owners = row["owners"]
        accepted = [Accepted(owner, duplicate=owner != m.id) for m, owner in zip(messages, owners, strict=True)]
        return accepted, row["queued"]


def accept_arguments(
    messages: Sequence[NewMessage],
    now: datetime,
    keys_until: datetime,
    node: str | None,
    lease_until: datetime | None,
    *,
    wake_after_commit: bool = False,
) -> tuple[Any, ...]:
    """The arguments of spool/accept.sql for `messages`, written at `now`, their
    idempotency keys kept until `keys_until`, leased to `node` until `lease_until`
    (None: left to whichever node leases them). `wake_after_commit`: the caller
    wakes the consumers and the delivering nodes once committed (spool.wakeups)."""
    rcpt_of, rcpts, domains = [], [], []
    for index, m in enumerate(messages, start=1):
        for rcpt in m.recipients:
            rcpt_of.append(index)
            rcpts.append(str(rcpt))
            domains.append(rcpt.domain)
    return (
        [m.id for m in messages], [m.tenant for m in messages], [m.sender for m in messages],
        [m.message_id for m in messages], [m.idempotency_key for m in messages], [m.body for m in messages],
        [m.smtputf8 for m in messages], [m.client_address for m in messages], [m.received_at for m in messages],
        [m.priority for m in messages], [m.pool for m in messages], [m.account_pool for m in messages],
        [len(m.recipients) for m in messages], rcpt_of, rcpts, domains, keys_until, now, node, lease_until,
        wake_after_commit, [m.campaign for m in messages], [m.campaign_limits[0] for m in messages],
        [m.campaign_limits[1] for m in messages],
    )  # fmt: skip


def _fold_duplicates(batch: list[_Pending]) -> list[_Pending]:
    """One primary per (tenant, idempotency key), in key order: two batches written
    at once claim their keys in the same order, so neither waits for the other's
    while holding one it waits for. Later ones follow their primary's outcome."""
    primaries: list[_Pending] = []
    by_key: dict[tuple[str, str], _Pending] = {}
    for pending in batch:
        key = pending.message.idempotency_key
        if key is None:
            primaries.append(pending)
            continue
        primary = by_key.get((pending.message.tenant, key))
        if primary is None:
            by_key[(pending.message.tenant, key)] = pending
            primaries.append(pending)
        else:
            primary.followers.append(pending)
    primaries.sort(key=_key_order)
    return primaries


def _key_order(pending: _Pending) -> tuple[str, str]:
    return pending.message.tenant, pending.message.idempotency_key or ""


def _resolve(future: asyncio.Future[Accepted], accepted: Accepted) -> None:
    if not future.done():  # the session may have gone away meanwhile
        future.set_result(accepted)


# --- queries behind `mtad queue` -------------------------------------------------


async def depth(database: db.Database) -> dict[str, int]:
    """Deliveries per state (states with none are absent)."""
    return {row["state"]: row["n"] for row in await database.fetch("spool/depth")}


def committer(database: db.Database, spool: settings.Spool, *, fast_path: FastPath | None = None) -> GroupCommitter:
    """The group committer [spool] describes."""
    return GroupCommitter(
        database,
        window=spool.commit_window,
        max_batch=spool.commit_max_batch,
        max_batch_bytes=spool.commit_max_batch_bytes,
        timeout=spool.commit_timeout,
        idempotency_window=spool.idempotency_window,
        fast_path=fast_path,
    )
