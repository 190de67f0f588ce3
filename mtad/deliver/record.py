"""Record: the engine's writes that let go of a job, the last stage of the pipeline.

The attempt ids written before DATA (begin) and the outcomes with their events
(record) of concurrent attempts are written together, one statement each per
batch. Besides an outcome, a job leaves this node held unknown (a relayed send
that may have gone out), set aside for an operator's suspension, or handed back to
the spool for later. Each write lets go of what it wrote in the Holdings, and
counts it in the statistics, the metrics and the log.
"""

from __future__ import annotations

import collections
import random
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, events, metrics
from mtad.base.batching import Batcher
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.deliver import strategies
from mtad.deliver.holdings import Holdings, Message
from mtad.deliver.jobs import DeliveryStats, Job, Timing
from mtad.deliver.settings import Settings
from mtad.mailboxes import relay
from mtad.outbound.outcomes import Verdict
from mtad.spool import leases, suspensions, unknowns, wakeups
from mtad.spool.leases import Leased, Outcome

log = structlog.get_logger("mtad.delivery")

MAX_ROWS_PER_WRITE = 128  # deliveries one begin or record statement writes at most
_FINAL = frozenset({State.DELIVERED, State.BOUNCED, State.FAILED})  # no attempt follows


class Recorder:
    """The writes of one node's engine. `on_idle` is called when the node holds no
    delivery any more, `on_room` when it has room to lease again; `spawn` runs the
    consumers' wake-ups after the records."""

    def __init__(
        self,
        settings: Settings,
        database: db.Database,
        holdings: Holdings,
        stats: DeliveryStats,
        *,
        now: Callable[[], datetime],
        rng: random.Random,
        on_idle: Callable[[], None],
        on_room: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.settings = settings
        self._db = database
        self._holdings = holdings
        self._stats = stats
        self._now = now
        self._rng = rng
        self._on_idle = on_idle
        self._on_room = on_room
        self._wake = wakeups.Spaced(database, spawn)
        # Rows per statement are capped: the statements look each row's values up in
        # the arrays, a cost that grows with the batch (42 us a row at 50 rows, 70 at
        # 350, 119 at 1,000), and a slow batch would make the next one bigger.
        self._begin: Batcher[leases.Attempt, leases.Begun] = Batcher(
            self._begin_batch, max_batch=MAX_ROWS_PER_WRITE, weight=lambda a: len(a.deliveries)
        )
        self._record: Batcher[list[Outcome], set[int]] = Batcher(
            self._record_batch, max_batch=MAX_ROWS_PER_WRITE, weight=len
        )

    # --- an attempt's begin -----------------------------------------------------------------

    async def begin(
        self, job: Job, attempt: uuid.UUID, group: str, source: strategies.Source | None, account: int | None
    ) -> leases.Begun:
        """Write the attempt id before DATA; let go of the deliveries whose lease was lost,
        those whose recipient was suppressed while they waited (cancelled now), those of a
        tenant paused meanwhile and those an operator's control forbids to send this
        way (queued again: begin.sql checks them all, whatever this node's view of
        them), and those over their campaign's limits. `job` keeps the deliveries
        still to send (none: the job is done)."""
        ids = tuple(d.id for d in job.deliveries)
        begun = await self._begin.submit(leases.Attempt(
            attempt, ids, group, job.tenant, source.pool if source else None, source.address if source else None,
            account,
        ))  # fmt: skip
        lost = [d for d in job.deliveries if d.id not in begun.owned]
        if lost:
            for d in lost:
                if d.id in begun.suppressed:
                    log.info("cancelled", delivery=d.id, queue_id=str(job.message), recipient=d.recipient,
                             reason="suppressed", group=group)  # fmt: skip
            if begun.held:  # its tenant or its campaign was paused
                log.info("held", queue_id=str(job.message), tenant=job.tenant, count=len(begun.held),
                         reason="paused", group=group)  # fmt: skip
            if begun.set_aside:  # this node's view of the controls was behind (the caller reads them again)
                log.info("set_aside", queue_id=str(job.message), count=len(begun.set_aside), before_attempt=True,
                         group=group)  # fmt: skip
            if begun.limited:  # its campaign's max_per_hour or max_per_day: it waits for the next hour or day
                log.info("set_aside", queue_id=str(job.message), count=len(begun.limited), reason="campaign_limit",
                         group=group)  # fmt: skip
            gone = len(begun.suppressed) + len(begun.held) + len(begun.set_aside) + len(begun.limited)
            if len(lost) > gone:
                log.warning("leases_lost_before_sending", count=len(lost) - gone)
            self._stats.cancelled += len(begun.suppressed)
            self._holdings.let_go(d.id for d in lost)
            job.deliveries = [d for d in job.deliveries if d.id in begun.owned]
            if not job.deliveries:
                self._holdings.job_done(job.message)
                if not self._holdings:
                    self._on_idle()
        return begun

    # --- outcomes -------------------------------------------------------------------------------

    async def finish(
        self,
        job: Job,
        group: str | None,
        verdicts: strategies.Verdicts,
        data: dict[str, Any],
        *,
        timing: Timing | None = None,
    ) -> None:
        """Decide each delivery's next state, record it with its event, let go of it.
        `timing`: when the attempt began and where its time went, if one was made."""
        self._holdings.working(job.deliveries)  # being recorded: kept if its lease is lost
        took = _took(timing)
        now = self._now()
        tenant = job.tenant  # travels with the job: no second read of the message
        recorded: list[Outcome] = []
        lines: dict[Reply, str] = {}
        if group is not None:
            data = {**data, "group": group}
        held = self._holdings.message(job.message)
        if held is not None and held.campaign is not None:
            data = {**data, "campaign": held.campaign}
        shared = events.encode(data)[1:]  # what every recipient's event says, encoded once: "...}"
        for d in job.deliveries:
            verdict, reply = verdicts[d.id]
            state, reason, next_at = self._next_state(d, verdict, now)
            own: dict[str, Any] = {"recipient": d.recipient, "class": verdict.cls.value}
            if verdict.why is not None:
                own["reason"] = verdict.why.value
            if reply is not None:
                own["reply"] = lines.get(reply) or lines.setdefault(reply, reply.line())
                if reply.enhanced:
                    own["status"] = reply.enhanced
            if d.maybe_sent:
                own["maybe_duplicate"] = True
            encoded = events.encode(own)[:-1] + ("," + shared if len(shared) > 1 else "}")
            recorded.append(
                Outcome(d.id, tenant, state, reason, reply, next_at, group, reason is Reason.INTERNAL,
                        {**data, **own}, suppress=verdict.gone and reply is not None,
                        data_json=encoded)
            )  # fmt: skip
        try:
            await self._record.submit(recorded)
        finally:
            self._holdings.waiting(job.deliveries)
        self._count(job, group, recorded, data.get("source"), now, timing)
        self._log(job, recorded, timing, took)
        self.forget(job)

    async def finish_or_forget(self, job: Job, verdicts: strategies.Verdicts, data: dict[str, Any]) -> None:
        """Record a job that ends before any attempt; with the database away, let go of it
        (its leases run out and the reaper queues it again)."""
        try:
            await self.finish(job, None, verdicts, data)
        except errors.SpoolError as exc:
            log.warning("outcome_not_recorded", queue_id=str(job.message), error=str(exc))
            self.forget(job)

    async def hold(
        self, job: Job, group: str, unknown: relay.Unknown, why: str, data: dict[str, Any],
        timing: Timing | None = None,
    ) -> None:  # fmt: skip
        """Hold every delivery of the job unknown, each with its event (`why`: how it may
        have gone out), and let go of them."""
        self._holdings.working(job.deliveries)  # being recorded: kept if its lease is lost
        took = _took(timing)
        now = self._now()
        message = self._holdings.message(job.message)  # for the log: gone with the job's last
        said = {**data, "group": group, "why": why, "looked_for": unknown.looked_for,
                "resend_at": unknown.until.isoformat() if unknown.looked_for else None}  # fmt: skip
        recorded = [
            Outcome(d.id, job.tenant, State.UNKNOWN, Reason.MAYBE_SENT, None, unknown.until, group, False,
                    {"recipient": d.recipient, **said})
            for d in job.deliveries
        ]  # fmt: skip
        try:
            await unknowns.hold(self._db, self.settings.node, recorded, [unknown.account] * len(recorded), now)
        finally:
            self._holdings.waiting(job.deliveries)
            self.forget(job)
        self._count(job, group, recorded, data.get("source"), now, timing)
        self._log(job, recorded, timing, took, message)

    def forget(self, job: Job) -> None:
        """Let go of the job's deliveries: written, or left for their leases to run out."""
        self._holdings.let_go(d.id for d in job.deliveries)
        self._holdings.job_done(job.message)
        if not self._holdings:
            self._on_idle()
            self._on_room()

    # --- back to the spool ----------------------------------------------------------------------

    async def set_aside(self, job: Job, why: suspensions.Suspension, provider: str) -> bool:
        """A suspended job back to the spool, due when its suspension ends: it holds no
        room on this node meanwhile. False when the suspension was lifted meanwhile
        (nothing was written: the job is still held)."""
        ids = [d.id for d in job.deliveries]
        try:
            held = await suspensions.hold(self._db, self.settings.node, ids, self._now(), why, provider)
        except errors.SpoolError as exc:  # its lease runs out; whoever takes it then sets it aside
            log.warning("set_aside_failed", queue_id=str(job.message), error=str(exc))
            held = set(ids)
        if not held:
            return False
        self._holdings.let_go(d.id for d in job.deliveries)  # set aside, or a lease lost
        self._holdings.job_done(job.message)
        log.info("set_aside", queue_id=str(job.message), count=len(held), suspended=why.kind, key=why.key,
                 group=provider)  # fmt: skip
        self._let_go_of_some()
        return True

    async def hand_back(
        self, jobs: list[Job], account_pool: str | None, due: datetime, why: Mapping[str, Any] | None = None
    ) -> list[Job]:
        """Mail that would wait long for a mailbox (or for its campaign's limits: `why`)
        back to the spool, queued and due at `due` (any node may take it then), so that
        it holds no room on this node meanwhile: MX mail is not stuck behind it. Returns
        the jobs kept (a delivery that may have been sent before a crash is not handed
        back)."""
        ids = [d.id for job in jobs for d in job.deliveries]
        why = why or {"reason": "account_pool_busy", "account_pool": account_pool, "until": due.isoformat()}
        try:
            released = await leases.release(self._db, self.settings.node, ids, self._now(), due, why)
        except errors.SpoolError as exc:
            log.warning("hand_back_failed", account_pool=account_pool, error=str(exc))
            return jobs
        kept = []
        for job in jobs:
            self._holdings.let_go(d.id for d in job.deliveries if d.id in released)
            job.deliveries = [d for d in job.deliveries if d.id not in released]
            if job.deliveries:
                kept.append(job)
            else:
                self._holdings.job_done(job.message)
        if released:
            log.info("handed_back", account_pool=account_pool, count=len(released), due=due.isoformat(),
                     reason=why["reason"])  # fmt: skip
        self._let_go_of_some()
        return kept

    def _let_go_of_some(self) -> None:
        if not self._holdings:
            self._on_idle()
        self._on_room()  # room to lease other mail

    # --- the batches, the counts, the log --------------------------------------------------------

    def _next_state(self, d: Leased, verdict: Verdict, now: datetime) -> tuple[State, Reason | None, datetime | None]:
        state, reason = verdict.state, verdict.reason
        if state is not State.DEFERRED:
            return state, reason, None
        if reason is Reason.INTERNAL and d.failures + 1 >= self.settings.max_failures:
            return State.FAILED, Reason.INTERNAL, None
        if now - d.created_at >= timedelta(seconds=self.settings.max_age):
            return State.BOUNCED, Reason.EXPIRED, None
        delay = self.settings.retry.delay(d.attempts + 1, self._rng)
        return State.DEFERRED, reason, now + timedelta(seconds=delay)

    async def _begin_batch(self, attempts: list[leases.Attempt]) -> list[leases.Begun]:
        begun = await leases.begin(self._db, self.settings.node, attempts, self._now())
        return [begun.of(a.deliveries) for a in attempts]

    async def _record_batch(self, batches: list[list[Outcome]]) -> list[set[int]]:
        expiry = self.settings.bounce_suppression
        outcomes = [o for batch in batches for o in batch]
        recorded = await leases.record(self._db, self.settings.node, outcomes, self._now(),
                                       timedelta(seconds=expiry) if expiry is not None else None)  # fmt: skip
        if recorded:  # their events are committed
            self._wake.consumers()
        return [recorded.intersection(o.delivery for o in batch) for batch in batches]

    def _count(
        self,
        job: Job,
        group: str | None,
        recorded: list[Outcome],
        source: str | None,
        now: datetime,
        timing: Timing | None,
    ) -> None:
        """The outcomes in the statistics and the metrics; the queue wait of the first
        attempts, the latency of the final outcomes, the reasons of the others."""
        counted = collections.Counter(o.state.value for o in recorded)
        for name, count in counted.items():
            setattr(self._stats, name, getattr(self._stats, name) + count)
            metrics.DELIVERIES.labels(outcome=name, group=group or "-").inc(count)
            metrics.DELIVERIES_BY_SOURCE.labels(outcome=name, source=source or "-").inc(count)
            metrics.DELIVERIES_BY_TENANT.labels(outcome=name, tenant=job.tenant or "-").inc(count)
            if job.campaign is not None and self.settings.campaign_metrics:
                metrics.DELIVERIES_BY_CAMPAIGN.labels(outcome=name, tenant=job.tenant, campaign=job.campaign).inc(count)
        provider = _provider(group)
        accepted_at = {d.id: d.created_at for d in job.deliveries}
        if timing is not None:
            for d in job.deliveries:
                if d.attempts == 0 and not d.maybe_sent:  # its first attempt
                    wait = (timing.began - d.created_at).total_seconds()
                    metrics.QUEUE_WAIT.labels(group=provider).observe(max(0.0, wait))
        for outcome in recorded:
            if outcome.state in _FINAL:
                latency = (now - accepted_at[outcome.delivery]).total_seconds()
                metrics.DELIVERY_LATENCY.labels(outcome=outcome.state.value, group=provider).observe(max(0.0, latency))
            if outcome.state in (State.BOUNCED, State.DEFERRED):
                why = outcome.data.get("reason") or "undefined"
                metrics.BOUNCE_REASONS.labels(reason=why, group=provider, kind=outcome.state.value).inc()

    def _log(
        self, job: Job, recorded: list[Outcome], timing: Timing | None, took: float | None,
        message: Message | None = None,
    ) -> None:  # fmt: skip
        """One log line per delivery and outcome, with every field of docs/logging.md
        (null where it does not apply); `message` defaults to the one held."""
        message = message or self._holdings.message(job.message)  # None: it could not be read
        wire = (timing.connect, timing.tls, timing.transfer) if timing is not None else (0.0, 0.0, 0.0)
        connect, tls, transfer = (round(part, 6) for part in wire)
        for d, outcome in zip(job.deliveries, recorded, strict=True):
            data, reply = outcome.data, outcome.reply
            delays = None
            if timing is not None:
                queue = round(max(0.0, (timing.began - d.due_at).total_seconds()), 6)
                delays = {"queue": queue, "connect": connect, "tls": tls, "transfer": transfer}
            log.info(
                outcome.state.value,
                delivery=outcome.delivery,
                queue_id=str(job.message),
                message_id=message.message_id if message else None,
                tenant=job.tenant,
                campaign=message.campaign if message else None,
                sender=message.sender if message else None,
                size=message.size if message else None,
                recipient=d.recipient,
                domain=d.domain,
                group=outcome.route_group or "-",
                reason=outcome.reason.value if outcome.reason else None,
                bounce_reason=data.get("reason"),
                code=reply.code if reply is not None else None,
                status=data.get("status"),
                reply=data.get("reply"),
                attempt=data.get("attempt"),
                attempt_number=d.attempts + 1,
                mx=data.get("mx") or None,
                address=data.get("address") or None,
                source=data.get("source") or None,
                tls=data.get("tls"),
                cipher=data.get("cipher"),
                pool=data.get("pool"),
                account=data.get("account"),
                duration=took,
                delays=delays,
                next_attempt=outcome.next_attempt_at.isoformat() if outcome.next_attempt_at else None,
            )


def _took(timing: Timing | None) -> float | None:
    """Seconds from the attempt's start to now, its outcome (None: no attempt)."""
    return round(time.monotonic() - timing.clock, 6) if timing is not None else None


def _provider(group: str | None) -> str:
    """The group as the latency histograms label it: a receiver of no provider group
    (routing names it mx:HOSTS, one per set of MX hosts) counts as `other`."""
    if group is None or group.startswith("mx:"):
        return "other"
    return group
