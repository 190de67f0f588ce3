"""Attempt: one job sent along its way out, MX or mailbox (strategies).

One pipeline for both: read the message, write the attempt id before DATA
(Recorder.begin), plan, sign, send through the session pool, classify each
recipient's reply or the local failure once (outcomes), settle what was taken for
the send, record the outcomes with their events (Recorder). The receiver's answer
goes back to the permission that let the send go through the strategy's
`answered` (a callback of the dispatch), as soon as it is known. An attempt
returns what goes back to its queue (a reroute); it queues nothing itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.base.lifecycle import State
from mtad.base.replies import Reply
from mtad.deliver import jobs, strategies
from mtad.deliver.holdings import Holdings, Message
from mtad.deliver.jobs import DeliveryStats, Group, Job
from mtad.deliver.record import Recorder
from mtad.deliver.settings import Settings
from mtad.deliver.signatures import Signatures, Signed
from mtad.feedback import html_parts
from mtad.feedback.tracking import Tracking
from mtad.feedback.unsubscribe import Unsubscribing
from mtad.feedback.verp import Verp
from mtad.mailboxes import relay
from mtad.outbound import outcomes, policies, sessions, tlsrpt
from mtad.outbound.outcomes import Failure, Verdict
from mtad.spool import leases

log = structlog.get_logger("mtad.delivery")

UNBEGIN_FIRST_PAUSE, UNBEGIN_LAST_PAUSE = 0.5, 5.0  # seconds between tries to clear an attempt id


class Attempts:
    """The attempts of one node's engine."""

    def __init__(
        self,
        settings: Settings,
        database: db.Database,
        pool: sessions.Pool,
        rules: outcomes.Rules,
        holdings: Holdings,
        stats: DeliveryStats,
        recorder: Recorder,
        signatures: Signatures,
        *,
        mailboxes: relay.Mailboxes | None,
        verp: Verp | None,
        unsubscribing: Unsubscribing | None,
        tracking: Tracking | None,
        read: Callable[[uuid.UUID], Awaitable[Message]],
        controls_stale: Callable[[], Coroutine[Any, Any, None]],
        spawn: jobs.Spawn,
        stopped: asyncio.Event,
        now: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self.rules = rules
        self._db = database
        self._pool = pool
        self._holdings = holdings
        self._stats = stats
        self._recorder = recorder
        self._signatures = signatures
        self._mailboxes = mailboxes
        self._verp = verp
        self._unsubscribing = unsubscribing  # links for the tenants of settings.list_unsubscribe
        self._tracking = tracking  # links and pixels for the tenants of settings.tracked
        self._read = read  # the message with its body (Intake.message)
        self._controls_stale = controls_stale  # begin.sql found this node's view of the controls behind
        self._spawn = spawn
        self._stopped = stopped
        self._now = now

    async def run(self, job: Job, group: Group, way: strategies.Strategy | None) -> Job | None:
        """One job's attempt along `way` (None: it expired in its queue, and only its
        bounce is recorded). Returns the job of the deliveries to queue again in
        `group`, sent no attempt (a mailbox refused them), if any."""
        started = time.monotonic()
        rerouted: list[Job] = []
        try:
            now = self._now()
            if way is None or job.expired(now, self.settings.max_age):
                if way is not None:
                    await way.abandon()
                verdict = outcomes.EXPIRED
                await self._recorder.finish(job, group.name, {d.id: (verdict, None) for d in job.deliveries},
                                            {"expired": True})  # fmt: skip
            else:
                await self._send(job, group, way, rerouted, jobs.Timing(now, started))
        except errors.SpoolError as exc:
            log.warning("attempt_not_recorded", message=str(job.message), error=str(exc))
            self._recorder.forget(job)  # the leases expire and the reaper requeues them; a reservation stays counted
        finally:
            if way is not None:
                way.answered(None)  # when the attempt ended before the receiver answered
            group.freed.set()
            self._holdings.waiting(job.deliveries)
            metrics.ATTEMPT_LATENCY.labels(group=group.name).observe(time.monotonic() - started)
        return rerouted[0] if rerouted else None

    async def _send(
        self, job: Job, group: Group, way: strategies.Strategy, rerouted: list[Job], timing: jobs.Timing
    ) -> None:
        """Read, write the attempt id, plan, sign, send, classify, settle, record; a
        reroute is put in `rerouted` as soon as it is known."""
        try:
            message = await self._read(job.message)
        except errors.NotFound:
            await way.abandon()
            await self._recorder.finish(job, group.name, jobs.failed(job, Failure.MESSAGE_UNREADABLE),
                                        {"message": "missing"})  # fmt: skip
            return
        attempt = uuid.uuid4()
        try:
            source = way.source if isinstance(way, strategies.ToMx | strategies.ThroughMailbox) else None
            account = way.reservation.account.id if isinstance(way, strategies.ThroughMailbox) else None
            begun = await self._recorder.begin(job, attempt, group.name, source, account)
        except errors.DatabaseUnavailable:  # the attempt id may be written, and nothing went out
            self._spawn(self._unbegin_when_back([d.id for d in job.deliveries]))
            raise
        if begun.set_aside:
            self._spawn(self._controls_stale())
        if not job.deliveries:
            await way.abandon()
            return
        data: dict[str, Any] = {"attempt": str(attempt), **way.describe()}
        plan = await way.plan(message, data)
        result = None
        if isinstance(plan, Verdict):  # no way out now (a mailbox's login was refused)
            verdicts: strategies.Verdicts = {d.id: (plan, None) for d in job.deliveries}
        else:
            body = self._with_unsubscribe(job, message, self._tracked(job, plan.body, data))
            signed = await self._sign(message, body, job.tenant in self.settings.tracked)  # after the last change
            data["dkim"] = signed.says
            recipients = tuple(d.recipient for d in job.deliveries)
            tx = sessions.Transaction(plan.sender, recipients, signed.body, message.smtputf8)
            self._stats.attempts += 1
            ehlo = plan.source.choice.ehlo if plan.source.choice else None
            result = await self._pool.deliver(
                plan.targets, tx, plan.source.address or None, label=group.name, ehlo=ehlo, login=plan.login
            )
            timing = timing.sent(result)
            verdicts = self._classify(job, result)
            if signed.made is not None and any(v.state is State.DEFERRED for v, _ in verdicts.values()):
                self._spawn(self._signatures.keep(message, signed.made))  # for the retry
            self._described(job, result, data)
            metrics.SESSIONS_REUSED.labels(group=group.name).inc(result.reused)
        way.answered(strategies.Feedback.of(result, verdicts))
        again = await way.settle(job.deliveries, verdicts, result, data)
        if again:  # nothing went out to them: back to the queue, for another way
            await leases.unbegin(self._db, self.settings.node, [d.id for d in again], self._now())
            job.deliveries = [d for d in job.deliveries if d not in again]
            self._holdings.waiting(again)  # waiting again: renewed, released at a stop
            why = verdicts[again[0].id][0].cls.value
            log.info("rerouted", queue_id=str(job.message), count=len(again), group=group.name,
                     account=data.get("account"), account_pool=group.account_pool, **{"class": why})  # fmt: skip
            rerouted.append(jobs.split(job, again, self._holdings))
            if not job.deliveries:
                self._holdings.job_done(job.message)
                return
        if result is not None and result.maybe_sent and isinstance(way, strategies.ThroughMailbox):
            kept = await self._hold_unanswered(job, group, way, verdicts, data, timing)
            if kept is None:
                return
        await self._recorder.finish(job, group.name, verdicts, data, timing=timing)

    def _described(self, job: Job, result: sessions.Result, data: dict[str, Any]) -> None:
        """What the event says of the session; its TLS counted and kept for reporting."""
        data.update(address=result.address, source=result.source, tls=result.tls, cipher=result.cipher,
                    reused=result.reused)  # fmt: skip
        if result.failure is not None:
            data["failure"] = result.failure.value
        if result.tls_policy is not None:
            data["tls_policy"] = result.tls_policy.value
            negotiated = result.tls is not None or result.tls_error is not None  # else no session got that far
            if negotiated and not result.reused:  # for TLS reporting: sessions, not messages
                self._spawn(self._tls_count(job.domain, result))
            if result.tls_error is not None:
                data["tls_error"] = result.tls_error.text
                self._spawn(self._tls_failed(job.domain, result.tls_error.text))
        if result.maybe_sent:
            data["maybe_delivered"] = True

    async def _tls_count(self, domain: str, result: sessions.Result) -> None:
        assert result.tls_policy is not None
        try:
            await tlsrpt.count(self._db, self._now(), domain, result.tls_policy, result.host, result.address,
                               result.source, result.tls_error)  # fmt: skip
        except errors.SpoolError as exc:
            log.warning("tls_session_not_counted", domain=domain, error=str(exc))

    async def _tls_failed(self, domain: str, why: str) -> None:
        """Keep a delivery's failure of its domain's TLS policy for `mtad tls show`."""
        try:
            await policies.failed(self._db, domain, why, self._now())
        except errors.SpoolError as exc:
            log.warning("tls_failure_not_kept", domain=domain, error=str(exc))

    def _classify(self, job: Job, result: sessions.Result) -> strategies.Verdicts:
        """Each recipient's verdict: the receiver's reply, else the local failure."""
        verdicts: strategies.Verdicts = {}
        classified: dict[tuple[Reply, str], Verdict] = {}  # recipients accepted together share the reply to the data
        for d in job.deliveries:
            reply = result.replies.get(d.recipient)
            if reply is not None:
                key = (reply, result.commands.get(d.recipient, ""))
                verdict = classified.get(key) or classified.setdefault(key, self.rules.classify(*key))
                verdicts[d.id] = (verdict, reply)
            else:
                verdicts[d.id] = (outcomes.classify_failure(result.failure or Failure.INTERNAL), None)
        return verdicts

    # --- signing --------------------------------------------------------------------------------

    async def sign_early(self, job: Job, message: Message, body: bytes) -> None:
        """Sign a job ahead of its turn (Dispatcher); only a cache for its attempt."""
        with contextlib.suppress(Exception):  # its attempt signs again, and says what failed
            body = self._with_unsubscribe(job, message, self._tracked(job, body, None))
            await self._sign(message, body, job.tenant in self.settings.tracked)

    async def _sign(self, message: Message, body: bytes, whole: bool = False) -> Signed:
        """The body with its DKIM signatures, with the keys active now: the tenant's
        signing domain, else the From field's. `whole`: the body differs by recipient."""
        domain = self.settings.tenant_dkim_domains.get(message.tenant)
        return await self._signatures.sign(message, body, domain, self.settings.dkim_canonicalization, whole=whole)

    def _tracked(self, job: Job, body: bytes, data: dict[str, Any] | None) -> bytes:
        """The body with the recipient's tracking links and pixel when its tenant tracks
        opens or clicks; as it came when its HTML cannot be rewritten safely (then the
        attempt's event `data` says why; None: signing ahead, say nothing). No parse
        for another tenant."""
        wanted = self.settings.tracked.get(job.tenant)
        if self._tracking is None or wanted is None or len(job.deliveries) != 1:
            return body
        try:
            return self._tracking.rewrite(body, job.deliveries[0].id, job.tenant, opens=wanted[0], clicks=wanted[1])
        except html_parts.Untouched as exc:
            if data is not None:
                data["tracking"] = f"untouched: {exc}"
                log.info("tracking_untouched", queue_id=str(job.message), why=str(exc))
            return body

    def _with_unsubscribe(self, job: Job, message: Message, body: bytes) -> bytes:
        """The body with the recipient's List-Unsubscribe fields (one-click, RFC 8058) when
        its tenant asks for them and the message has none of its own."""
        if self._unsubscribing is None or job.tenant not in self.settings.list_unsubscribe or len(job.deliveries) != 1:
            return body
        delivery = job.deliveries[0]
        mailto = self._verp.unsubscribe(delivery.id) if self._verp is not None else None  # to the inbound listener
        return self._unsubscribing.fields(job.tenant, delivery.recipient, message.id, body, mailto)

    # --- what may have gone out -----------------------------------------------------------------

    async def _unbegin_when_back(self, ids: list[int]) -> None:
        """Clear the attempt ids of deliveries whose begin may have landed as the database
        went away, once it is back and while their leases last: else a relayed one would
        pass for maybe sent, and be held for an operator though nothing went out."""
        until = time.monotonic() + self.settings.lease_duration
        pause = UNBEGIN_FIRST_PAUSE
        while not self._stopped.is_set() and time.monotonic() < until:
            await asyncio.sleep(pause)
            try:
                await leases.unbegin(self._db, self.settings.node, ids, self._now())
                return
            except errors.SpoolError:
                pause = min(pause * 2, UNBEGIN_LAST_PAUSE)
        log.warning("attempt_id_not_cleared", count=len(ids))

    async def _hold_unanswered(
        self, job: Job, group: Group, way: strategies.ThroughMailbox, verdicts: strategies.Verdicts,
        data: dict[str, Any], timing: jobs.Timing,
    ) -> Job | None:  # fmt: skip
        """After a relayed send whose connection was lost after the data, the deliveries
        the receiver did not answer may have gone out: each is held unknown rather than
        deferred, unless the pool resends. Returns the job with the rest (None: nothing)."""
        assert self._mailboxes is not None
        assert group.account_pool is not None
        unanswered = [d for d in job.deliveries if verdicts[d.id][1] is None]
        account = way.reservation.account
        unknown = await self._mailboxes.unknown(group.account_pool, account.id, self._now()) if unanswered else None
        if unknown is None:
            return job
        job.deliveries = [d for d in job.deliveries if d not in unanswered]
        await self._recorder.hold(jobs.split(job, unanswered, self._holdings), group.name, unknown,
                                  "lost_after_data", data, timing)  # fmt: skip
        if not job.deliveries:
            self._holdings.job_done(job.message)
            return None
        return job
