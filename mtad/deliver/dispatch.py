"""Dispatch: the ready queues, and the one place a job waits for permission to send.

A routed job waits in the ready queue of its (provider group, source pool), so that
a pool whose addresses all wait holds back no mail of another pool: priority
first, then tenants' turns, then age. `Dispatch` decides, sync and without I/O,
what the job at the head of a queue does now: wait (for a token, a session, a
source address lease), go from a source whose bucket gave its permission (shaping:
rate, burst, session cap per provider group and source address; egress: the
address of its pool), be set aside for an operator's suspension, or be bounced
unsent once expired. `Dispatcher` runs one loop per queue that has jobs: it waits
as told, takes the source address leases and the mailbox reservations of account
pools (in PostgreSQL), and hands each job that may go to the attempt, with the
way out it goes by.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.deliver import egress, jobs, shaping, source_leases, strategies
from mtad.deliver.holdings import Holdings, Message
from mtad.deliver.jobs import Group, Job, Wait
from mtad.deliver.ready import ReadyQueue
from mtad.deliver.record import Recorder
from mtad.deliver.settings import Settings
from mtad.deliver.signatures import Signatures
from mtad.feedback.verp import Verp
from mtad.mailboxes import accounts, choosing, relay
from mtad.outbound import policies, routing
from mtad.spool import suspensions

log = structlog.get_logger("mtad.delivery")

RESERVING = 2  # callers seeking reservations at once per account pool
RESERVE_BATCH = 64  # jobs one caller seeks reservations for (one round trip: 0.12 ms each, against 0.19 at 16)
SUSPENDED_RECHECK = 5.0  # seconds a job waits to look again when only a suspended address could send it
# MX jobs of a group signed before their turn, at most: enough to cover a signature's
# round trip through a busy worker (about 60 ms) at a thousand messages a second.
SIGN_AHEAD = 100

Attempt = Callable[[Job, Group, strategies.Strategy | None], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Ready:
    """A job taken from its queue, and how it leaves it: from `source`, whose bucket
    gave its permission (MX); set aside for `suspended`; or, with neither, expired
    (only its bounce is recorded). A relayed job has neither yet: its reservation
    comes next."""

    job: Job
    route: routing.Route | None
    source: strategies.Source | None = None
    suspended: suspensions.Suspension | None = None


class Dispatch:
    """The ready queues and the permission step. Sync, no I/O."""

    def __init__(
        self,
        settings: Settings,
        holdings: Holdings,
        shaper: shaping.Shaper,
        pools: egress.Egress,
        *,
        controls: suspensions.Controls | None,
        on_probation: Callable[[str], bool],
        default_source: str,
        now: Callable[[], datetime],
    ) -> None:
        self.settings = settings
        self._holdings = holdings
        self._shaper = shaper
        self._egress = pools
        self._controls = controls  # the operator's suspensions and reroutes
        self._on_probation = on_probation  # tenants.States.on_probation
        self._default_source = default_source  # the source of mail without a pool
        self._now = now
        self.groups: dict[tuple[str, str | None], Group] = {}  # (provider group, source pool): its queue

    def push(
        self, job: Job, route: routing.Route | None, name: str, account_pool: str | None
    ) -> Group | suspensions.Suspension:
        """Into its ready queue, one per provider group and source pool; returns the
        group, or the suspension the job waits for (then it is queued nowhere)."""
        pool = None if account_pool is not None else self.pool_of(job, name)
        why = self.suspended(job, name, pool)
        if why is not None:
            return why
        key = (name, pool)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(name, ReadyQueue(self.settings.tenant_weights), account_pool=account_pool)
        group.ready.push(job.tenant, job.priority, job.created_at, (job, route), job.campaign)
        job.started = False
        return group

    def next(self, group: Group) -> Ready | Wait | egress.Wanted:
        """What the best job of an MX group does now: go (taken from the queue, its
        token and session taken, its source counted), or be set aside or bounced
        (taken from the queue), or wait (`Wait`, or for the source address lease
        `Wanted`)."""
        job, route = group.ready.peek()
        assert route is not None
        why = self.suspended(job, group.name, self.pool_of(job, group.name))
        if why is not None:  # suspended since it was queued
            group.ready.pop()
            return Ready(job, route, suspended=why)
        if job.expired(self._now(), self.settings.max_age):  # bounced without taking a token or a session
            group.ready.pop()
            return Ready(job, route)
        out = self._permission(job, route, group.name)
        if isinstance(out, egress.Wanted | Wait):
            return out
        group.ready.pop()
        self.taken(out, group.name)
        return Ready(job, route, out)

    def next_relayed(self, group: Group) -> Ready:
        """The best job of an account pool's group, taken from the queue: to be set
        aside, bounced, or (neither) to seek a reservation."""
        job, route = group.ready.pop()
        why = self.suspended(job, group.name, None)
        return Ready(job, route, suspended=why)

    def _permission(self, job: Job, route: routing.Route, provider: str) -> strategies.Source | Wait | egress.Wanted:
        """A source for the job whose bucket lets it go now (a token and a session are
        taken), or how long to wait, or the source address lease to take first. One
        throttled or busy address does not hold the job back while another address
        of its pool could send it: each refused one is left out of the next choice,
        which changes nothing in the pool until the send goes."""
        refused: set[str] = set()
        waits: list[float | None] = []
        while True:
            out = self.source_of(job, provider, frozenset(refused))
            if isinstance(out, egress.Wanted):
                if refused and out.address is None:
                    break  # a rotate pool waits for its turn's bucket rather than open another turn
                return out
            if refused and (out.choice is None or out.choice.fallback or out.address in refused):
                break  # every address the pool could use now has been refused
            if self._controls is not None and out.address in self._controls.sources(self._now()):
                return Wait(SUSPENDED_RECHECK)  # the pool fell back to a suspended address: wait
            decision = self._shaper.take(provider, out.address, route.limits)
            if decision.go:
                return out
            waits.append(decision.retry_after)
            if out.choice is None or out.choice.fallback:
                break  # no pool (or none usable): its one source
            refused.add(out.address)
        timed = [w for w in waits if w is not None]
        return Wait(min(timed) if timed else None)  # the first token, or a session freed (freed is set)

    def pool_of(self, job: Job, provider: str) -> str | None:
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

    def source_of(
        self, job: Job, provider: str, refused: frozenset[str] = frozenset()
    ) -> strategies.Source | egress.Wanted:
        """The source of a job: from its pool (a route's, else the message's, else the
        default pool), none of `refused`, or the configured source_address when there is
        no pool; or the lease on a pool's address to take first. Changes nothing in
        the pool (`taken` does, when the send goes)."""
        pool = self.pool_of(job, provider)
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

    def suspended(self, job: Job, provider: str, pool: str | None) -> suspensions.Suspension | None:
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

    def taken(self, source: strategies.Source, provider: str) -> None:
        """A send goes from `source`: counted now, so that the next choice sees it
        (cursors, warm-up caps, rotation)."""
        if source.pool is not None and source.choice is not None:
            self._egress.taken(source.pool, provider, source.choice)
            self._egress.sent(source.pool, provider, source.address)
            metrics.EGRESS_CHOICES.labels(pool=source.pool, kind=_kind(source.choice)).inc()

    def answered(self, group: Group, source: strategies.Source, feedback: strategies.Feedback | None) -> bool:
        """The receiver answered a send of the group (None: the attempt ended before it
        did): an MX bucket gets its session back with what the receiver said, the
        source address's pool hears of it (warm-up, health), and the group looks
        again. True when the address's turn is over on this node."""
        if group.account_pool is None:
            given = feedback or strategies.Feedback()
            self._shaper.done(group.name, source.address, delivered=given.delivered,
                              throttled=given.throttled or given.refused)  # fmt: skip
        outcome = feedback.outcome if feedback is not None else None
        if (
            source.pool is not None
            and outcome is not None
            and self._egress.report(source.pool, group.name, source.address, outcome)
        ):
            log.warning("source_unhealthy", pool=source.pool, address=source.address, group=group.name,
                        outcome=outcome.value)  # fmt: skip
        ended = source.pool is not None and self._egress.ended(source.pool, source.address)
        group.freed.set()
        return ended

    def free(self, *, resume: bool = False) -> None:
        """Every queue looks at its jobs again (a cap may have grown, a control changed);
        `resume`: an account pool that waits for an account asks again now."""
        for group in self.groups.values():
            if resume:
                group.resume_at = None
            group.freed.set()


class Dispatcher:
    """One loop per ready queue with jobs: waits as `Dispatch` says, takes source address
    leases and mailbox reservations, and hands what may go to its attempt (started in
    a task of its own, or awaited in the task that took the job's source address)."""

    def __init__(
        self,
        dispatch: Dispatch,
        database: db.Database,
        holdings: Holdings,
        recorder: Recorder,
        signatures: Signatures,
        *,
        pools: egress.Egress,
        mailboxes: relay.Mailboxes | None,
        controls: suspensions.Controls | None,
        verp: Verp | None,
        tls: policies.Policies | None,
        rng: random.Random,
        attempt: Attempt,
        start_attempt: Callable[[Job, Group, strategies.Strategy | None], None],
        sign_early: Callable[[Job, Message, bytes], Coroutine[Any, Any, None]],
        spawn: jobs.Spawn,
        start: jobs.Spawn,
        progressed: Callable[[], None],
        lease_until: Callable[[datetime], datetime],
        stopped: asyncio.Event,
        now: Callable[[], datetime],
    ) -> None:
        self.dispatch = dispatch
        self._db = database
        self._holdings = holdings
        self._recorder = recorder
        self._signatures = signatures
        self._egress = pools
        self._mailboxes = mailboxes
        self._controls = controls
        self._verp = verp  # MX mail's envelope sender names its delivery
        self._tls = tls  # the recipient domains' TLS policies (MTA-STS, DANE)
        self._rng = rng
        self._attempt = attempt
        self._start_attempt = start_attempt  # the attempt in a task of its own
        self._sign_early = sign_early
        self._spawn = spawn  # work: cancelled at the end of a drain
        self._start = start  # a queue's loop: ends with the queue or the stop
        self._progressed = progressed
        self._lease_until = lease_until
        self._stopped = stopped
        self._now = now
        self._taking: dict[str, asyncio.Lock] = {}  # source pool -> one lease take at a time

    def queue(self, job: Job, route: routing.Route | None, name: str, account_pool: str | None) -> None:
        """Into its ready queue (or set aside, when suspended); the queue's loop runs
        while it has jobs."""
        group = self.dispatch.push(job, route, name, account_pool)
        if isinstance(group, suspensions.Suspension):
            self._spawn(self._set_aside(job, group, route, name, account_pool))
            return
        if account_pool is None and self._signatures.signer.keys:
            group.unsigned.append(job)
            if len(group.unsigned) > 2 * len(group.ready) + SIGN_AHEAD:  # mostly jobs started out of turn
                group.unsigned = collections.deque(j for j in group.unsigned if not j.started)
            self._sign_ahead(group)
        if not group.dispatching and not self._stopped.is_set():
            group.dispatching = True
            self._start(self._run_relayed(group) if account_pool is not None else self._run(group))

    def _sign_ahead(self, group: Group) -> None:
        """Sign the group's next jobs before their turn, in the order they came (at most
        SIGN_AHEAD of them), so that a job's session is taken for its send and not
        for its signing. Only a cache: the attempt signs what is not ready."""
        while group.unsigned and group.signed_ahead < SIGN_AHEAD and not self._stopped.is_set():
            job = group.unsigned.popleft()
            message = self._holdings.message(job.message)
            if job.started or job.signed_ahead or message is None or message.body is None:
                continue
            job.signed_ahead = True
            group.signed_ahead += 1
            self._spawn(self._sign_early(job, message, message.body))

    def _started(self, group: Group, job: Job) -> None:
        """The job left its ready queue (to be sent, set aside or bounced)."""
        job.started = True
        if job.signed_ahead:
            job.signed_ahead = False
            group.signed_ahead -= 1
            self._sign_ahead(group)

    async def _run(self, group: Group) -> None:
        """Start the MX group's jobs, best first, as its buckets allow."""
        try:
            while group.ready and not self._stopped.is_set():
                out = self.dispatch.next(group)
                if isinstance(out, egress.Wanted):
                    await self._lease_source(out, len(group.ready), group)
                    continue
                if isinstance(out, Wait):
                    group.freed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(out.seconds):
                            await group.freed.wait()
                    continue
                job = out.job
                self._started(group, job)
                if out.suspended is not None:
                    self._spawn(self._set_aside(job, out.suspended, out.route, group.name, None))
                    continue
                self._holdings.working(job.deliveries)
                if out.source is None:  # expired
                    self._start_attempt(job, group, None)
                    continue
                assert out.route is not None
                verp = self._verp.sender(job.deliveries[0].id) if self._verp and len(job.deliveries) == 1 else None
                way = strategies.ToMx(out.route, out.source, self._rng, on_answer=self._on_answer(group), verp=verp,
                                      tls=self._tls)  # fmt: skip
                self._start_attempt(job, group, way)
        finally:
            group.dispatching = False

    def _on_answer(self, group: Group) -> Callable[[strategies.Source, strategies.Feedback | None], None]:
        def answered(source: strategies.Source, feedback: strategies.Feedback | None) -> None:
            if self.dispatch.answered(group, source, feedback):
                assert source.pool is not None
                self._spawn(self._release_source(source.pool, source.address))  # its turn is over here

        return answered

    async def _set_aside(
        self, job: Job, why: suspensions.Suspension, route: routing.Route | None, provider: str,
        account_pool: str | None,
    ) -> None:  # fmt: skip
        """A suspended job back to the spool (Recorder.set_aside). When the suspension
        was lifted meanwhile, the suspensions are read again and the job queued as it
        is now."""
        assert self._controls is not None
        if not await self._recorder.set_aside(job, why, provider):  # resumed meanwhile: look again
            with contextlib.suppress(errors.SpoolError):
                await self._controls.load(self._now())
            self.queue(job, route, provider, account_pool)

    # --- source address leases ------------------------------------------------------------------

    async def _lease_source(self, wanted: egress.Wanted, want: int, group: Group | None) -> None:
        """Take the lease `wanted` (one take per pool at a time on this node); when the
        database cannot be reached, wait a poll interval (or until the group is freed)."""
        lock = self._taking.setdefault(wanted.pool, asyncio.Lock())
        async with lock:
            now = self._now()
            try:
                granted = await source_leases.take(self._db, self._egress, self.dispatch.settings.node, wanted, want,
                                                   self._lease_until(now).timestamp())  # fmt: skip
            except errors.SpoolError as exc:
                log.warning("source_lease_failed", pool=wanted.pool, error=str(exc))
                if group is None:
                    raise
                group.freed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.dispatch.settings.poll_interval):
                        await group.freed.wait()
                return
            if granted.address is not None and granted.sends is not None:
                log.info("source_turn", pool=wanted.pool, address=granted.address, sends=granted.sends)
            elif granted.address is None:
                log.info("source_turn_none", pool=wanted.pool, parked=len(granted.parked))

    async def _release_source(self, pool: str, address: str) -> None:
        """Give back this node's lease on an address whose turn it has sent."""
        try:
            parked = await source_leases.release(self._db, self._egress, self.dispatch.settings.node, pool, [address])
        except errors.SpoolError as exc:  # it expires; the next take parks the address then
            log.warning("source_release_failed", pool=pool, address=address, error=str(exc))
            return
        if parked:
            log.info("source_parked", pool=pool, address=address, seconds=self._egress.pools[pool].park)

    async def _source(self, job: Job, provider: str) -> strategies.Source:
        """The source of a job whose send waits for no bucket (relayed mail), its
        address leased first when it is not yet."""
        for _ in range(3):  # a lease lost between the take and the choice: take it again
            out = self.dispatch.source_of(job, provider)
            if not isinstance(out, egress.Wanted):
                return out
            await self._lease_source(out, 1, None)
        pool = self.dispatch.pool_of(job, provider)
        raise errors.SpoolError(f"no lease on a source address of pool {pool} could be kept")

    # --- relay through sending mailboxes ------------------------------------------------------

    async def _run_relayed(self, group: Group) -> None:
        """Start the group's jobs, best first, each on a reservation of its account pool:
        where relayed mail waits (for a mailbox's gap, cap, rate or state).
        Reservations are sought for up to RESERVE_BATCH jobs at once (one round
        trip), by up to RESERVING callers; when one finds no account free, the pool
        waits until one may be."""
        try:
            while group.ready and not self._stopped.is_set():
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
                batch: list[Job] = []
                while group.ready and len(batch) < RESERVE_BATCH:
                    out = self.dispatch.next_relayed(group)
                    job = out.job
                    if out.suspended is not None:  # suspended since it was queued
                        self._spawn(self._set_aside(job, out.suspended, None, group.name, group.account_pool))
                        continue
                    self._holdings.working(job.deliveries)  # in hand: renewed, kept if lost, not released
                    if job.expired(self._now(), self.dispatch.settings.max_age):  # bounced without a reservation
                        self._start_attempt(job, group, None)
                    else:
                        batch.append(job)
                if batch:
                    group.reserving += 1
                    self._spawn(self._reserve(batch, group))
        finally:
            group.dispatching = False

    async def _reserve(self, batch: list[Job], group: Group) -> None:
        """Reservations for a batch of jobs, best first, then their attempts; the jobs
        left without one go back to their queue (and the pool waits when none got one)."""
        assert self._mailboxes is not None
        assert group.account_pool is not None
        try:
            wants = [choosing.Want(len(job.deliveries), job.deliveries[0].id) for job in batch]
            taken = await self._mailboxes.take(group.account_pool, wants, self.dispatch.settings.node)
        except errors.SpoolError as exc:
            log.warning("account_pool_unreadable", account_pool=group.account_pool, error=str(exc))
            taken = relay.Wait(self._now() + timedelta(seconds=self.dispatch.settings.poll_interval), False)
        finally:
            group.reserving -= 1
            group.freed.set()
        reservations = [] if isinstance(taken, relay.Wait) else taken.reservations
        limited = {} if isinstance(taken, relay.Wait) else taken.limited
        if isinstance(taken, relay.Wait):
            group.resume_at = max(group.resume_at or taken.until, taken.until)
        if self._stopped.is_set():
            for unused in reservations:
                await accounts.release(self._db, unused.id)  # never used: the node is stopping
            reservations, limited = [], {}
        given = iter(reservations)
        waiting: list[Job] = []
        over: dict[datetime, list[Job]] = {}  # by when: their campaign is at its limits, no account was taken
        for i, job in enumerate(batch):
            if i in limited:
                over.setdefault(limited[i], []).append(job)
                continue
            reservation = next(given, None)
            if reservation is None:
                waiting.append(job)
                continue
            if reservation.recipients < len(job.deliveries):  # what the account's caps allow now: the rest waits
                rest = job.deliveries[reservation.recipients :]
                job.deliveries = job.deliveries[: reservation.recipients]
                waiting.append(jobs.split(job, rest, self._holdings))
            self._spawn(self._through(job, group, reservation))
        for until, limited_jobs in over.items():  # back to the spool until then
            why = {"reason": "campaign_limit", "until": until.isoformat()}
            waiting += await self._recorder.hand_back(limited_jobs, group.account_pool, until, why)

        due = self._hand_back_due(taken) if isinstance(taken, relay.Wait) and not self._stopped.is_set() else None
        if due is not None:  # a long wait: this node's mail of the pool goes back to the spool
            waiting += [group.ready.pop()[0] for _ in range(len(group.ready))]
            waiting = await self._recorder.hand_back(waiting, group.account_pool, due)
        for job in waiting:
            self._holdings.waiting(job.deliveries)
            self.queue(job, None, group.name, group.account_pool)
        self._progressed()  # a drain waits for what is in hand

    async def _through(self, job: Job, group: Group, reservation: accounts.Reservation) -> None:
        """A relayed job's attempt on its reservation, from a leased address of its pool."""
        assert self._mailboxes is not None
        try:
            source = await self._source(job, group.name)  # relayed mail leaves from its pool's address too
        except errors.SpoolError as exc:  # the database is out of reach: the job waits in its queue
            log.warning("source_not_leased", queue_id=str(job.message), error=str(exc))
            with contextlib.suppress(errors.SpoolError):
                await accounts.release(self._db, reservation.id)  # never used
            self._holdings.waiting(job.deliveries)
            self.queue(job, None, group.name, group.account_pool)
            return
        self.dispatch.taken(source, group.name)
        way = strategies.ThroughMailbox(reservation, source, self._mailboxes, self._db,
                                        on_answer=self._on_answer(group))  # fmt: skip
        await self._attempt(job, group, way)

    def _hand_back_due(self, wait: relay.Wait) -> datetime | None:
        """When the mail of a pool that has no account free is due again if it goes back
        to the spool; None when the wait is short enough to wait out in memory."""
        assert self._mailboxes is not None
        after = timedelta(seconds=self._mailboxes.settings.hand_back_after)
        now = self._now()
        if wait.free_at is None:  # only an operator can free an account: look again after a while
            return now + after
        return wait.free_at if wait.free_at - now >= after else None


def _kind(choice: egress.Choice) -> str:
    """How a source was chosen, for mtad_egress_choices."""
    return "fallback" if choice.fallback else "spill" if choice.why else "ordinary"
