"""Delivery: the engine, one node's pipeline of four stages, wired here.

    intake --> dispatch --> attempt --> record

intake leases deliveries (or takes them from the accept path), reads their
messages, groups them into jobs and routes them; dispatch queues each job and
lets it go when it has permission (a bucket's token and session from a leased
source address, or a mailbox's reservation); attempt sends it and classifies
the replies; record writes the outcomes. The stages call no stage back: what
goes back up (a reroute, the receiver's answer to the bucket, room to lease
again) is a value returned or a callback handed in here. Every task belongs to
the one TaskGroup of `run` (or `run_until_idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from mtad import db
from mtad.base import errors
from mtad.deliver import attempt, dispatch, egress, intake, record, shaping, strategies, warmup
from mtad.deliver.holdings import Holdings
from mtad.deliver.jobs import DeliveryStats, Group, Job
from mtad.deliver.settings import Settings
from mtad.deliver.signatures import Signatures
from mtad.feedback.tracking import Tracking
from mtad.feedback.unsubscribe import Unsubscribing
from mtad.feedback.verp import Verp
from mtad.mailboxes import relay
from mtad.outbound import outcomes, policies, routing, sessions
from mtad.signing import dkim
from mtad.spool import commit, suspensions
from mtad.spool.leases import Leased

__all__ = ["Delivery", "DeliveryStats", "Settings"]

log = structlog.get_logger("mtad.delivery")


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
        tracking: Tracking | None = None,
        on_probation: Callable[[str], bool] = lambda tenant: False,
        controls: suspensions.Controls | None = None,
        tls: policies.Policies | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.node = settings.node
        self._db = database
        self._pool = pool
        self._mailboxes = mailboxes
        self._controls = controls
        self._now = now
        self._shaper = shaper or shaping.Shaper()
        self._egress = pools or egress.Egress({})
        self._holdings = Holdings(settings.body_cache)  # what this node holds; changed only through it
        self._stats = DeliveryStats()
        self._tasks: asyncio.TaskGroup | None = None
        self._work: set[asyncio.Task[None]] = set()  # routing and attempts, cancelled at the end of a drain
        self._idle = asyncio.Event()  # nothing held any more
        self._progress = asyncio.Event()  # an attempt ended
        self._stop = asyncio.Event()
        self._early: list[Leased] = []  # handed over by the accept path before run() started
        rng = rng or random.Random()
        signatures = Signatures(signer or dkim.Signer(), database)
        self._record = record.Recorder(settings, database, self._holdings, self._stats, now=now, rng=rng,
                                       on_idle=self._idle.set, on_room=self._room, spawn=self._spawn)  # fmt: skip
        self._dispatch = dispatch.Dispatch(settings, self._holdings, self._shaper, self._egress, controls=controls,
                                           on_probation=on_probation, default_source=pool.settings.source_address or "",
                                           now=now)  # fmt: skip
        self._intake = intake.Intake(
            settings, database, self._holdings, self._stats, self._record, router=router, shaper=self._shaper,
            pools=self._egress, mailboxes=mailboxes, verp=verp, unsubscribing=unsubscribing, tracking=tracking,
            queue=self._queue,
            spawn=self._spawn, limits_changed=self._dispatch.free, stopped=self._stop, now=now,
        )  # fmt: skip
        self._attempts = attempt.Attempts(
            settings, database, pool, rules, self._holdings, self._stats, self._record, signatures,
            mailboxes=mailboxes, verp=verp, unsubscribing=unsubscribing, tracking=tracking, read=self._intake.message,
            controls_stale=self._controls_again, spawn=self._spawn, stopped=self._stop, now=now,
        )  # fmt: skip
        self._dispatcher = dispatch.Dispatcher(
            self._dispatch, database, self._holdings, self._record, signatures, pools=self._egress,
            mailboxes=mailboxes, controls=controls, verp=verp, tls=tls, rng=rng, attempt=self._attempt,
            start_attempt=self._start_attempt, sign_early=self._attempts.sign_early, spawn=self._spawn,
            start=self._start, progressed=self._progress.set, lease_until=self.lease_until, stopped=self._stop,
            now=now,
        )  # fmt: skip

    def statistics(self) -> DeliveryStats:
        self._stats.held = len(self._holdings)
        self._stats.body_bytes = self._holdings.body_bytes
        return self._stats

    # --- commit.FastPath ------------------------------------------------------------------

    def lease_until(self, now: datetime) -> datetime:
        return self._intake.lease_until(now)

    def has_room(self) -> bool:
        """Whether to take newly accepted deliveries (else they are queued for anyone)."""
        return not self._stop.is_set() and len(self._holdings) < self.settings.max_held

    def accepted(self, deliveries: list[commit.NewDelivery]) -> None:
        """Deliveries the accept path just leased to this node: straight to routing."""
        if self._stop.is_set():
            return  # their leases expire and the reaper requeues them
        held = self._intake.accepted(deliveries)
        if self._tasks is None:
            self._holdings.hold(held)  # accepted while run() is starting: held now, routed once it runs
            self._early.extend(held)
        else:
            self._intake.admit(held)

    # --- running -------------------------------------------------------------------------

    async def run(self) -> None:
        """Lease, route and send until stop(); then finish what is in flight (bounded
        by shutdown_timeout) and hand back the leases of what was not started."""
        await self._intake.listening.keep()
        try:
            await warmup.load(self._db, self._egress.days)  # warm-up days go on where they were
            await self._intake.checkpoint()  # and the buckets start where the cluster's are
        except errors.SpoolError as exc:
            log.warning("checkpoint_failed", error=str(exc))  # the configured start rates; warm-up day 1
        try:
            async with asyncio.TaskGroup() as tasks:
                self._begin(tasks)
                loops = [
                    tasks.create_task(self._intake.run(), name="lease"),
                    tasks.create_task(self._every(self.settings.lease_duration / 3, self._intake.renew), name="renew"),
                    tasks.create_task(self._every(self.settings.lease_duration / 2, self._intake.reap), name="reap"),
                    tasks.create_task(self._every(self._pool.settings.idle_timeout / 2, self._pool.close_idle)),
                    tasks.create_task(self._every(self.settings.checkpoint_interval, self._intake.checkpoint)),
                ]
                await self._stop.wait()
                for task in loops:
                    task.cancel()
                await self._drain()
        finally:
            self._tasks = None
            await self._intake.listening.close()
            await self._pool.close()

    def stop(self) -> None:
        """Stop leasing and starting attempts; run() then drains and returns."""
        self._stop.set()
        self._dispatch.free()

    async def run_until_idle(self) -> None:
        """Lease everything due now, deliver it, record it, and return (tests, tools)."""
        async with asyncio.TaskGroup() as tasks:
            self._begin(tasks)
            while await self._intake.lease_once():
                pass
            await self.wait_idle()
        self._tasks = None

    async def wait_idle(self) -> None:
        """Until this node holds no delivery (every attempt recorded); for tests and tools."""
        while self._holdings:
            self._idle.clear()
            await self._idle.wait()

    def _begin(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks
        if self._early:  # handed over by the accept path before this ran
            self._intake.admit(self._early)
            self._early = []

    async def _drain(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.shutdown_timeout):
                while self._holdings.worked_on:
                    self._progress.clear()
                    await self._progress.wait()
        for task in self._work:  # still on the wire after the timeout: their leases expire
            task.cancel()
        await self._intake.leave(self._holdings.worked_on)

    # --- the seams between the stages ----------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Work (routing, a write, a reservation): cancelled when a drain times out."""
        self._track(_kept(coro))

    def _start_attempt(self, job: Job, group: Group, way: strategies.Strategy | None) -> None:
        self._track(self._attempt(job, group, way))  # Attempts.run ends alone when the database goes

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._tasks is not None
        task = self._tasks.create_task(coro)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        """A ready queue's loop: ends with its queue or the stop."""
        assert self._tasks is not None
        self._tasks.create_task(coro)

    def _queue(self, job: Job, route: routing.Route | None, name: str, account_pool: str | None) -> None:
        self._dispatcher.queue(job, route, name, account_pool)

    async def _attempt(self, job: Job, group: Group, way: strategies.Strategy | None) -> None:
        """The job's attempt; what it hands back goes to its queue again."""
        try:
            again = await self._attempts.run(job, group, way)
            if again is not None:
                self._dispatcher.queue(again, None, group.name, group.account_pool)
        finally:
            self._progress.set()

    def _room(self) -> None:
        self._intake.wake.set()  # room to lease again

    async def _every(self, interval: float, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except errors.SpoolError as exc:
                log.warning("periodic_task_failed", task=getattr(action, "__name__", "?"), error=str(exc))

    # --- the operator and the configuration ---------------------------------------------------

    def reconfigure(self, settings: Settings, rules: outcomes.Rules, pools: Mapping[str, egress.PoolSettings],
                    relaying: relay.Settings | None = None) -> None:  # fmt: skip
        """A reload: new settings, reply rules, source pools and account pool defaults.
        What the node holds, its sessions, its leases and the buckets' learnt rates stay
        (the router, shared with submission, is reconfigured by the caller). Raises
        ConfigError, changing nothing, for pools the Egress refuses."""
        self._egress.reconfigure(pools)
        self.settings = dataclasses.replace(settings, node=self.settings.node)
        for stage in (self._intake, self._dispatch, self._attempts, self._record):
            stage.settings = self.settings
        self._attempts.rules = rules
        if self._mailboxes is not None and relaying is not None:
            self._mailboxes.settings = relaying

    def controls_changed(self) -> None:
        """The operator's controls were read again (a suspension, reroute, pause or
        account changed): every queue looks at its jobs again now (a suspended one is
        set aside as it comes up, an account pool waiting for an account asks again),
        and the lease loop takes what a resume made due. Sync, no I/O."""
        self._dispatch.free(resume=True)
        self._intake.wake.set()

    async def _controls_again(self) -> None:
        """Read the controls now (begin.sql found this node's view behind), then lease
        what it queued again to leave another way."""
        if self._controls is not None:
            try:
                await self._controls.load(self._now())
            except errors.SpoolError as exc:
                log.warning("controls_unread", error=str(exc))
        self.controls_changed()


async def _kept(coro: Coroutine[Any, Any, None]) -> None:
    """A piece of work the database went away under ends alone, never the engine:
    what it held comes back when its leases run out."""
    try:
        await coro
    except errors.SpoolError as exc:
        log.warning("work_interrupted", work=getattr(coro, "__qualname__", "?"), error=str(exc))
