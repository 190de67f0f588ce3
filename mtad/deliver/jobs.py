"""The values the delivery stages hand each other: a job (the recipients of one
message at one domain, sent in one SMTP transaction), the group whose ready queue
it waits in, a wait, and the engine's counters. Sync, no I/O."""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mtad.deliver.holdings import Holdings
from mtad.deliver.ready import ReadyQueue
from mtad.deliver.strategies import Verdicts
from mtad.outbound import outcomes, routing, sessions
from mtad.outbound.outcomes import Failure
from mtad.spool.leases import Leased

Spawn = Callable[[Coroutine[Any, Any, None]], None]  # a piece of work for the engine's TaskGroup


@dataclass(slots=True)
class Job:
    message: uuid.UUID
    tenant: str
    domain: str
    deliveries: list[Leased]
    priority: int
    created_at: datetime
    campaign: str | None = None  # its message's campaign: turns within its tenant's (deliver.ready)
    started: bool = False  # taken from its ready queue
    signed_ahead: bool = False  # counted in its group's signed_ahead until it starts

    def expired(self, now: datetime, max_age: float) -> bool:
        """Older than `max_age` seconds: bounced without another attempt."""
        return now - self.created_at >= timedelta(seconds=max_age)


@dataclass(slots=True)
class Group:
    """The ready queue of one provider group and source pool, and its dispatcher's state."""

    name: str
    ready: ReadyQueue[tuple[Job, routing.Route | None]]  # priority, then tenants' turns, then age
    account_pool: str | None = None  # relayed through this account pool (routes are None), else sent to MX
    reserving: int = 0  # relay: reservations being sought
    resume_at: datetime | None = None  # relay: no account was free; look again then (or when an attempt ends)
    freed: asyncio.Event = field(default_factory=asyncio.Event)  # an attempt ended, or the limits changed
    dispatching: bool = False
    unsigned: collections.deque[Job] = field(default_factory=collections.deque)  # MX jobs to sign ahead, in order
    signed_ahead: int = 0  # jobs signed ahead and not yet started


@dataclass(frozen=True, slots=True)
class Timing:
    """When an attempt began and where its time went on the wire, for its records."""

    began: datetime  # the engine's clock: each delivery's queue wait ends here
    clock: float  # time.monotonic() then: the attempt's duration ends at its outcome
    connect: float = 0.0  # seconds opening sessions, STARTTLS apart (0 over a reused one)
    tls: float = 0.0  # in STARTTLS
    transfer: float = 0.0  # MAIL to the reply to the end of DATA

    def sent(self, result: sessions.Result) -> Timing:
        """With where the send's time went."""
        return Timing(self.began, self.clock, result.connect_time, result.tls_time, result.transfer_time)


@dataclass(frozen=True, slots=True)
class Wait:
    """No source may send the job now: wait this long (None: until a session ends)."""

    seconds: float | None


@dataclass(slots=True)
class DeliveryStats:
    held: int = 0
    body_bytes: int = 0  # of message bodies held for sending
    attempts: int = 0
    delivered: int = 0
    deferred: int = 0
    bounced: int = 0
    failed: int = 0
    cancelled: int = 0  # found suppressed just before their attempt
    unknown: int = 0  # relayed sends that may have gone out, held rather than sent again
    leased: int = 0
    reaped: int = 0


def split(job: Job, deliveries: list[Leased], holdings: Holdings) -> Job:
    """A job of the same message for `deliveries` (the caller takes them off `job`),
    counted as one more job of the message."""
    holdings.job_added(job.message)
    return Job(job.message, job.tenant, job.domain, deliveries, job.priority, job.created_at, job.campaign)


def failed(job: Job, failure: Failure) -> Verdicts:
    """Every recipient of the job failed alike, by mtad's side (no reply)."""
    verdict = outcomes.classify_failure(failure)
    return {d.id: (verdict, None) for d in job.deliveries}
