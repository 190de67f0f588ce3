"""Delivery: lease -> route -> wait for permission -> send -> classify -> record.

Deliveries this node holds (leased from the queue, or handed over by the accept
path already leased) are grouped into jobs: the recipients of one message at one
domain, sent in one SMTP transaction. A job is routed (MX, provider group; or an
account pool) and put in the ready queue of its (group, source pool), priority
first, then tenants' turns, then age. A dispatcher per queue starts a job when
the bucket of a source address lets it (shaping: rate, burst, session cap per
provider group and source address), or when a mailbox of its account pool is
reserved for it: the single place where a delivery waits for permission. The
send leaves from an address the node holds a lease on (egress), taken first
when it is not. Then one attempt pipeline for both ways out (strategies): write
the attempt id before DATA, plan, sign, send through the session pool, classify
each recipient's reply or the local failure once (outcomes), settle what was
taken for the send, record the outcomes with their events. Deferred mail comes
back through the same queues.

Around that: a lease loop (woken by NOTIFY on `mtad_due`, with a periodic poll as
the fallback), renewal of the delivery and source address leases held, a reaper
that returns any node's expired leases to the queue, and the shaping checkpoint
(the buckets' rates shared with the other nodes, divided by the number of live
nodes). Every task belongs to one TaskGroup.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, events, metrics
from mtad.base.batching import Batcher
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.deliver import egress, shaping, source_leases, strategies, warmup
from mtad.deliver.holdings import Holdings, Message
from mtad.deliver.ready import ReadyQueue
from mtad.deliver.settings import Settings
from mtad.deliver.signatures import Signatures, Signed
from mtad.feedback.unsubscribe import Unsubscribing
from mtad.feedback.verp import Verp
from mtad.mailboxes import accounts, relay
from mtad.outbound import outcomes, policies, routing, sessions, tlsrpt
from mtad.outbound.outcomes import Failure, Verdict
from mtad.signing import dkim
from mtad.spool import commit, leases, nodes, suspensions, unknowns
from mtad.spool.leases import Leased, Outcome

log = structlog.get_logger("mtad.delivery")

CHANNEL = "mtad_due"
RESERVING = 2  # callers seeking reservations at once per account pool
MAX_ROWS_PER_WRITE = 128  # deliveries one begin or record statement writes at most
RESERVE_BATCH = 64  # jobs one caller seeks reservations for (one round trip: 0.12 ms each, against 0.19 at 16)
UNBEGIN_FIRST_PAUSE, UNBEGIN_LAST_PAUSE = 0.5, 5.0  # seconds between tries to clear an attempt id
SUSPENDED_RECHECK = 5.0  # seconds a job waits to look again when only a suspended address could send it
# MX jobs of a group signed before their turn, at most: enough to cover a signature's
# round trip through a busy worker (about 60 ms) at a thousand messages a second.
SIGN_AHEAD = 100


# --- jobs and groups -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wait:
    """No source may send the job now: wait this long (None: until a session ends)."""

    seconds: float | None


@dataclass(slots=True)
class _Job:
    message: uuid.UUID
    tenant: str
    domain: str
    deliveries: list[Leased]
    priority: int
    created_at: datetime
    started: bool = False  # taken from its ready queue
    signed_ahead: bool = False  # counted in its group's signed_ahead until it starts


@dataclass(slots=True)
class _Group:
    name: str
    ready: ReadyQueue[tuple[_Job, routing.Route | None]]  # priority, then tenants' turns, then age
    account_pool: str | None = None  # relayed through this account pool (routes are None), else sent to MX
    reserving: int = 0  # relay: reservations being sought
    resume_at: datetime | None = None  # relay: no account was free; look again then (or when an attempt ends)
    freed: asyncio.Event = field(default_factory=asyncio.Event)  # an attempt ended, or the limits changed
    dispatching: bool = False
    unsigned: collections.deque[_Job] = field(default_factory=collections.deque)  # MX jobs to sign ahead, in order
    signed_ahead: int = 0  # jobs signed ahead and not yet started


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


class Delivery:
    """One node's delivery engine; also the accept path's fast path (commit.FastPath)."""

    def __init__(
        self,
        settings: Settings,
        database: db.Database,
        router: routing.Router,
        pool: sessions.Pool,
        rules: outcomes.Rules,
        *,
        shaper: shaping.Shaper | None = None,
        pools: egress.Egress | None = None,
        mailboxes: relay.Mailboxes | None = None,
        signer: dkim.Signer | None = None,
        verp: Verp | None = None,
        unsubscribing: Unsubscribing | None = None,
        on_probation: Callable[[str], bool] = lambda tenant: False,
        controls: suspensions.Controls | None = None,
        tls: policies.Policies | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.node = settings.node
        self._db = database
        self._router = router
        self._pool = pool
        self._rules = rules
        self._shaper = shaper or shaping.Shaper()
        self._egress = pools or egress.Egress({})
        self._mailboxes = mailboxes
        self._signatures = Signatures(signer or dkim.Signer(), database)
        self._verp = verp  # MX mail's envelope sender names its delivery: one recipient per transaction
        self._unsubscribing = unsubscribing  # links for the tenants of settings.list_unsubscribe
        self._on_probation = on_probation  # tenants.States.on_probation
        self._controls = controls  # the operator's suspensions and reroutes
        self._tls = tls  # the recipient domains' TLS policies (MTA-STS, DANE); sessions under them counted
        self._default_source = pool.settings.source_address or ""  # the source of mail without a pool
        self._now = now
        self._rng = rng or random.Random()
        self._holdings = Holdings(settings.body_cache)  # what this node holds; changed only through it
        self._groups: dict[tuple[str, str | None], _Group] = {}  # (provider group, source pool): its queue
        self._taking: dict[str, asyncio.Lock] = {}  # source pool -> one lease take at a time
        self._tasks: asyncio.TaskGroup | None = None
        self._work: set[asyncio.Task[None]] = set()  # routing and attempts, cancelled at the end of a drain
        self._wake = asyncio.Event()  # NOTIFY, or room to lease again
        self._idle = asyncio.Event()  # nothing held any more
        self._progress = asyncio.Event()  # an attempt ended
        self._stop = asyncio.Event()
        self._stopping = False
        self._listener: db.Listener | None = None  # NOTIFY on CHANNEL wakes the lease loop
        self._early: list[Leased] = []
        # Attempt ids and outcomes of concurrent attempts are written together.
        # Rows per statement are capped: the statements look each row's values up in
        # the arrays, a cost that grows with the batch (42 us a row at 50 rows, 70 at
        # 350, 119 at 1,000), and a slow batch would make the next one bigger.
        self._begin: Batcher[leases.Attempt, leases.Begun] = Batcher(
            self._begin_batch, max_batch=MAX_ROWS_PER_WRITE, weight=lambda a: len(a.deliveries)
        )
        self._record: Batcher[list[Outcome], set[int]] = Batcher(
            self._record_batch, max_batch=MAX_ROWS_PER_WRITE, weight=len
        )
        self._stats = DeliveryStats()

    def statistics(self) -> DeliveryStats:
        self._stats.held = len(self._holdings)
        self._stats.body_bytes = self._holdings.body_bytes
        return self._stats

    # --- commit.FastPath ------------------------------------------------------------------

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.settings.lease_duration)

    def has_room(self) -> bool:
        """Whether to take newly accepted deliveries (else they are queued for anyone)."""
        return not self._stopping and len(self._holdings) < self.settings.max_held

    def accepted(self, deliveries: list[commit.NewDelivery]) -> None:
        """Deliveries the accept path just leased to this node: straight to routing."""
        if self._stopping:
            return  # their leases expire and the reaper requeues them
        held = []
        for d in deliveries:
            m = d.message
            if self._holdings.message(m.id) is None:
                self._holdings.add(Message(
                    m.id, m.tenant, m.sender, m.smtputf8, m.pool, m.account_pool, self._holdings.keep_body(m.body)
                ))  # fmt: skip
            held.append(Leased(d.id, m.id, d.recipient, d.domain, m.priority, 0, 0, m.received_at, False))
        if self._tasks is None:
            self._holdings.hold(held)  # accepted while run() is starting: held now, routed once it runs
            self._early.extend(held)
        else:
            self._admit(held)

    # --- running -------------------------------------------------------------------------

    async def run(self) -> None:
        """Lease, route and send until stop(); then finish what is in flight (bounded
        by shutdown_timeout) and hand back the leases of what was not started."""
        await self._listen()
        try:
            await warmup.load(self._db, self._egress.days)  # warm-up days go on where they were
            await self._checkpoint()  # and the buckets start where the cluster's are
        except errors.SpoolError as exc:
            log.warning("checkpoint_failed", error=str(exc))  # the configured start rates; warm-up day 1
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                if self._early:
                    self._admit(self._early)
                    self._early = []
                loops = [
                    tasks.create_task(self._lease_loop(), name="lease"),
                    tasks.create_task(self._every(self.settings.lease_duration / 3, self._renew), name="renew"),
                    tasks.create_task(self._every(self.settings.lease_duration / 2, self._reap), name="reap"),
                    tasks.create_task(self._every(self._pool.settings.idle_timeout / 2, self._pool.close_idle)),
                    tasks.create_task(self._every(self.settings.checkpoint_interval, self._checkpoint)),
                ]
                await self._stop.wait()
                for task in loops:
                    task.cancel()
                await self._drain()
        finally:
            self._tasks = None
            if self._listener is not None:
                await self._listener.close()
            await self._pool.close()

    def stop(self) -> None:
        """Stop leasing and starting attempts; run() then drains and returns."""
        self._stopping = True
        self._stop.set()
        for group in self._groups.values():
            group.freed.set()

    async def run_until_idle(self) -> None:
        """Lease everything due now, deliver it, record it, and return (tests, tools)."""
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            if self._early:  # handed over by the accept path before this ran
                self._admit(self._early)
                self._early = []
            while await self._lease_once():
                pass
            await self.wait_idle()
        self._tasks = None

    async def wait_idle(self) -> None:
        """Until this node holds no delivery (every attempt recorded); for tests and tools."""
        while self._holdings:
            self._idle.clear()
            await self._idle.wait()

    async def _drain(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.shutdown_timeout):
                while self._holdings.worked_on:
                    self._progress.clear()
                    await self._progress.wait()
        for task in self._work:  # still on the wire after the timeout: their leases expire
            task.cancel()
        unstarted = self._holdings.unstarted()
        try:
            released = await leases.release(self._db, self.node, unstarted, self._now())
            if released:
                await self._db.execute("leases/notify_due")
            log.info("leases_released", count=len(released), cut_short=self._holdings.worked_on)
        except errors.SpoolError as exc:
            log.warning("release_failed", error=str(exc))  # they expire and are reaped
        try:
            await shaping.sync(self._db, self._shaper, self.node, self._now())  # the last checkpoint
            await shaping.leave(self._db, self.node)
            await warmup.save(self._db, self._egress.days, self._egress.now())
            await source_leases.release_all(self._db, self._egress, self.node)
        except errors.SpoolError as exc:
            log.warning("checkpoint_failed", error=str(exc))  # the previous one stands

    def _spawn(self, coro: Any) -> None:
        assert self._tasks is not None
        task = self._tasks.create_task(self._kept(coro))
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    @staticmethod
    async def _kept(coro: Any) -> None:
        """A piece of work the database went away under ends alone, never the engine:
        what it held comes back when its leases run out."""
        try:
            await coro
        except errors.SpoolError as exc:
            log.warning("work_interrupted", work=getattr(coro, "__qualname__", "?"), error=str(exc))

    async def _every(self, interval: float, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except errors.SpoolError as exc:
                log.warning("periodic_task_failed", task=getattr(action, "__name__", "?"), error=str(exc))

    async def _listen(self) -> None:
        """LISTEN for due mail, again after the connection was lost (the database
        restarted); meanwhile the periodic poll still finds the work."""
        if self._listener is not None and self._listener.alive:
            return
        try:
            self._listener = await db.Listener.open(self._db.dsn, CHANNEL, self._wake.set)
        except errors.DatabaseUnavailable as exc:
            log.warning("listen_failed", error=str(exc))

    async def _lease_loop(self) -> None:
        """Lease whenever woken (NOTIFY, room freed) or every poll_interval."""
        while not self._stopping:
            await self._listen()
            try:
                full = await self._lease_once()
            except errors.SpoolError as exc:
                log.warning("lease_failed", error=str(exc))
                full = False
            if full:
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_interval):
                    await self._wake.wait()

    async def _lease_once(self) -> bool:
        """Lease one batch; True when it was full (more may be due)."""
        room = min(self.settings.lease_batch, self.settings.max_held - len(self._holdings))
        if room <= 0:
            return False
        now = self._now()
        got = await leases.lease(self._db, self.node, room, now, self.lease_until(now))
        self._stats.leased += len(got)
        metrics.LEASED.inc(len(got))
        if got:
            await self._load_messages({d.message for d in got})
            self._admit(got)
        return len(got) == room

    async def _renew(self) -> None:
        """Extend the lease of every delivery held, those on the wire included: a send
        slower than the lease must not be reaped and sent again, nor free its mailbox."""
        asked = list(self._holdings)
        now = self._now()
        kept = await leases.renew(self._db, self.node, asked, self.lease_until(now))
        # Lost: taken over after our lease expired, or recorded meanwhile (then already
        # let go of). Only what we still hold and nobody is working on counts.
        lost = self._holdings.lost(asked, kept)
        if lost:
            log.warning("leases_lost", count=len(lost))
        gone = await source_leases.renew(self._db, self._egress, self.node, self.lease_until(now).timestamp())
        if gone:
            log.warning("source_leases_lost", addresses=gone)

    async def _checkpoint(self) -> None:
        """Share the buckets and warm-up caps among the live nodes, checkpoint the buckets
        (adopting other nodes' changes), hear the warm-up days' complaints, end the days
        that are over, save warm-up."""
        now = self._now()
        live = max(1, await nodes.live(self._db, now - timedelta(seconds=self.settings.node_timeout)))
        if live != self._shaper.nodes:
            log.info("nodes_changed", live=live, share=f"1/{live}")  # every bucket is re-divided
        self._shaper.set_nodes(live)
        self._egress.set_nodes(live)
        await shaping.sync(self._db, self._shaper, self.node, now)
        await warmup.hear(self._db, self._egress.days)  # a day is judged with the complaints that came within it
        for end in self._egress.advance_days(now.timestamp()):
            log.info(
                "warmup_day_ended", address=end.address, group=end.provider, day=end.day, next_day=end.next_day,
                sent=end.sent, deferred=end.deferred, complaints=end.complaints, warm=end.warm, refused=end.why,
            )  # fmt: skip
        await warmup.save(self._db, self._egress.days, self._egress.now())
        for group in self._groups.values():
            group.freed.set()  # a cap may have grown

    async def _reap(self) -> None:
        reaped = await leases.reap(self._db, self._now())
        if reaped:
            self._stats.reaped += reaped
            metrics.REAPED.inc(reaped)
            log.info("leases_reaped", count=reaped)
            await self._db.execute("leases/notify_due")

    # --- from held deliveries to ready queues ------------------------------------------------

    def _admit(self, deliveries: Iterable[Leased]) -> None:
        """Hold deliveries and group them into jobs (one message, one domain, a few recipients)."""
        jobs: dict[tuple[uuid.UUID, str], list[_Job]] = {}
        most = self.settings.max_recipients_per_transaction
        for d in deliveries:
            self._holdings.hold([d])
            batch = jobs.setdefault((d.message, d.domain), [])
            message = self._holdings.message(d.message)
            limit = most if self._alone(message, d.domain) is None else 1
            if not batch or len(batch[-1].deliveries) >= limit:
                tenant = message.tenant if message is not None else ""
                batch.append(_Job(d.message, tenant, d.domain, [], d.priority, d.created_at))
            batch[-1].deliveries.append(d)
        for per_domain in jobs.values():
            for job in per_domain:
                self._holdings.job_added(job.message)
                self._spawn(self._route(job))

    async def _route(self, job: _Job) -> None:
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
            await self._finish_or_forget(job, _failed(job, Failure.DNS_TEMPFAIL), {"dns": str(exc)})
            return
        if isinstance(route, routing.Undeliverable):
            await self._finish_or_forget(job, _failed(job, Failure.NO_ROUTE), {"route": route.text})
            return
        self._queue(job, route, route.group, None)

    async def _finish_or_forget(self, job: _Job, verdicts: strategies.Verdicts, data: dict[str, Any]) -> None:
        """Record a job that ends before any attempt; with the database away, let go of it
        (its leases run out and the reaper queues it again)."""
        try:
            await self._finish(job, None, verdicts, data)
        except errors.SpoolError as exc:
            log.warning("outcome_not_recorded", queue_id=str(job.message), error=str(exc))
            self._forget(job)

    def _account_pool(self, job: _Job) -> str | None:
        """The account pool a job is relayed through: the message's (its header, its
        tenant's), else its route's; None: it goes to MX."""
        chosen = self._relayed_through(self._holdings.message(job.message), job.domain)
        if chosen and self._mailboxes is None:
            log.warning("relay_not_configured", account_pool=chosen, queue_id=str(job.message))
            return None
        return chosen

    def _alone(self, message: Message | None, domain: str) -> str | None:
        """Why a delivery is sent in a transaction of its own (None: it need not be): its
        envelope sender (VERP) or its List-Unsubscribe link names it."""
        if self._verp is not None and self._relayed_through(message, domain) is None:
            return "verp"
        tenant = message.tenant if message is not None else ""
        if self._unsubscribing is not None and tenant in self.settings.list_unsubscribe:
            return "list_unsubscribe"
        return None

    def _relayed_through(self, message: Message | None, domain: str) -> str | None:
        return (message and message.account_pool) or self.settings.route_account_pools.get(domain) or None

    def _queue(self, job: _Job, route: routing.Route | None, name: str, account_pool: str | None) -> None:
        """Into its ready queue, one per provider group and source pool (so that a pool
        whose addresses all wait holds back no mail of another pool); its dispatcher
        runs while it has jobs."""
        pool = None if account_pool is not None else self._pool_of(job, name)
        why = self._suspended(job, name, pool)
        if why is not None:
            self._spawn(self._set_aside(job, why, route, name, account_pool))
            return
        key = (name, pool)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(
                name, ReadyQueue(self.settings.tenant_weights), account_pool=account_pool
            )
        group.ready.push(job.tenant, job.priority, job.created_at, (job, route))
        job.started = False
        if account_pool is None and self._signatures.signer.keys:
            group.unsigned.append(job)
            if len(group.unsigned) > 2 * len(group.ready) + SIGN_AHEAD:  # mostly jobs started out of turn
                group.unsigned = collections.deque(j for j in group.unsigned if not j.started)
            self._sign_ahead(group)
        if not group.dispatching and not self._stopping:
            group.dispatching = True
            assert self._tasks is not None
            dispatch = self._dispatch_relay(group) if account_pool is not None else self._dispatch(group)
            self._tasks.create_task(dispatch)  # ends with the queue or the stop

    def _sign_ahead(self, group: _Group) -> None:
        """Sign the group's next jobs before their turn, in the order they came (at most
        SIGN_AHEAD of them), so that a job's session is taken for its send and not
        for its signing. Only a cache: the attempt signs what is not ready."""
        while group.unsigned and group.signed_ahead < SIGN_AHEAD and not self._stopping:
            job = group.unsigned.popleft()
            message = self._holdings.message(job.message)
            if job.started or job.signed_ahead or message is None or message.body is None:
                continue
            job.signed_ahead = True
            group.signed_ahead += 1
            self._spawn(self._sign_early(job, message, message.body))

    async def _sign_early(self, job: _Job, message: Message, body: bytes) -> None:
        with contextlib.suppress(Exception):  # its attempt signs again, and says what failed
            await self._sign(message, self._with_unsubscribe(job, message, body))

    def _started(self, group: _Group, job: _Job) -> None:
        """The job left its ready queue (to be sent, set aside or bounced)."""
        job.started = True
        if job.signed_ahead:
            job.signed_ahead = False
            group.signed_ahead -= 1
            self._sign_ahead(group)

    def reconfigure(self, settings: Settings, rules: outcomes.Rules, pools: Mapping[str, egress.PoolSettings],
                    relaying: relay.Settings | None = None) -> None:  # fmt: skip
        """A reload: new settings, reply rules, source pools and account pool defaults.
        What the node holds, its sessions, its leases and the buckets' learnt rates stay
        (the router, shared with submission, is reconfigured by the caller). Raises
        ConfigError, changing nothing, for pools the Egress refuses."""
        self._egress.reconfigure(pools)
        self.settings = dataclasses.replace(settings, node=self.settings.node)
        self._rules = rules
        if self._mailboxes is not None and relaying is not None:
            self._mailboxes.settings = relaying

    def controls_changed(self) -> None:
        """The operator's controls were read again (a suspension, reroute, pause or
        account changed): every queue looks at its jobs again now (a suspended one is
        set aside as it comes up, an account pool waiting for an account asks again),
        and the lease loop takes what a resume made due. Sync, no I/O."""
        for group in self._groups.values():
            group.resume_at = None
            group.freed.set()
        self._wake.set()

    async def _controls_again(self) -> None:
        """Read the controls now (begin.sql found this node's view behind), then lease
        what it queued again to leave another way."""
        if self._controls is not None:
            try:
                await self._controls.load(self._now())
            except errors.SpoolError as exc:
                log.warning("controls_unread", error=str(exc))
        self.controls_changed()

    def _suspended(self, job: _Job, provider: str, pool: str | None) -> suspensions.Suspension | None:
        """Why a job waits for an operator (a suspension of its provider group, tenant,
        source pool or every address it could leave from), if it does."""
        if self._controls is None:
            return None
        now = self._now()
        why = self._controls.held(now, tenant=job.tenant, provider=provider, pool=pool)
        if why is not None or provider.startswith("accounts:"):
            return why
        if pool is None:
            return self._controls.suspended("source", self._default_source or None, now)
        try:
            addresses = self._egress.pools[pool].addresses
        except KeyError:
            return None
        if all(self._controls.suspended("source", a, now) for a in addresses):
            return self._controls.suspended("source", addresses[0], now)
        return None

    async def _set_aside(
        self, job: _Job, why: suspensions.Suspension, route: routing.Route | None, provider: str,
        account_pool: str | None,
    ) -> None:  # fmt: skip
        """A suspended job back to the spool, due when its suspension ends: it holds no
        room on this node meanwhile. When the suspension was lifted meanwhile, the
        suspensions are read again and the job queued as it is now."""
        assert self._controls is not None
        ids = [d.id for d in job.deliveries]
        try:
            held = await suspensions.hold(self._db, self.node, ids, self._now(), why, provider)
        except errors.SpoolError as exc:  # its lease runs out; whoever takes it then sets it aside
            log.warning("set_aside_failed", queue_id=str(job.message), error=str(exc))
            held = set(ids)
        if not held:  # resumed meanwhile: look again
            with contextlib.suppress(errors.SpoolError):
                await self._controls.load(self._now())
            self._queue(job, route, provider, account_pool)
            return
        self._holdings.let_go(d.id for d in job.deliveries)  # set aside, or a lease lost
        self._holdings.job_done(job.message)
        log.info("set_aside", queue_id=str(job.message), count=len(held), suspended=why.kind, key=why.key,
                 group=provider)  # fmt: skip
        if not self._holdings:
            self._idle.set()
        self._wake.set()  # room to lease other mail

    async def _dispatch(self, group: _Group) -> None:
        """Start the group's jobs, best first, as its bucket allows: the one place
        where a delivery waits for permission to send."""
        try:
            while group.ready and not self._stopping:
                job, route = group.ready.peek()
                assert route is not None
                why = self._suspended(job, group.name, self._pool_of(job, group.name))
                if why is not None:  # suspended since it was queued
                    group.ready.pop()
                    self._started(group, job)
                    self._spawn(self._set_aside(job, why, route, group.name, None))
                    continue
                if self._expired(job):  # bounced without taking a token or a session
                    group.ready.pop()
                    self._started(group, job)
                    self._holdings.working(job.deliveries)
                    self._spawn(self._attempt(job, group, None))
                    continue
                out = self._permission(job, route, group.name)
                if isinstance(out, egress.Wanted):
                    await self._lease_source(out, len(group.ready), group)
                    continue
                if isinstance(out, _Wait):
                    group.freed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(out.seconds):
                            await group.freed.wait()
                    continue
                group.ready.pop()
                self._started(group, job)
                self._taken(out, group.name)
                self._holdings.working(job.deliveries)
                verp = self._verp.sender(job.deliveries[0].id) if self._verp and len(job.deliveries) == 1 else None
                way = strategies.ToMx(route, out, self._shaper, self._rng, on_answer=self._on_answer(group), verp=verp,
                                      tls=self._tls)  # fmt: skip
                self._spawn(self._attempt(job, group, way))
        finally:
            group.dispatching = False

    def _permission(self, job: _Job, route: routing.Route, provider: str) -> strategies.Source | _Wait | egress.Wanted:
        """A source for the job whose bucket lets it go now (a token and a session are
        taken), or how long to wait, or the source address lease to take first. One
        throttled or busy address does not hold the job back while another address
        of its pool could send it: each refused one is left out of the next choice,
        which changes nothing in the pool until the send goes. Sync."""
        refused: set[str] = set()
        waits: list[float | None] = []
        while True:
            out = self._egress_for(job, provider, frozenset(refused))
            if isinstance(out, egress.Wanted):
                if refused and out.address is None:
                    break  # a rotate pool waits for its turn's bucket rather than open another turn
                return out
            if refused and (out.choice is None or out.choice.fallback or out.address in refused):
                break  # every address the pool could use now has been refused
            if self._controls is not None and out.address in self._controls.sources(self._now()):
                return _Wait(SUSPENDED_RECHECK)  # the pool fell back to a suspended address: wait
            decision = self._shaper.take(provider, out.address, route.limits)
            if decision.go:
                return out
            waits.append(decision.retry_after)
            if out.choice is None or out.choice.fallback:
                break  # no pool (or none usable): its one source
            refused.add(out.address)
        timed = [w for w in waits if w is not None]
        return _Wait(min(timed) if timed else None)  # the first token, or a session freed (freed is set)

    def _pool_of(self, job: _Job, provider: str) -> str | None:
        """The source pool of a job: its provider group's reroute, else its route's, else
        the probation pool for a tenant on probation, else its message's, else the default."""
        rerouted = self._controls.rerouted(provider, self._now()) if self._controls is not None else None
        if rerouted is not None:
            return rerouted
        route = self.settings.route_pools.get(job.domain)
        if route is not None:
            return route
        if self.settings.probation_pool is not None and self._on_probation(job.tenant):
            return self.settings.probation_pool
        message = self._holdings.message(job.message)
        return (message and message.pool) or self.settings.default_pool

    def _egress_for(
        self, job: _Job, provider: str, refused: frozenset[str] = frozenset()
    ) -> strategies.Source | egress.Wanted:
        """The source of a job: from its pool (a route's, else the message's, else the
        default pool), none of `refused`, or the configured source_address when there is
        no pool; or the lease on a pool's address to take first. Changes nothing in
        the pool (Egress.taken does, when the send goes)."""
        pool = self._pool_of(job, provider)
        if pool is None:
            return strategies.Source(self._default_source)
        if self._controls is not None:
            refused = refused | self._controls.sources(self._now())
        try:
            choice = self._egress.choose(pool, provider, excluding=refused)
        except errors.ConfigError as exc:  # a pool removed from the configuration since the mail was accepted
            log.warning("unknown_pool", pool=pool, queue_id=str(job.message), error=str(exc))
            return strategies.Source(self._default_source)
        if isinstance(choice, egress.Wanted):
            return choice
        return strategies.Source(choice.address, pool, choice)

    async def _source(self, job: _Job, provider: str) -> strategies.Source:
        """The source of a job whose send waits for no bucket (relayed mail), its
        address leased first when it is not yet."""
        for _ in range(3):  # a lease lost between the take and the choice: take it again
            out = self._egress_for(job, provider)
            if not isinstance(out, egress.Wanted):
                return out
            await self._lease_source(out, 1, None)
        pool = self._pool_of(job, provider)
        raise errors.SpoolError(f"no lease on a source address of pool {pool} could be kept")

    async def _release_source(self, pool: str, address: str) -> None:
        """Give back this node's lease on an address whose turn it has sent."""
        try:
            parked = await source_leases.release(self._db, self._egress, self.node, pool, [address])
        except errors.SpoolError as exc:  # it expires; the next take parks the address then
            log.warning("source_release_failed", pool=pool, address=address, error=str(exc))
            return
        if parked:
            log.info("source_parked", pool=pool, address=address, seconds=self._egress.pools[pool].park)

    async def _lease_source(self, wanted: egress.Wanted, want: int, group: _Group | None) -> None:
        """Take the lease `wanted` (one take per pool at a time on this node); when the
        database cannot be reached, wait a poll interval (or until the group is freed)."""
        lock = self._taking.setdefault(wanted.pool, asyncio.Lock())
        async with lock:
            now = self._now()
            try:
                granted = await source_leases.take(self._db, self._egress, self.node, wanted, want,
                                            self.lease_until(now).timestamp())  # fmt: skip
            except errors.SpoolError as exc:
                log.warning("source_lease_failed", pool=wanted.pool, error=str(exc))
                if group is None:
                    raise
                group.freed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.poll_interval):
                        await group.freed.wait()
                return
            if granted.address is not None and granted.sends is not None:
                log.info("source_turn", pool=wanted.pool, address=granted.address, sends=granted.sends)
            elif granted.address is None:
                log.info("source_turn_none", pool=wanted.pool, parked=len(granted.parked))

    def _taken(self, source: strategies.Source, provider: str) -> None:
        """A send goes from `source`: counted now, so that the next choice sees it
        (cursors, warm-up caps, rotation)."""
        if source.pool is not None and source.choice is not None:
            self._egress.taken(source.pool, provider, source.choice)
            self._egress.sent(source.pool, provider, source.address)
            metrics.EGRESS_CHOICES.labels(pool=source.pool, kind=_kind(source.choice)).inc()

    def _on_answer(self, group: _Group) -> Callable[[strategies.Source, strategies.Feedback | None], None]:
        def answered(source: strategies.Source, feedback: strategies.Feedback | None) -> None:
            self._answered(group.name, source, feedback)
            if source.pool is not None and self._egress.ended(source.pool, source.address):
                self._spawn(self._release_source(source.pool, source.address))  # its turn is over here
            group.freed.set()

        return answered

    # --- one attempt -------------------------------------------------------------------------

    async def _attempt(self, job: _Job, group: _Group, way: strategies.Strategy | None) -> None:
        """One job's attempt along `way`, MX or mailbox (None: it expired in its queue,
        and only its bounce is recorded)."""
        started = time.perf_counter()
        try:
            if way is None or self._expired(job):
                if way is not None:
                    await way.abandon()
                verdict = outcomes.EXPIRED
                await self._finish(job, group.name, {d.id: (verdict, None) for d in job.deliveries}, {"expired": True})
            else:
                await self._send(job, group, way)
        except errors.SpoolError as exc:
            log.warning("attempt_not_recorded", message=str(job.message), error=str(exc))
            self._forget(job)  # the leases expire and the reaper requeues them; a reservation stays counted
        finally:
            if way is not None:
                way.answered(None)  # when the attempt ended before the receiver answered
            group.freed.set()
            self._holdings.waiting(job.deliveries)
            metrics.ATTEMPT_LATENCY.labels(group=group.name).observe(time.perf_counter() - started)
            self._progress.set()

    async def _send(self, job: _Job, group: _Group, way: strategies.Strategy) -> None:
        """Read, write the attempt id, plan, sign, send, classify, settle, record."""
        try:
            message = await self._message(job.message)
        except errors.NotFound:
            await way.abandon()
            await self._finish(job, group.name, _failed(job, Failure.MESSAGE_UNREADABLE), {"message": "missing"})
            return
        attempt = uuid.uuid4()
        try:
            begun = await self._begin_attempt(job, attempt, group.name, way)
        except errors.DatabaseUnavailable:  # the attempt id may be written, and nothing went out
            self._spawn(self._unbegin_when_back([d.id for d in job.deliveries]))
            raise
        if not begun:
            await way.abandon()
            return
        started_at = self._now()
        data: dict[str, Any] = {"attempt": str(attempt), **way.describe()}
        plan = await way.plan(message, data)
        result = None
        if isinstance(plan, Verdict):  # no way out now (a mailbox's login was refused)
            verdicts: strategies.Verdicts = {d.id: (plan, None) for d in job.deliveries}
        else:
            signed = await self._sign(message, self._with_unsubscribe(job, message, plan.body))  # after the last change
            data["dkim"] = signed.says
            recipients = tuple(d.recipient for d in job.deliveries)
            tx = sessions.Transaction(plan.sender, recipients, signed.body, message.smtputf8)
            self._stats.attempts += 1
            ehlo = plan.source.choice.ehlo if plan.source.choice else None
            result = await self._pool.deliver(
                plan.targets, tx, plan.source.address or None, label=group.name, ehlo=ehlo, login=plan.login
            )
            verdicts = self._classify(job, result)
            if signed.made is not None and any(v.state is State.DEFERRED for v, _ in verdicts.values()):
                self._spawn(self._signatures.keep(message, signed.made))  # for the retry
            data.update(address=result.address, source=result.source, tls=result.tls, reused=result.reused)
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
            metrics.SESSIONS_REUSED.labels(group=group.name).inc(result.reused)
        way.answered(strategies.Feedback.of(result, verdicts))
        again = await way.settle(job.deliveries, verdicts, result, data)
        if again:  # nothing went out to them: back to the queue, for another way
            await leases.unbegin(self._db, self.node, [d.id for d in again], self._now())
            job.deliveries = [d for d in job.deliveries if d not in again]
            self._holdings.waiting(again)  # waiting again: renewed, released at a stop
            why = verdicts[again[0].id][0].cls.value
            log.info("rerouted", queue_id=str(job.message), count=len(again), group=group.name,
                     account=data.get("account"), account_pool=group.account_pool, **{"class": why})  # fmt: skip
            self._queue(self._split(job, again), None, group.name, group.account_pool)
            if not job.deliveries:
                self._holdings.job_done(job.message)
                return
        if result is not None and result.maybe_sent and isinstance(way, strategies.ThroughMailbox):
            kept = await self._hold_unanswered(job, group, way, verdicts, data, started_at)
            if kept is None:
                return
        await self._finish(job, group.name, verdicts, data, started_at=started_at)

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

    def _with_unsubscribe(self, job: _Job, message: Message, body: bytes) -> bytes:
        """The body with the recipient's List-Unsubscribe fields (one-click, RFC 8058) when
        its tenant asks for them and the message has none of its own."""
        if self._unsubscribing is None or job.tenant not in self.settings.list_unsubscribe or len(job.deliveries) != 1:
            return body
        delivery = job.deliveries[0]
        mailto = self._verp.unsubscribe(delivery.id) if self._verp is not None else None  # to the inbound listener
        return self._unsubscribing.fields(job.tenant, delivery.recipient, message.id, body, mailto)

    def _classify(self, job: _Job, result: sessions.Result) -> strategies.Verdicts:
        """Each recipient's verdict: the receiver's reply, else the local failure."""
        verdicts: strategies.Verdicts = {}
        classified: dict[tuple[Reply, str], Verdict] = {}  # recipients accepted together share the reply to the data
        for d in job.deliveries:
            reply = result.replies.get(d.recipient)
            if reply is not None:
                key = (reply, result.commands.get(d.recipient, ""))
                verdict = classified.get(key) or classified.setdefault(key, self._rules.classify(*key))
                verdicts[d.id] = (verdict, reply)
            else:
                verdicts[d.id] = (outcomes.classify_failure(result.failure or Failure.INTERNAL), None)
        return verdicts

    def _answered(self, provider: str, source: strategies.Source, feedback: strategies.Feedback | None) -> None:
        """What the receiver made of a send through a pool's address (warm-up, health)."""
        outcome = feedback.outcome if feedback is not None else None
        if source.pool is None or outcome is None:
            return
        if self._egress.report(source.pool, provider, source.address, outcome):
            log.warning("source_unhealthy", pool=source.pool, address=source.address, group=provider,
                        outcome=outcome.value)  # fmt: skip

    def _expired(self, job: _Job) -> bool:
        return self._now() - job.created_at >= timedelta(seconds=self.settings.max_age)

    async def _sign(self, message: Message, body: bytes) -> Signed:
        """The body with its DKIM signatures, with the keys active now: the tenant's
        signing domain, else the From field's."""
        domain = self.settings.tenant_dkim_domains.get(message.tenant)
        return await self._signatures.sign(message, body, domain, self.settings.dkim_canonicalization)

    async def _begin_attempt(self, job: _Job, attempt: uuid.UUID, group: str, way: strategies.Strategy) -> bool:
        """Write the attempt id before DATA; drop deliveries whose lease was lost, those
        whose recipient was suppressed while they waited (cancelled now), those of a
        tenant paused meanwhile and those an operator's control forbids to send this
        way (queued again: begin.sql checks them all, whatever this node's view of
        them). False when none is left to send."""
        ids = tuple(d.id for d in job.deliveries)
        source = way.source if isinstance(way, strategies.ToMx | strategies.ThroughMailbox) else None
        account = way.reservation.account.id if isinstance(way, strategies.ThroughMailbox) else None
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
            if begun.held:
                log.info("held", queue_id=str(job.message), tenant=job.tenant, count=len(begun.held),
                         reason="tenant_paused", group=group)  # fmt: skip
            if begun.set_aside:  # this node's view of the controls was behind: read them again
                log.info("set_aside", queue_id=str(job.message), count=len(begun.set_aside), before_attempt=True,
                         group=group)  # fmt: skip
                self._spawn(self._controls_again())
            gone = len(begun.suppressed) + len(begun.held) + len(begun.set_aside)
            if len(lost) > gone:
                log.warning("leases_lost_before_sending", count=len(lost) - gone)
            self._stats.cancelled += len(begun.suppressed)
            self._holdings.let_go(d.id for d in lost)
            job.deliveries = [d for d in job.deliveries if d.id in begun.owned]
            if not job.deliveries:
                self._holdings.job_done(job.message)
                if not self._holdings:
                    self._idle.set()
                return False
        return True

    async def _unbegin_when_back(self, ids: list[int]) -> None:
        """Clear the attempt ids of deliveries whose begin may have landed as the database
        went away, once it is back and while their leases last: else a relayed one would
        pass for maybe sent, and be held for an operator though nothing went out."""
        until = time.monotonic() + self.settings.lease_duration
        pause = UNBEGIN_FIRST_PAUSE
        while not self._stopping and time.monotonic() < until:
            await asyncio.sleep(pause)
            try:
                await leases.unbegin(self._db, self.node, ids, self._now())
                return
            except errors.SpoolError:
                pause = min(pause * 2, UNBEGIN_LAST_PAUSE)
        log.warning("attempt_id_not_cleared", count=len(ids))

    # --- relay through sending mailboxes ----------------------------------------------------

    async def _dispatch_relay(self, group: _Group) -> None:
        """Start the group's jobs, best first, each on a reservation of its account pool:
        the one place where relayed mail waits (for a mailbox's gap, cap, rate or
        state). Reservations are sought for up to RESERVE_BATCH jobs at once (one
        round trip), by up to RESERVING callers; when one finds no account free, the
        pool waits until one may be."""
        try:
            while group.ready and not self._stopping:
                if group.resume_at is not None:  # no account was free: only time frees one
                    group.freed.clear()
                    try:
                        async with asyncio.timeout(max(0.0, (group.resume_at - self._now()).total_seconds())):
                            await group.freed.wait()  # or the stop
                    except TimeoutError:
                        group.resume_at = None
                    continue
                if group.reserving >= RESERVING:
                    group.freed.clear()
                    await group.freed.wait()
                    continue
                batch: list[_Job] = []
                while group.ready and len(batch) < RESERVE_BATCH:
                    job, _ = group.ready.pop()
                    why = self._suspended(job, group.name, None)
                    if why is not None:  # suspended since it was queued
                        self._spawn(self._set_aside(job, why, None, group.name, group.account_pool))
                        continue
                    self._holdings.working(job.deliveries)  # in hand: renewed, kept if lost, not released
                    if self._expired(job):  # bounced without taking a reservation
                        self._spawn(self._attempt(job, group, None))
                    else:
                        batch.append(job)
                if batch:
                    group.reserving += 1
                    self._spawn(self._reserve(batch, group))
        finally:
            group.dispatching = False

    async def _reserve(self, batch: list[_Job], group: _Group) -> None:
        """Reservations for a batch of jobs, best first, then their attempts; the jobs
        left without one go back to their queue (and the pool waits when none got one)."""
        assert self._mailboxes is not None
        assert group.account_pool is not None
        try:
            wants = [accounts.Want(len(job.deliveries), job.deliveries[0].id) for job in batch]
            taken = await self._mailboxes.take(group.account_pool, wants, self.node)
        except errors.SpoolError as exc:
            log.warning("account_pool_unreadable", account_pool=group.account_pool, error=str(exc))
            taken = relay.Wait(self._now() + timedelta(seconds=self.settings.poll_interval), False)
        finally:
            group.reserving -= 1
            group.freed.set()
        reservations = [] if isinstance(taken, relay.Wait) else taken
        if isinstance(taken, relay.Wait):
            group.resume_at = max(group.resume_at or taken.until, taken.until)
        if self._stopping:
            for reservation in reservations:
                await accounts.release(self._db, reservation.id)  # never used: the node is stopping
            reservations = []
        waiting = batch[len(reservations) :]
        for job, reservation in zip(batch, reservations, strict=False):
            if reservation.recipients < len(job.deliveries):  # what the account's caps allow now: the rest waits
                rest = job.deliveries[reservation.recipients :]
                job.deliveries = job.deliveries[: reservation.recipients]
                waiting.append(self._split(job, rest))
            self._spawn(self._attempt_through(job, group, reservation))

        due = self._hand_back_due(taken) if isinstance(taken, relay.Wait) and not self._stopping else None
        if due is not None:  # a long wait: this node's mail of the pool goes back to the spool
            waiting += [group.ready.pop()[0] for _ in range(len(group.ready))]
            waiting = await self._hand_back(waiting, group, due)
        for job in waiting:
            self._holdings.waiting(job.deliveries)
            self._queue(job, None, group.name, group.account_pool)
        self._progress.set()  # a drain waits for what is in hand

    async def _attempt_through(self, job: _Job, group: _Group, reservation: accounts.Reservation) -> None:
        """A relayed job's attempt on its reservation, from a leased address of its pool."""
        assert self._mailboxes is not None
        try:
            source = await self._source(job, group.name)  # relayed mail leaves from its pool's address too
        except errors.SpoolError as exc:  # the database is out of reach: the job waits in its queue
            log.warning("source_not_leased", queue_id=str(job.message), error=str(exc))
            with contextlib.suppress(errors.SpoolError):
                await accounts.release(self._db, reservation.id)  # never used
            self._holdings.waiting(job.deliveries)
            self._queue(job, None, group.name, group.account_pool)
            return
        self._taken(source, group.name)
        way = strategies.ThroughMailbox(reservation, source, self._mailboxes, self._db,
                                        on_answer=self._on_answer(group))  # fmt: skip
        await self._attempt(job, group, way)

    def _split(self, job: _Job, deliveries: list[Leased]) -> _Job:
        """A job of the same message for `deliveries`, taken off `job`."""
        self._holdings.job_added(job.message)
        return _Job(job.message, job.tenant, job.domain, deliveries, job.priority, job.created_at)

    def _hand_back_due(self, wait: relay.Wait) -> datetime | None:
        """When the mail of a pool that has no account free is due again if it goes back
        to the spool; None when the wait is short enough to wait out in memory."""
        assert self._mailboxes is not None
        after = timedelta(seconds=self._mailboxes.settings.hand_back_after)
        now = self._now()
        if wait.free_at is None:  # only an operator can free an account: look again after a while
            return now + after
        return wait.free_at if wait.free_at - now >= after else None

    async def _hand_back(self, jobs: list[_Job], group: _Group, due: datetime) -> list[_Job]:
        """Mail that would wait long for a mailbox back to the spool, queued and due at
        `due` (any node may take it then), so that it holds no room on this node
        meanwhile: MX mail is not stuck behind it. Returns the jobs kept (a delivery
        that may have been sent before a crash is not handed back)."""
        ids = [d.id for job in jobs for d in job.deliveries]
        why = {"reason": "account_pool_busy", "account_pool": group.account_pool, "until": due.isoformat()}
        try:
            released = await leases.release(self._db, self.node, ids, self._now(), due, why)
        except errors.SpoolError as exc:
            log.warning("hand_back_failed", account_pool=group.account_pool, error=str(exc))
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
            log.info("handed_back", account_pool=group.account_pool, count=len(released), due=due.isoformat())
        if not self._holdings:
            self._idle.set()
        self._wake.set()  # room to lease other mail
        return kept

    # --- relayed sends that may have gone out ----------------------------------------------

    async def _hold_maybe_sent(self, job: _Job, account_pool: str) -> _Job | None:
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
                await self._hold(self._split(job, deliveries), group, unknown, "unrecorded_attempt", data)
        except errors.SpoolError as exc:
            log.warning("maybe_sent_not_held", queue_id=str(job.message), error=str(exc))
            self._forget(job)
            return None
        if not job.deliveries:
            self._holdings.job_done(job.message)
            return None
        return job

    async def _hold_unanswered(
        self, job: _Job, group: _Group, way: strategies.ThroughMailbox, verdicts: strategies.Verdicts,
        data: dict[str, Any], started_at: datetime,
    ) -> _Job | None:  # fmt: skip
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
        await self._hold(self._split(job, unanswered), group.name, unknown, "lost_after_data", data, started_at)
        if not job.deliveries:
            self._holdings.job_done(job.message)
            return None
        return job

    async def _hold(
        self, job: _Job, group: str, unknown: relay.Unknown, why: str, data: dict[str, Any],
        started_at: datetime | None = None,
    ) -> None:  # fmt: skip
        """Hold every delivery of the job unknown, each with its event (`why`: how it may
        have gone out), and let go of them."""
        self._holdings.working(job.deliveries)  # being recorded: kept if its lease is lost
        now = self._now()
        said = {**data, "group": group, "why": why, "looked_for": unknown.looked_for,
                "resend_at": unknown.until.isoformat() if unknown.looked_for else None}  # fmt: skip
        recorded = [
            Outcome(d.id, job.tenant, State.UNKNOWN, Reason.MAYBE_SENT, None, unknown.until, group, False,
                    {"recipient": d.recipient, **said})
            for d in job.deliveries
        ]  # fmt: skip
        try:
            await unknowns.hold(self._db, self.node, recorded, [unknown.account] * len(recorded), now)
        finally:
            self._holdings.waiting(job.deliveries)
            self._forget(job)
        self._count(job, group, recorded, data.get("source"), now, started_at)
        for outcome in recorded:
            self._log(outcome, job)

    async def _finish(
        self,
        job: _Job,
        group: str | None,
        verdicts: dict[int, tuple[Verdict, Any]],
        data: dict[str, Any],
        *,
        started_at: datetime | None = None,
    ) -> None:
        """Decide each delivery's next state, record it with its event, let go of it.
        `started_at`: when the attempt began, if one was made."""
        self._holdings.working(job.deliveries)  # being recorded: kept if its lease is lost
        now = self._now()
        tenant = job.tenant  # travels with the job: no second read of the message
        recorded: list[Outcome] = []
        lines: dict[Reply, str] = {}
        if group is not None:
            data = {**data, "group": group}
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
        self._count(job, group, recorded, data.get("source"), now, started_at)
        for outcome in recorded:
            self._log(outcome, job)
        self._forget(job)

    def _count(
        self,
        job: _Job,
        group: str | None,
        recorded: list[Outcome],
        source: str | None,
        now: datetime,
        started_at: datetime | None,
    ) -> None:
        """The outcomes in the statistics and the metrics; the queue wait of the first
        attempts, the latency of the final outcomes, the reasons of the others."""
        counted = collections.Counter(o.state.value for o in recorded)
        for name, count in counted.items():
            setattr(self._stats, name, getattr(self._stats, name) + count)
            metrics.DELIVERIES.labels(outcome=name, group=group or "-").inc(count)
            metrics.DELIVERIES_BY_SOURCE.labels(outcome=name, source=source or "-").inc(count)
            metrics.DELIVERIES_BY_TENANT.labels(outcome=name, tenant=job.tenant or "-").inc(count)
        provider = _provider(group)
        accepted_at = {d.id: d.created_at for d in job.deliveries}
        if started_at is not None:
            for d in job.deliveries:
                if d.attempts == 0 and not d.maybe_sent:  # its first attempt
                    wait = (started_at - d.created_at).total_seconds()
                    metrics.QUEUE_WAIT.labels(group=provider).observe(max(0.0, wait))
        for outcome in recorded:
            if outcome.state in _FINAL:
                latency = (now - accepted_at[outcome.delivery]).total_seconds()
                metrics.DELIVERY_LATENCY.labels(outcome=outcome.state.value, group=provider).observe(max(0.0, latency))
            if outcome.state in (State.BOUNCED, State.DEFERRED):
                why = outcome.data.get("reason") or "undefined"
                metrics.BOUNCE_REASONS.labels(reason=why, group=provider, kind=outcome.state.value).inc()

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
        begun = await leases.begin(self._db, self.node, attempts, self._now())
        return [begun.of(a.deliveries) for a in attempts]

    async def _record_batch(self, batches: list[list[Outcome]]) -> list[set[int]]:
        expiry = self.settings.bounce_suppression
        recorded = await leases.record(self._db, self.node, [o for batch in batches for o in batch], self._now(),
                                       timedelta(seconds=expiry) if expiry is not None else None)  # fmt: skip
        return [recorded.intersection(o.delivery for o in batch) for batch in batches]

    def _log(self, outcome: Outcome, job: _Job) -> None:
        """One log line per delivery and outcome, with every field of docs/logging.md
        (null where it does not apply)."""
        data = outcome.data
        log.info(
            outcome.state.value,
            delivery=outcome.delivery,
            queue_id=str(job.message),
            tenant=job.tenant,
            recipient=data.get("recipient"),
            group=outcome.route_group or "-",
            reason=outcome.reason.value if outcome.reason else None,
            bounce_reason=data.get("reason"),
            status=data.get("status"),
            reply=data.get("reply"),
            attempt=data.get("attempt"),
            mx=data.get("mx") or None,
            address=data.get("address") or None,
            source=data.get("source") or None,
            tls=data.get("tls"),
            pool=data.get("pool"),
            account=data.get("account"),
            next_attempt=outcome.next_attempt_at.isoformat() if outcome.next_attempt_at else None,
        )

    def _forget(self, job: _Job) -> None:
        self._holdings.let_go(d.id for d in job.deliveries)
        self._holdings.job_done(job.message)
        if not self._holdings:
            self._idle.set()
            self._wake.set()  # room to lease again

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

    async def _message(self, message_id: uuid.UUID) -> Message:
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
        message = Message(row["id"], row["tenant"], row["sender"], row["smtputf8"], row["pool"],
                           row["account_pool"], self._holdings.keep_body(body))  # fmt: skip
        if row["dkim_fields"] is not None:  # the signatures of an earlier attempt, for a retry to reuse
            message.kept = (bytes(row["dkim_header"]), tuple(row["dkim_keys"]))
            message.signatures[message.kept] = bytes(row["dkim_fields"])
        return message


_FINAL = frozenset({State.DELIVERED, State.BOUNCED, State.FAILED})  # no attempt follows


def _provider(group: str | None) -> str:
    """The group as the latency histograms label it: a receiver of no provider group
    (routing names it mx:HOSTS, one per set of MX hosts) counts as `other`."""
    if group is None or group.startswith("mx:"):
        return "other"
    return group


def _kind(choice: egress.Choice) -> str:
    """How a source was chosen, for mtad_egress_choices."""
    return "fallback" if choice.fallback else "spill" if choice.why else "ordinary"


def _failed(job: _Job, failure: Failure) -> dict[int, tuple[Verdict, Any]]:
    verdict = outcomes.classify_failure(failure)
    return {d.id: (verdict, None) for d in job.deliveries}
