"""Campaigns: a tenant's named sends, their progress, paused, resumed, cancelled.

A message names its campaign (X-Mtad-Campaign, or "campaign" over HTTP); the
accept makes one named for the first time (spool/accept.sql), in the batch's own
statement. Progress is counted as deliveries move, never by scanning the spool:
triggers on deliveries and events add each statement's net moves to
campaign_moves in that statement's transaction (exact through a crash), rows only
inserted so that nodes never wait on a shared counter; retention folds them into
campaign_counts and campaign_minutes, and a read sums both.

Optional limits (sends begun per hour and per day, UTC) are counted as each send
begins, under the campaign's row lock (leases/begin.sql): what would go over is
set aside until the next hour or day.

A pause holds the campaign's waiting deliveries (due at infinity) and a node's
begin holds back any it has leased (leases/begin.sql); a resume makes them due;
a cancel cancels what has not gone out, taking back the leases of what has not
begun.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from mtad import db
from mtad.base import errors

log = structlog.get_logger("mtad.campaigns")

# Also the CHECK of campaigns.name (migrations/0034_campaigns.sql): a name refused
# here never reaches the accept's batch, where it would fail the other messages too.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}")
NAME_RULE = "1-64 characters of letters, digits, '.', '_', ':', '+' and '-', starting with a letter or digit"
RATE_WINDOW = timedelta(minutes=10)  # the recent rate is what settled in this window
FOLD_BATCH = 10_000

# The buckets a delivery counts in (sql/functions/mtad_campaign_bucket.sql); bounced
# and cancelled ones by their reason ("bounced:recipient_rejected").
WAITING = ("queued", "deferred", "held", "unknown")
CAME_BACK = ("complained", "unsubscribed", "replied", "opened", "clicked")  # opened, clicked: by people
BY_MACHINES = ("opened", "clicked")  # counted apart as "opened:machine" (Apple's proxy, scanners)


class State(enum.StrEnum):
    """Mirrors the Postgres enum campaign_state."""

    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"


def valid(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def check_name(name: str) -> str:
    if not valid(name):
        raise errors.MtadError(f"invalid campaign name {name!r}: {NAME_RULE}")
    return name


@dataclass(frozen=True, slots=True)
class Campaign:
    id: int
    tenant: str
    name: str
    state: State
    reason: str | None
    created_at: datetime
    changed_at: datetime
    counts: Mapping[str, int]  # bucket -> deliveries (or messages, or events of what came back)
    settled_recently: int  # deliveries delivered, bounced or failed within RATE_WINDOW
    max_per_hour: int | None = None  # sends begun per hour (UTC); None: no limit
    max_per_day: int | None = None
    pool_paused: str | None = None  # paused by itself: this account pool has no account able to send

    def progress(self, now: datetime) -> dict[str, Any]:
        """The counts as an operator reads them, the recent rate and when it should end."""
        counts = self.counts
        by_reason = {"bounced": {}, "cancelled": {}}  # type: dict[str, dict[str, int]]
        for bucket, n in counts.items():
            state, _, reason = bucket.partition(":")
            if state in by_reason:
                by_reason[state][reason] = n
        waiting = sum(counts.get(bucket, 0) for bucket in WAITING)
        settled = counts.get("delivered", 0) + sum(by_reason["bounced"].values()) + counts.get("failed", 0)
        deliveries = waiting + settled + sum(by_reason["cancelled"].values()) + counts.get("suppressed", 0)
        per_minute = self.settled_recently / (RATE_WINDOW.total_seconds() / 60)
        ends = None  # done, not sending now, or not sending at all
        if waiting and per_minute > 0 and self.state is State.ACTIVE and self.pool_paused is None:
            ends = now + timedelta(minutes=waiting / per_minute)
        return {
            "messages": counts.get("messages", 0),
            "deliveries": deliveries,
            **{state: counts.get(state, 0) for state in WAITING},
            "delivered": counts.get("delivered", 0),
            "bounced": sum(by_reason["bounced"].values()),
            "bounced_by_reason": by_reason["bounced"],
            "failed": counts.get("failed", 0),
            "cancelled": sum(by_reason["cancelled"].values()),
            "suppressed": counts.get("suppressed", 0),
            **{kind: counts.get(kind, 0) for kind in CAME_BACK},
            **{f"{kind}_by_machines": counts.get(f"{kind}:machine", 0) for kind in BY_MACHINES},
            "done": waiting == 0,
            "per_minute": round(per_minute, 1),
            "ends_at": ends,
        }

    def view(self, now: datetime) -> dict[str, Any]:
        """As the tools and the API show it."""
        state, reason = self.state.value, self.reason
        if self.pool_paused is not None and self.state is State.ACTIVE:
            state, reason = "paused", f"by itself: no account of pool {self.pool_paused} can send"
        return {"tenant": self.tenant, "name": self.name, "state": state, "reason": reason,
                "paused_by": "auto" if self.pool_paused else "operator" if state != "active" else None,
                "account_pool": self.pool_paused,
                "created_at": self.created_at, "changed_at": self.changed_at, "max_per_hour": self.max_per_hour,
                "max_per_day": self.max_per_day, **self.progress(now)}  # fmt: skip


def _campaign(row: Mapping[str, Any]) -> Campaign:
    return Campaign(row["id"], row["tenant"], row["name"], State(row["state"]), row["reason"], row["created_at"],
                    row["changed_at"], dict(zip(row["buckets"], row["ns"], strict=True)),
                    int(row["settled_since"]), row["max_per_hour"], row["max_per_day"], row["pool_paused"])  # fmt: skip


async def listing(database: db.Database, now: datetime, tenant: str | None = None) -> list[Campaign]:
    """The campaigns of `tenant` (None: every tenant's), with their progress."""
    return [_campaign(row) for row in await database.fetch("campaigns/list", tenant, None, now - RATE_WINDOW)]


async def get(database: db.Database, tenant: str, name: str, now: datetime) -> Campaign:
    """Campaign `name` of `tenant`; NotFound when there is none."""
    check_name(name)
    rows = await database.fetch("campaigns/list", tenant, name, now - RATE_WINDOW)
    if not rows:
        raise errors.NotFound(f"tenant {tenant} has no campaign {name!r} (mtad campaigns ls)")
    return _campaign(rows[0])


async def add(database: db.Database, tenant: str, name: str, now: datetime, limits: Limits | None = None) -> None:
    """Make campaign `name` of `tenant`, active; Conflict when it exists."""
    check_name(name)
    limits = limits or Limits()
    if await database.fetchrow("campaigns/add", tenant, name, now, limits.per_hour, limits.per_day) is None:
        raise errors.Conflict(f"tenant {tenant} has a campaign {name!r} already")
    log.info("campaign_added", tenant=tenant, campaign=name, max_per_hour=limits.per_hour,
             max_per_day=limits.per_day)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Limits:
    """A campaign's sends begun per hour and per day (UTC), counted across the nodes
    as each send begins (leases/begin.sql); None: no limit."""

    per_hour: int | None = None
    per_day: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("max_per_hour", self.per_hour), ("max_per_day", self.per_day)):
            if value is not None and not 0 < value <= 2**31 - 1:
                raise errors.MtadError(f"{name}: a whole number above 0, or none")


async def limit(database: db.Database, tenant: str, name: str, limits: Limits, now: datetime) -> None:
    """Set a campaign's limits: what would go over waits for the next hour or day."""
    check_name(name)
    if await database.fetchval("campaigns/limit", tenant, name, now, limits.per_hour, limits.per_day) is None:
        raise errors.NotFound(f"tenant {tenant} has no campaign {name!r} (mtad campaigns ls)")
    log.info("campaign_limited", tenant=tenant, campaign=name, max_per_hour=limits.per_hour,
             max_per_day=limits.per_day)  # fmt: skip


async def pause(database: db.Database, tenant: str, name: str, reason: str, now: datetime) -> int:
    """Pause an active campaign: its waiting deliveries are held, and any a node
    leased is held back before its attempt. Returns how many were held now."""
    check_name(name)
    held = await database.fetchval("campaigns/pause", tenant, name, now, reason)
    if held is None:
        found = await get(database, tenant, name, now)
        raise errors.Conflict(f"campaign {name} is {found.state.value}, not active")
    log.info("campaign_paused", tenant=tenant, campaign=name, reason=reason, held=held)
    return int(held)


async def resume(database: db.Database, tenant: str, name: str, now: datetime) -> int:
    """Resume a paused campaign: its held deliveries are due now. Returns how many."""
    check_name(name)
    async with database.transaction() as tx:
        campaign = await tx.fetchval("campaigns/resume", tenant, name, now)
        if campaign is not None:
            released = int(await tx.fetchval("campaigns/unhold", campaign, now))
    if campaign is None:
        found = await get(database, tenant, name, now)
        raise errors.Conflict(f"campaign {name} is {found.state.value}, not paused")
    log.info("campaign_resumed", tenant=tenant, campaign=name, released=released)
    return released


async def cancel(database: db.Database, tenant: str, name: str, reason: str, now: datetime) -> tuple[int, bool]:
    """Cancel a campaign: what it has not sent is cancelled, leases not begun taken
    back from their nodes first. Returns how many deliveries were cancelled, and
    whether it was cancelled already (run again, it cancels what came meanwhile)."""
    check_name(name)
    async with database.transaction() as tx:
        row = await tx.fetchrow("campaigns/cancel", tenant, name, now, reason)
        if row is None:
            raise errors.NotFound(f"tenant {tenant} has no campaign {name!r} (mtad campaigns ls)")
        # Two statements: the second sees what a begin racing the first made queued.
        await tx.execute("campaigns/take", row["id"], now)
        cancelled = int(await tx.fetchval("campaigns/cancel_rest", row["id"], now))
    log.info("campaign_cancelled", tenant=tenant, campaign=name, reason=reason, cancelled=cancelled)
    return cancelled, bool(row["already"])


async def pool_paused(database: db.Database, pool: str, paused: bool, now: datetime) -> list[str]:
    """Account pool `pool` has no account able to send (`paused`), or can send again:
    the active campaigns with mail still to go through it pause themselves, or
    those it paused resume, each with an event. Returns their names."""
    names = list(await database.fetchval("campaigns/pool_paused", pool, now, paused))
    if names:
        log.warning("campaigns_paused" if paused else "campaigns_resumed", account_pool=pool, campaigns=names)
    return names


async def fold(conn: db.Connection | db.Database, before: datetime, batch: int = FOLD_BATCH) -> int:
    """Fold up to `batch` moves into the counts and minutes (a read sees each once
    either way); forget the minutes and the sends counted for the limits before
    `before` (retention's). Returns how many moves were folded."""
    return int(await conn.fetchval("campaigns/fold", batch, before))
