"""What a tenant may submit now: nothing while it is paused, and no more than its
quotas ([tenants] max_per_hour, max_per_day, max_queued_bytes).

The rate quotas count messages per clock hour and per UTC day in PostgreSQL
(`tenant_usage`, sql/functions/mtad_quota_take.sql), taken before the accept's
COMMIT and given back when the message is not accepted after all, so every node
and submission process draws on the same count. The spool quota compares the
octets of the tenant's messages not yet final, read every `refresh` seconds, plus
what this process accepted since, with the new message's. A refusal is
remembered until its quota could have room again, so that MAIL is refused at
once without a round trip.

An operator's pause holds for messages already past the check too: `settle()`
waits until every message checked before it is committed or given up, so that
none of a tenant paused meanwhile is answered 250 after the node said it holds
the pause (mtad.spool.controls).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.base.replies import Reply
from mtad.spool import settings, tenants

log = structlog.get_logger("mtad.quotas")

SETTLE_WITHIN = 1.5  # seconds an operator's pause waits for the messages checked before it


# Declared in settings.py: the configuration builds it without loading this module.
Quota = settings.Quota
NONE = settings.NO_QUOTA


@dataclass(frozen=True, slots=True)
class Taken:
    """A message counted against its tenant's rate quotas at `at` (give_back undoes it)."""

    tenant: str
    at: datetime | None  # None: nothing was counted (no rate quota)
    size: int
    turn: int = 0  # the gate's turn when it was checked: settle() waits for it, until done()


def paused_reply(tenant: str, why: tenants.Paused) -> Reply:
    return Reply(451, "4.7.1", f"Tenant {tenant} is paused ({why.by}): {why.reason}; try again later")


class Gate:
    """The submission's check of a tenant's state and quotas (one per process)."""

    def __init__(
        self,
        database: db.Database,
        states: tenants.States,
        quotas: Mapping[str, Quota],
        default: Quota = NONE,
        *,
        refresh: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = database
        self._states = states
        self._quotas = dict(quotas)
        self._default = default
        self._refresh = refresh
        self._clock = clock
        self._full: dict[str, tuple[float, Reply]] = {}  # tenant -> (until, its refusal)
        self._queued: dict[str, int] = {}  # tenant -> octets held in the spool (max_queued_bytes only)
        self._turn = 0  # bumped by each settle(): what was checked in an earlier turn is waited for
        self._open: collections.Counter[int] = collections.Counter()  # turn -> messages checked, not done
        self._closed = asyncio.Event()  # a turn's last message is done

    def reconfigure(self, quotas: Mapping[str, Quota], default: Quota) -> None:
        """New quotas (a reload); what was counted stays, refusals remembered are forgotten."""
        self._quotas, self._default = dict(quotas), default
        self._full.clear()

    def refusal(self, tenant: str) -> Reply | None:
        """Why `tenant` may not submit now, as far as this process knows (MAIL FROM)."""
        why = self._states.paused(tenant)
        if why is not None:
            return paused_reply(tenant, why)
        full = self._full.get(tenant)
        if full is not None:
            if full[0] > self._clock():
                return full[1]
            del self._full[tenant]
        quota = self._quotas.get(tenant, self._default)
        if quota.max_queued_bytes is not None and self._queued.get(tenant, 0) >= quota.max_queued_bytes:
            return self._spool_full(tenant, quota.max_queued_bytes)
        return None

    async def take(self, tenant: str, size: int) -> Taken | Reply:
        """Count a message of `size` octets about to be committed, or refuse it; call
        done() once it is committed or given up. DatabaseUnavailable (a SpoolError)
        when the count cannot be taken."""
        refused = self.refusal(tenant)
        if refused is not None:
            return refused
        turn = self._turn
        self._open[turn] += 1
        try:
            taken = await self._count(tenant, size, turn)
        except BaseException:
            self._close(turn)
            raise
        if isinstance(taken, Reply):
            self._close(turn)
        return taken

    def done(self, taken: Taken) -> None:
        """The message taken is committed, or will not be: settle() waits for it no more."""
        self._close(taken.turn)

    def _close(self, turn: int) -> None:
        self._open[turn] -= 1
        if self._open[turn] <= 0:
            del self._open[turn]
            self._closed.set()

    async def settle(self, within: float) -> None:
        """Until every message checked before now is committed or given up (after a
        refresh() that read a pause, none of that tenant is answered 250 from then on).
        SpoolError when some are still being committed after `within` seconds."""
        turn = self._turn
        self._turn += 1
        try:
            async with asyncio.timeout(within):
                while any(t <= turn for t in self._open):
                    self._closed.clear()
                    await self._closed.wait()
        except TimeoutError:
            waiting = sum(n for t, n in self._open.items() if t <= turn)
            raise errors.SpoolError(f"{waiting} messages checked before the change are still being committed "
                                    f"after {within:g} s") from None  # fmt: skip

    async def _count(self, tenant: str, size: int, turn: int) -> Taken | Reply:
        quota = self._quotas.get(tenant, self._default)
        if quota.max_queued_bytes is not None and self._queued.get(tenant, 0) + size > quota.max_queued_bytes:
            return self._spool_full(tenant, quota.max_queued_bytes)
        if not quota.counts_messages:
            return Taken(tenant, None, size, turn)
        now = datetime.fromtimestamp(self._clock(), UTC)
        full = await self._db.fetchval("tenants/quota_take", tenant, now, quota.max_per_hour, quota.max_per_day)
        if full is None:
            return Taken(tenant, now, size, turn)
        if full == "hour":
            until = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            reply = Reply(451, "4.7.1", f"Tenant {tenant} is over its quota of {quota.max_per_hour} messages "
                                        "per hour (max_per_hour); try again later")  # fmt: skip
        else:
            until = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
            reply = Reply(451, "4.7.1", f"Tenant {tenant} is over its quota of {quota.max_per_day} messages "
                                        "per day (max_per_day); try again later")  # fmt: skip
        metrics.QUOTA_REFUSALS.labels(tenant=tenant, quota=full).inc()
        self._full[tenant] = (until.timestamp(), reply)
        return reply

    def accepted(self, taken: Taken) -> None:
        """The message was committed: its octets count against the spool quota."""
        self._queued[taken.tenant] = self._queued.get(taken.tenant, 0) + taken.size

    async def give_back(self, taken: Taken) -> None:
        """The message was not accepted after all (refused, failed, a duplicate)."""
        if taken.at is None:
            return
        try:
            await self._db.execute("tenants/quota_give_back", taken.tenant, taken.at)
        except errors.SpoolError as exc:  # counted once too many, at worst
            log.warning("quota_not_given_back", tenant=taken.tenant, error=str(exc))

    def _spool_full(self, tenant: str, limit: int) -> Reply:
        metrics.QUOTA_REFUSALS.labels(tenant=tenant, quota="queued_bytes").inc()
        return Reply(452, "4.3.1", f"Tenant {tenant} holds its quota of {limit} octets in the queue "
                                   "(max_queued_bytes); try again later")  # fmt: skip

    async def load(self) -> None:
        """Read the octets the tenants with a spool quota hold."""
        watched: list[str] | None = sorted(t for t, q in self._quotas.items() if q.max_queued_bytes is not None)
        if self._default.max_queued_bytes is not None:
            watched = None  # every tenant
        elif not watched:
            return
        rows = await self._db.fetch("tenants/queued_bytes", watched)
        self._queued = {r["tenant"]: int(r["bytes"]) for r in rows}

    async def refresh(self) -> None:
        """Read the tenants' states and queued octets now; SpoolError when it cannot."""
        await self._states.load()
        await self.load()

    async def run(self) -> None:
        """refresh() every `refresh` seconds until cancelled; a failed read keeps the
        last figures."""
        while True:
            try:
                await self.refresh()
            except errors.SpoolError as exc:
                log.warning("tenant_states_unread", error=str(exc))
            await asyncio.sleep(self._refresh)
