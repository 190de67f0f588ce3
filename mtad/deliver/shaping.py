"""Shaping: an AIMD token bucket per (provider group, source address).

Before every attempt the delivery path asks `Shaper.take(group, source, limits)` and
gets a `Decision` at once (sync, no I/O, never sleeps): go, or wait `retry_after`
seconds for a token, or (`retry_after` None) wait until one of the bucket's sessions
ends. Every attempt that went ends with `Shaper.done(...)`, which gives the session
back and feeds the receiver's answer into the bucket:

- a throttling reply multiplies the rate by the provider's `factor` (not below
  `min_rate`) and drops one session from the cap (not below `min_sessions`); the
  tokens left are spent, so the burst stops too. A decrease is taken at most once
  per hold time (a second, or two tokens at the new rate if longer), so the replies
  of the sessions that were already in flight do not halve the rate once each;
- `increase_after` deliveries in a row add `step` to the rate (not above
  `max_rate`) and give a session back (not above `sessions`).

Only a receiver's replies count. mtad's own failures (the database, an unreadable
body) and transport failures (refused, timed out) never do: the caller passes
`throttled` only for replies classed as throttled.

A bucket's rate and session cap are the cluster's: each node uses its share (rate /
live nodes, sessions / live nodes but at least one, burst likewise), re-divided when
`set_nodes` reports another count, so ten nodes are together as polite as one.
Rates and caps are checkpointed to PostgreSQL by `sync`: a node writes what its
feedback changed and adopts any later change another node wrote, so a decrease on
one node reaches the others within a sync interval, and a restart starts where the
cluster was rather than at the configured start rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mtad import db
from mtad.base import metrics
from mtad.outbound.limits import Limits

NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Decision:
    go: bool
    retry_after: float | None = None  # seconds until a token; None: until a session ends


GO = Decision(True)
FULL = Decision(False)


class Bucket:
    """The rate and session cap of one (group, source), and this node's tokens.
    Sync, no I/O; `now` is a monotonic time in seconds, passed in."""

    __slots__ = (
        "changed",
        "changed_at",
        "decreases",
        "group",
        "hold_until",
        "in_flight",
        "increases",
        "limits",
        "rate",
        "refilled",
        "sessions",
        "share",
        "source",
        "streak",
        "tokens",
    )  # fmt: skip

    def __init__(self, group: str, source: str, limits: Limits, now: float, share: float = 1.0) -> None:
        self.group = group
        self.source = source
        self.limits = limits
        self.rate = limits.rate  # messages per second, all nodes together
        self.sessions = limits.sessions  # the session cap, all nodes together
        self.share = share
        self.tokens = self.capacity
        self.refilled = now
        self.in_flight = 0
        self.streak = 0  # deliveries in a row since the last change
        self.hold_until = -math.inf  # no decrease before this
        self.decreases = 0
        self.increases = 0
        self.changed_at = NEVER  # wall time of the last change (ours, or adopted)
        self.changed = False  # changed here since the last sync

    @property
    def local_rate(self) -> float:
        return self.rate * self.share

    @property
    def local_sessions(self) -> int:
        return max(1, math.floor(self.sessions * self.share))

    @property
    def capacity(self) -> float:
        return max(1.0, self.limits.burst * self.share)

    def take(self, now: float) -> Decision:
        """Permission for one attempt: a session and a token, or how long to wait."""
        if self.in_flight >= self.local_sessions:
            return FULL
        if not self.limits.unlimited:
            self._refill(now)
            if self.tokens < 1.0:
                return Decision(False, (1.0 - self.tokens) / self.local_rate)
            self.tokens -= 1.0
        self.in_flight += 1
        return GO

    def end(self, now: float, wall: datetime, *, delivered: int, throttled: bool) -> None:
        """An attempt that took permission ended; feedback from the receiver's replies."""
        self.in_flight = max(0, self.in_flight - 1)
        if throttled:
            self._decrease(now, wall)
        elif delivered:
            self.streak += delivered
            if self.streak >= self.limits.increase_after:
                self._increase(wall)

    def adopt(self, rate: float, sessions: int, changed_at: datetime, now: float) -> None:
        """Another node's later change (or the checkpoint at start), kept within our limits."""
        self._refill(now)
        self.rate = min(max(rate, self.limits.min_rate), self.limits.max_rate)
        self.sessions = min(max(sessions, self.limits.min_sessions), self.limits.sessions)
        self.tokens = min(self.tokens, self.capacity)
        self.changed_at = changed_at
        self.changed = False
        self.streak = 0

    def reshare(self, share: float, now: float) -> None:
        self._refill(now)
        self.share = share
        self.tokens = min(self.tokens, self.capacity)

    def _refill(self, now: float) -> None:
        if now > self.refilled:
            if not self.limits.unlimited:
                self.tokens = min(self.capacity, self.tokens + (now - self.refilled) * self.local_rate)
            self.refilled = now

    def _decrease(self, now: float, wall: datetime) -> None:
        self.streak = 0
        if now < self.hold_until:
            return
        self._refill(now)
        self.rate = max(self.limits.min_rate, self.rate * self.limits.factor)
        self.sessions = max(self.limits.min_sessions, self.sessions - 1)
        self.tokens = 0.0
        self.hold_until = now + (1.0 if self.limits.unlimited else max(1.0, 2.0 / self.local_rate))
        self.decreases += 1
        self._changed(wall)
        metrics.BUCKET_DECREASES.labels(group=self.group, source=self.source).inc()

    def _increase(self, wall: datetime) -> None:
        self.streak = 0
        rate = min(self.limits.max_rate, self.rate + self.limits.step)
        sessions = min(self.limits.sessions, self.sessions + 1)
        if (rate, sessions) == (self.rate, self.sessions):
            return  # at the ceiling already
        self.rate, self.sessions = rate, sessions
        self.increases += 1
        self._changed(wall)
        metrics.BUCKET_INCREASES.labels(group=self.group, source=self.source).inc()

    def _changed(self, wall: datetime) -> None:
        self.changed_at = max(wall, self.changed_at)
        self.changed = True


@dataclass(frozen=True, slots=True)
class BucketStats:
    group: str
    source: str
    rate: float  # all nodes together
    sessions: int  # the cap, all nodes together
    local_rate: float  # this node's share
    local_sessions: int
    tokens: float
    in_flight: int
    decreases: int
    increases: int
    changed_at: datetime


class Shaper:
    """Every bucket of this node, created on first use (from the checkpoint when it
    has the bucket). Sync, no I/O; `sync` below does the PostgreSQL side."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self._stored: dict[tuple[str, str], tuple[float, int, datetime]] = {}  # checkpoint rows not yet used
        self._nodes = 1

    def take(self, group: str, source: str, limits: Limits) -> Decision:
        bucket = self._buckets.get((group, source))
        if bucket is None:
            bucket = self._bucket(group, source, limits)
        return bucket.take(self._clock())

    def done(self, group: str, source: str, *, delivered: int = 0, throttled: bool = False) -> None:
        """An attempt that `take` let go ended: `delivered` recipients were accepted,
        and `throttled` says whether the receiver asked us to slow down."""
        bucket = self._buckets.get((group, source))
        if bucket is not None:
            bucket.end(self._clock(), self._wall(), delivered=delivered, throttled=throttled)

    def set_nodes(self, count: int) -> None:
        """How many nodes are live (this one included): each takes 1/count of every bucket."""
        count = max(1, count)
        if count != self._nodes:
            self._nodes = count
            now = self._clock()
            for bucket in self._buckets.values():
                bucket.reshare(1 / count, now)

    @property
    def nodes(self) -> int:
        return self._nodes

    def statistics(self) -> list[BucketStats]:
        now = self._clock()
        stats = []
        for b in self._buckets.values():
            b._refill(now)
            stats.append(
                BucketStats(
                    b.group,
                    b.source,
                    b.rate,
                    b.sessions,
                    b.local_rate,
                    b.local_sessions,
                    b.tokens,
                    b.in_flight,
                    b.decreases,
                    b.increases,
                    b.changed_at,
                )
            )
        return stats

    def _bucket(self, group: str, source: str, limits: Limits) -> Bucket:
        now = self._clock()
        bucket = self._buckets[(group, source)] = Bucket(group, source, limits, now, 1 / self._nodes)
        stored = self._stored.pop((group, source), None)
        if stored is not None:
            bucket.adopt(*stored, now)
        return bucket

    # --- the checkpoint --------------------------------------------------------------------

    def _merge(self, rows: list[Any]) -> None:
        now = self._clock()
        for row in rows:
            if row["changed_at"] is None:
                continue  # nobody learned anything: the configured start
            key = (row["route_group"], row["source"])
            bucket = self._buckets.get(key)
            if bucket is None:
                self._stored[key] = (row["rate"], row["sessions"], row["changed_at"])
            elif row["changed_at"] > bucket.changed_at:
                bucket.adopt(row["rate"], row["sessions"], row["changed_at"], now)


async def load(database: db.Database, shaper: Shaper) -> None:
    """Read the checkpoint (at start): buckets begin where the cluster left them."""
    shaper._merge(list(await database.fetch("shaping/buckets")))


async def sync(database: db.Database, shaper: Shaper, node: str, now: datetime) -> None:
    """Write this node's changes and usage, then adopt later changes of other nodes.
    Three statements, no transaction: each is whole on its own."""
    buckets = list(shaper._buckets.values())
    if buckets:
        await database.execute(
            "shaping/checkpoint",
            [b.group for b in buckets],
            [b.source for b in buckets],
            [b.rate for b in buckets],
            [b.sessions for b in buckets],
            [b.changed_at if b.changed else None for b in buckets],  # unchanged: only inserted if absent
            node,
            now,
        )
        for b in buckets:
            b.changed = False
        stats = shaper.statistics()
        await database.execute(
            "shaping/usage",
            node,
            [s.group for s in stats],
            [s.source for s in stats],
            [s.local_rate for s in stats],
            [s.local_sessions for s in stats],
            [s.tokens for s in stats],
            [s.in_flight for s in stats],
            [s.decreases for s in stats],
            [s.increases for s in stats],
            now,
        )
        for s in stats:
            labels = {"group": s.group, "source": s.source}
            metrics.BUCKET_RATE.labels(**labels).set(s.local_rate)
            metrics.BUCKET_TOKENS.labels(**labels).set(s.tokens)
            metrics.BUCKET_SESSIONS_OPEN.labels(**labels).set(s.in_flight)
            metrics.BUCKET_SESSIONS_ALLOWED.labels(**labels).set(s.local_sessions)
    shaper._merge(list(await database.fetch("shaping/buckets")))


async def leave(database: db.Database, node: str) -> None:
    """This node stops (after its last sync): its usage rows go."""
    await database.execute("shaping/leave", node)


async def listing(database: db.Database, live_since: datetime) -> list[dict[str, Any]]:
    """Every bucket with the usage of the nodes whose heartbeat is at or after
    `live_since` (for `mtad buckets ls`)."""
    return [dict(row) for row in await database.fetch("shaping/list", live_since)]
