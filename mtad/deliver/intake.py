"""Intake: what the node holds, and how it comes in, the first stage of the pipeline.

Deliveries are leased from the queue (woken by NOTIFY on `mtad_due`, with a
periodic poll as the fallback) or handed over by the accept path already leased;
their messages are read, bodies as far as the body cache has room. The leases are
renewed (the delivery and source address leases held), any node's expired leases
are reaped, and the buckets and warm-up are checkpointed with the other nodes. The
deliveries held are grouped into jobs (one message, one domain, a few recipients),
routed (MX and provider group, or an account pool) and handed on with `queue`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.deliver import egress, jobs, shaping, source_leases, warmup
from mtad.deliver.holdings import Holdings, Message
from mtad.deliver.jobs import DeliveryStats, Job
from mtad.deliver.record import Recorder
from mtad.deliver.settings import Settings
from mtad.feedback.tracking import Tracking
from mtad.feedback.unsubscribe import Unsubscribing
from mtad.feedback.verp import Verp
from mtad.mailboxes import relay
from mtad.outbound import routing
from mtad.outbound.outcomes import Failure
from mtad.spool import commit, leases, nodes, unknowns
from mtad.spool.leases import Leased

log = structlog.get_logger("mtad.delivery")

CHANNEL = "mtad_due"

# Where a routed job goes: (job, its route or None when relayed, its provider group
# or "accounts:POOL", the account pool or None).
Queue = Callable[[Job, routing.Route | None, str, str | None], None]


class Intake:
    """Leasing, renewing, reaping, checkpointing; holding and routing what comes in."""

    def __init__(
        self,
        settings: Settings,
        database: db.Database,
        holdings: Holdings,
        stats: DeliveryStats,
        recorder: Recorder,
        *,
        router: routing.Router,
        shaper: shaping.Shaper,
        pools: egress.Egress,
        mailboxes: relay.Mailboxes | None,
        verp: Verp | None,
        unsubscribing: Unsubscribing | None,
        tracking: Tracking | None,
        queue: Queue,
        spawn: jobs.Spawn,
        limits_changed: Callable[[], None],
        stopped: asyncio.Event,
        now: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self._db = database
        self._holdings = holdings
        self._stats = stats
        self._recorder = recorder
        self._router = router
        self._shaper = shaper
        self._egress = pools
        self._mailboxes = mailboxes
        self._verp = verp  # MX mail's envelope sender names its delivery: one recipient per transaction
        self._unsubscribing = unsubscribing  # links for the tenants of settings.list_unsubscribe
        self._tracking = tracking  # links and pixels for the tenants of settings.tracked
        self._queue = queue
        self._spawn = spawn
        self._limits_changed = limits_changed  # a checkpoint may have grown a cap
        self._stopped = stopped
        self._now = now
        self.wake = asyncio.Event()  # NOTIFY, or room to lease again
        self.listening = db.Listening(self._db.dsn, CHANNEL, self.wake.set)  # NOTIFY wakes the lease loop

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.settings.lease_duration)

    # --- leasing -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Lease whenever woken (NOTIFY, room freed) or every poll_interval, until stopped."""
        while not self._stopped.is_set():
            await self.listening.keep()
            try:
                full = await self.lease_once()
            except errors.SpoolError as exc:
                log.warning("lease_failed", error=str(exc))
                full = False
            if full:
                continue
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_interval):
                    await self.wake.wait()

    async def lease_once(self) -> bool:
        """Lease one batch and admit it; True when it was full (more may be due)."""
        room = min(self.settings.lease_batch, self.settings.max_held - len(self._holdings))
        if room <= 0:
            return False
        now = self._now()
        got = await leases.lease(self._db, self.settings.node, room, now, self.lease_until(now))
        self._stats.leased += len(got)
        metrics.LEASED.inc(len(got))
        if got:
            await self._load_messages({d.message for d in got})
            self.admit(got)
        return len(got) == room

    def accepted(self, deliveries: list[commit.NewDelivery]) -> list[Leased]:
        """Deliveries the accept path just leased to this node, their messages held."""
        held = []
        for d in deliveries:
            m = d.message
            if self._holdings.message(m.id) is None:
                self._holdings.add(Message(
                    m.id, m.tenant, m.sender, m.message_id, len(m.body), m.smtputf8, m.pool, m.account_pool,
                    self._holdings.keep_body(m.body), m.campaign,
                ))  # fmt: skip
            held.append(
                Leased(d.id, m.id, d.recipient, d.domain, m.priority, 0, 0, m.received_at, False, m.received_at)
            )
        return held

    async def renew(self) -> None:
        """Extend the lease of every delivery held, those on the wire included: a send
        slower than the lease must not be reaped and sent again, nor free its mailbox."""
        asked = list(self._holdings)
        now = self._now()
        kept = await leases.renew(self._db, self.settings.node, asked, self.lease_until(now))
        # Lost: taken over after our lease expired, or recorded meanwhile (then already
        # let go of). Only what we still hold and nobody is working on counts.
        lost = self._holdings.lost(asked, kept)
        if lost:
            log.warning("leases_lost", count=len(lost))
        gone = await source_leases.renew(self._db, self._egress, self.settings.node,
                                         self.lease_until(now).timestamp())  # fmt: skip
        if gone:
            log.warning("source_leases_lost", addresses=gone)

    async def reap(self) -> None:
        reaped = await leases.reap(self._db, self._now())
        if reaped:
            self._stats.reaped += reaped
            metrics.REAPED.inc(reaped)
            log.info("leases_reaped", count=reaped)
            await self._db.execute("leases/notify_due")

    async def checkpoint(self) -> None:
        """Share the buckets and warm-up caps among the live nodes, checkpoint the buckets
        (adopting other nodes' changes), hear the warm-up days' complaints, end the days
        that are over, save warm-up."""
        now = self._now()
        live = max(1, await nodes.live(self._db, now - timedelta(seconds=self.settings.node_timeout)))
        if live != self._shaper.nodes:
            log.info("nodes_changed", live=live, share=f"1/{live}")  # every bucket is re-divided
        self._shaper.set_nodes(live)
        self._egress.set_nodes(live)
        await shaping.sync(self._db, self._shaper, self.settings.node, now)
        await warmup.hear(self._db, self._egress.days)  # a day is judged with the complaints that came within it
        for end in self._egress.advance_days(now.timestamp()):
            log.info(
                "warmup_day_ended", address=end.address, group=end.provider, day=end.day, next_day=end.next_day,
                sent=end.sent, deferred=end.deferred, complaints=end.complaints, warm=end.warm, refused=end.why,
            )  # fmt: skip
        await warmup.save(self._db, self._egress.days, self._egress.now())
        self._limits_changed()

    async def leave(self, started: int) -> None:
        """At a stop: hand back the leases of what no attempt works on (`started`
        attempts were cut short), and the last checkpoint of buckets and warm-up."""
        unstarted = self._holdings.unstarted()
        try:
            released = await leases.release(self._db, self.settings.node, unstarted, self._now())
            if released:
                await self._db.execute("leases/notify_due")
            log.info("leases_released", count=len(released), cut_short=started)
        except errors.SpoolError as exc:
            log.warning("release_failed", error=str(exc))  # they expire and are reaped
        try:
            await shaping.sync(self._db, self._shaper, self.settings.node, self._now())  # the last checkpoint
            await shaping.leave(self._db, self.settings.node)
            await warmup.save(self._db, self._egress.days, self._egress.now())
            await source_leases.release_all(self._db, self._egress, self.settings.node)
        except errors.SpoolError as exc:
            log.warning("checkpoint_failed", error=str(exc))  # the previous one stands

    # --- messages ----------------------------------------------------------------------------

    async def _load_messages(self, ids: set[uuid.UUID]) -> None:
        """Read the messages of a leased batch in one query (else one each as it is sent),
        their bodies as far as the body cache has room."""
        missing = self._holdings.missing(ids)
        if not missing:
            return
        try:
            rows = await leases.messages(self._db, missing, self._holdings.body_room)
        except errors.SpoolError as exc:
            log.warning("messages_not_read", count=len(missing), error=str(exc))
            return
        for row in rows:  # counted as their jobs are admitted
            self._holdings.add(self._message_of(row))

    async def message(self, message_id: uuid.UUID) -> Message:
        """The message with its body, for sending (read now if it is not held)."""
        message = self._holdings.message(message_id)
        if message is None or message.body is None:
            row = await leases.message(self._db, message_id)
            if message is None:
                message = self._message_of(row)
                message.jobs = 1
                self._holdings.add(message)
            if message.body is None:  # held from now on, for the message's other jobs
                self._holdings.set_body(message, bytes(row["body"]))
        return message

    def _message_of(self, row: Mapping[str, Any]) -> Message:
        body = bytes(row["body"]) if row["body"] is not None else None
        message = Message(row["id"], row["tenant"], row["sender"], row["message_id"], row["size"], row["smtputf8"],
                          row["pool"], row["account_pool"], self._holdings.keep_body(body),
                          row["campaign"])  # fmt: skip
        if row["dkim_fields"] is not None:  # the signatures of an earlier attempt, for a retry to reuse
            message.kept = (bytes(row["dkim_header"]), tuple(row["dkim_keys"]))
            message.signatures[message.kept] = bytes(row["dkim_fields"])
        return message

    # --- from held deliveries to routed jobs ---------------------------------------------------

    def admit(self, deliveries: Iterable[Leased]) -> None:
        """Hold deliveries and group them into jobs (one message, one domain, a few recipients)."""
        grouped: dict[tuple[uuid.UUID, str], list[Job]] = {}
        most = self.settings.max_recipients_per_transaction
        for d in deliveries:
            self._holdings.hold([d])
            batch = grouped.setdefault((d.message, d.domain), [])
            message = self._holdings.message(d.message)
            limit = most if self._alone(message, d.domain) is None else 1
            if not batch or len(batch[-1].deliveries) >= limit:
                tenant, campaign = (message.tenant, message.campaign) if message is not None else ("", None)
                batch.append(Job(d.message, tenant, d.domain, [], d.priority, d.created_at, campaign))
            batch[-1].deliveries.append(d)
        for per_domain in grouped.values():
            for job in per_domain:
                self._holdings.job_added(job.message)
                self._spawn(self._route(job))

    async def _route(self, job: Job) -> None:
        account_pool = self._account_pool(job)
        if account_pool is not None:
            if any(d.maybe_sent for d in job.deliveries):  # its node died during an attempt
                kept = await self._hold_maybe_sent(job, account_pool)
                if kept is None:
                    return
                job = kept
            self._queue(job, None, f"accounts:{account_pool}", account_pool)
            return
        try:
            route = await self._router.route(job.domain)
        except errors.RouteTempFail as exc:
            await self._recorder.finish_or_forget(job, jobs.failed(job, Failure.DNS_TEMPFAIL), {"dns": str(exc)})
            return
        if isinstance(route, routing.Undeliverable):
            await self._recorder.finish_or_forget(job, jobs.failed(job, Failure.NO_ROUTE), {"route": route.text})
            return
        self._queue(job, route, route.group, None)

    def _account_pool(self, job: Job) -> str | None:
        """The account pool a job is relayed through: the message's (its header, its
        tenant's), else its route's; None: it goes to MX."""
        chosen = self._relayed_through(self._holdings.message(job.message), job.domain)
        if chosen and self._mailboxes is None:
            log.warning("relay_not_configured", account_pool=chosen, queue_id=str(job.message))
            return None
        return chosen

    def _alone(self, message: Message | None, domain: str) -> str | None:
        """Why a delivery is sent in a transaction of its own (None: it need not be): its
        envelope sender (VERP), its List-Unsubscribe link or its tracking links name it."""
        if self._verp is not None and self._relayed_through(message, domain) is None:
            return "verp"
        tenant = message.tenant if message is not None else ""
        if self._unsubscribing is not None and tenant in self.settings.list_unsubscribe:
            return "list_unsubscribe"
        if self._tracking is not None and tenant in self.settings.tracked:
            return "tracking"
        return None

    def _relayed_through(self, message: Message | None, domain: str) -> str | None:
        return (message and message.account_pool) or self.settings.route_account_pools.get(domain) or None

    async def _hold_maybe_sent(self, job: Job, account_pool: str) -> Job | None:
        """A relayed job leased again after its node died during an attempt (an attempt
        id, no outcome): each delivery that may have gone out is held unknown, never sent
        again unseen, unless its pool resends (then it goes, flagged maybe_duplicate).
        Returns the job with what is still to send (None: nothing). With the database
        away the job is let go of: its lease runs out and it comes back the same way."""
        assert self._mailboxes is not None
        group = f"accounts:{account_pool}"
        maybe = [d for d in job.deliveries if d.maybe_sent]
        try:
            through = await unknowns.sent_through(self._db, [d.id for d in maybe])
            now = self._now()
            decided: dict[int | None, relay.Unknown | None] = {}
            held: dict[int | None, list[Leased]] = {}
            for d in maybe:
                account = through[d.id].account if d.id in through else None
                if account not in decided:
                    decided[account] = await self._mailboxes.unknown(account_pool, account, now)
                if decided[account] is not None:
                    held.setdefault(account, []).append(d)
            names = {t.account: t.name for t in through.values()}
            for account, deliveries in held.items():
                unknown = decided[account]
                assert unknown is not None
                job.deliveries = [d for d in job.deliveries if d not in deliveries]
                data = {"account_pool": account_pool, "account": names.get(account) if account else None}
                await self._recorder.hold(jobs.split(job, deliveries, self._holdings), group, unknown,
                                          "unrecorded_attempt", data)  # fmt: skip
        except errors.SpoolError as exc:
            log.warning("maybe_sent_not_held", queue_id=str(job.message), error=str(exc))
            self._recorder.forget(job)
            return None
        if not job.deliveries:
            self._holdings.job_done(job.message)
            return None
        return job
