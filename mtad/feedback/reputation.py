"""Reputation windows, the auto-pause and probation.

`Reputation` is the event consumer that counts outcomes per minute by tenant,
provider group and source address, the last two per tenant too (`reputation_counts`): delivered, deferred,
hard bounces (the address does not exist: a bounce of class "recipient", or a
hard DSN), complaints (of the Feedback-Types that suppress: abuse, fraud,
virus) and unsubscribes, and the deferrals and bounces whose reason is on the
sender's side (`refused`: blocked, bad reputation, authentication, rate...). A
complaint, an unsubscribe or a late bounce counts for the group and address its
delivery left from. The sliding windows are the sums over the last hour and the
last 24 hours. A complaint also counts towards the warm-up day of that address at
that group (`warmup_complaints`, read by mtad.deliver.egress), and one about mail
relayed through a sending account lowers the account's health.

After each batch it guards the tenants the batch touched, in the same
transaction: one whose complaint rate (complaints per delivered) or hard-bounce
rate (hard bounces per delivered and hard-bounced) passes its limit in either
window, over at least `min_volume` of them counted since it was last resumed, is
paused (mtad.spool.tenants.pause). A tenant on probation graduates once it has
delivered `graduate_after` since it was put on it, with both 24-hour rates
within the limits.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, events, metrics, reasons
from mtad.feedback import consumers, settings, signals
from mtad.spool import tenants

log = structlog.get_logger("mtad.reputation")

OUTCOMES = ("delivered", "deferred", "bounced", "complained", "unsubscribed", "refused")
WINDOWS = ("1h", "24h")
SCOPES = ("tenant", "provider", "source")
_KINDS = {
    events.Kind.DELIVERED.value: "delivered",
    events.Kind.DEFERRED.value: "deferred",
    events.Kind.BOUNCED.value: "bounced",
    events.Kind.COMPLAINED.value: "complained",
    events.Kind.UNSUBSCRIBED.value: "unsubscribed",
}
_LATER = frozenset({"bounced", "complained", "unsubscribed"})  # may come after the delivery: where did it leave from?


# Declared in settings.py: the configuration builds them without loading this module.
Guard = settings.Guard
Settings = settings.Guarding


def hard(data: Mapping[str, Any]) -> bool:
    """Whether a bounced event says the address does not exist."""
    if data.get("async"):
        return bool(data.get("hard"))
    return data.get("class") == "recipient"


def refused(data: Mapping[str, Any]) -> bool:
    """Whether a deferred or bounced event's reason is on the sender's side (the
    source address, the domain's authentication, the rate): never the recipient's."""
    try:
        return reasons.Reason(str(data.get("reason"))).side is reasons.Side.SENDER
    except ValueError:  # none, or not one of the list
        return False


def outcomes(kind: str, data: Mapping[str, Any]) -> list[int]:
    """What an event counts as in the windows (indexes of OUTCOMES; none, one or two)."""
    found = [] if kind == "bounced" and not hard(data) else [OUTCOMES.index(_KINDS[kind])]
    if kind in ("deferred", "bounced") and refused(data):
        found.append(_REFUSED)
    return found


_REFUSED = OUTCOMES.index("refused")


class Reputation:
    """The `reputation` event consumer (consumers.Handler)."""

    name = "reputation"
    # Delivered events, most of the log, are counted in SQL over the batch's span (spanned).
    kinds = frozenset(_KINDS) - {events.Kind.DELIVERED.value}

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def handle(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> None:
        """Count a batch of events of `kinds` (consumers.Handler; a consumer calls spanned)."""
        await self._count(conn, batch, {}, set())

    async def spanned(
        self, conn: db.Connection, batch: Sequence[consumers.Stored], start: consumers.Position,
        end: consumers.Position,
    ) -> None:  # fmt: skip
        """Count the batch, and the delivered events after `start` up to `end` (consumers.Spanning)."""
        delivered: dict[str, int] = defaultdict(int)
        if start != end:
            for row in await conn.fetch("reputation/count_delivered", str(start[0]), start[1], str(end[0]), end[1]):
                delivered[row["tenant"]] += row["n"]
        await self._count(conn, batch, delivered, set(delivered))

    async def _count(
        self, conn: db.Connection, batch: Sequence[consumers.Stored], delivered: dict[str, int], touched: set[str]
    ) -> None:
        """Count the batch's events, then guard the tenants they and `touched` touched;
        `delivered`: by tenant, the delivered events counted already."""
        counted = [(e, found) for e in batch if e.tenant and (found := outcomes(e.kind, e.data))
                   and (e.kind != "complained" or signals.suppressing_complaint(e.data))]  # fmt: skip
        if counted:
            await self._count_events(conn, counted, delivered)
        touched |= {e.tenant for e, _ in counted if e.tenant and e.kind != "deferred"}
        await self._guard(conn, sorted(touched), delivered)

    async def _count_events(
        self, conn: db.Connection, counted: list[tuple[consumers.Stored, list[int]]], delivered: dict[str, int]
    ) -> None:
        origins = await self._origins(conn, [e for e, _ in counted if _KINDS[e.kind] in _LATER and e.delivery])
        # Tallied by what they count for first: a batch's events share a few tenants,
        # groups, sources and minutes (a record batch's events, one `at`).
        tally: Counter[tuple[str, Any, Any, datetime, tuple[int, ...]]] = Counter()
        minutes: dict[datetime, datetime] = {}
        for e, found in counted:
            assert e.tenant is not None
            data = e.data
            group, source = origins.get(e.delivery or 0) or (data.get("group"), data.get("source"))
            minute = minutes.get(e.at) or minutes.setdefault(e.at, e.at.replace(second=0, microsecond=0))
            tally[(e.tenant, group, source, minute, tuple(found))] += 1
        counts: dict[tuple[str, str, str, datetime], list[int]] = defaultdict(lambda: [0] * len(OUTCOMES))
        for (tenant, group, source, minute, each), n in tally.items():
            for scope, key in (("tenant", tenant), ("provider", group), ("source", source)):
                if key:
                    for outcome in each:
                        counts[(scope, tenant, str(key), minute)][outcome] += n
            if each[0] == 0:
                delivered[tenant] = delivered.get(tenant, 0) + n
        keys = list(counts)
        await conn.execute(
            "reputation/count",
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [k[3] for k in keys],
            *([counts[k][i] for k in keys] for i in range(len(OUTCOMES))),
        )
        complaints = [e for e, _ in counted if e.kind == "complained" and e.delivery is not None and e.message]
        if complaints:  # the warm-up of the address they left from, the health of the account they went through
            await conn.execute("reputation/complaints", [e.id for e in complaints], [e.delivery for e in complaints],
                               [e.message for e in complaints], [e.at for e in complaints])  # fmt: skip

    async def _origins(
        self, conn: db.Connection, later: Sequence[consumers.Stored]
    ) -> dict[int, tuple[str | None, str | None]]:
        if not later:
            return {}
        rows = await conn.fetch(
            "reputation/origins", list({e.message for e in later if e.message}), [e.delivery for e in later]
        )
        return {r["delivery"]: (r["route_group"], r["source"]) for r in rows}

    async def _guard(self, conn: db.Connection, touched: list[str], delivered: Mapping[str, int]) -> None:
        """Pause the tenants past a limit; count the deliveries of those on probation
        and graduate the ones that have sent enough."""
        if not touched:
            return
        now = datetime.now(UTC)
        sent: dict[str, int] = {}
        if delivered:
            names = list(delivered)
            rows = await conn.fetch("reputation/probation_sent", names, [delivered[t] for t in names])
            sent = {r["tenant"]: r["probation_sent"] for r in rows}
        for row in await conn.fetch("reputation/guarded", touched, now):
            tenant = row["tenant"]
            guard = self.settings.guard(tenant)
            if not row["paused"]:
                why = _past_limit(row, guard)
                if why is not None:
                    reason, data = why
                    await tenants.pause(conn, tenant, reason, by="auto", now=now, data=data)
                    log.warning("tenant_paused", tenant=tenant, by="auto", reason=reason)
                    continue
            ready = tenant in sent and sent[tenant] >= guard.graduate_after and _within(row, guard)
            if ready and await conn.fetchval("reputation/graduate", tenant, now, sent[tenant]) is not None:
                log.info("tenant_graduated", tenant=tenant, sent=sent[tenant])


def _rates(row: Mapping[str, Any], window: str) -> tuple[int, float, int, float]:
    """(deliveries, complaint rate, sent, hard-bounce rate) of a window."""
    delivered, bounced = int(row[f"delivered_{window}"]), int(row[f"bounced_{window}"])
    complained = int(row[f"complained_{window}"])
    sent = delivered + bounced
    return delivered, complained / delivered if delivered else 0.0, sent, bounced / sent if sent else 0.0


def _past_limit(row: Mapping[str, Any], guard: Guard) -> tuple[str, dict[str, Any]] | None:
    """Why a tenant is to be paused (the reason and the figures), or None."""
    for window in WINDOWS:
        delivered, complaint_rate, sent, bounce_rate = _rates(row, window)
        if delivered >= guard.min_volume and complaint_rate > guard.max_complaint_rate:
            return (
                f"complaint rate {complaint_rate:.4f} over {window} ({row[f'complained_{window}']} of {delivered} "
                f"delivered) passes max_complaint_rate {guard.max_complaint_rate}",
                {"rate": "complaint", "value": round(complaint_rate, 6), "limit": guard.max_complaint_rate,
                 "window": window, "volume": delivered},
            )  # fmt: skip
        if sent >= guard.min_volume and bounce_rate > guard.max_bounce_rate:
            return (
                f"hard-bounce rate {bounce_rate:.4f} over {window} ({row[f'bounced_{window}']} of {sent} sent) "
                f"passes max_bounce_rate {guard.max_bounce_rate}",
                {"rate": "bounce", "value": round(bounce_rate, 6), "limit": guard.max_bounce_rate,
                 "window": window, "volume": sent},
            )  # fmt: skip
    return None


def _within(row: Mapping[str, Any], guard: Guard) -> bool:
    _, complaint_rate, _, bounce_rate = _rates(row, "24h")
    return complaint_rate <= guard.max_complaint_rate and bounce_rate <= guard.max_bounce_rate


async def windows(
    database: db.Database,
    scope: str | None = None,
    keys: Sequence[str] | None = None,
    now: datetime | None = None,
    *,
    tenant: str | None = None,
) -> list[dict[str, Any]]:
    """The sliding windows of a scope's keys (of one tenant's mail, or everyone's):
    {"scope", "key", "1h": {...}, "24h": {...}}."""
    at = now or datetime.now(UTC)
    rows = await database.fetch("reputation/windows", scope, list(keys) if keys is not None else None, at, tenant)
    return [
        {"scope": r["scope"], "key": r["key"],
         **{w: {o: int(r[f"{o}_{w}"] or 0) for o in OUTCOMES} for w in WINDOWS}}
        for r in rows
    ]  # fmt: skip


async def per_minute(database: db.Database, since: datetime) -> list[dict[str, Any]]:
    """Delivered, deferred and hard-bounced per minute from `since` on, over every
    tenant: {"minute", "delivered", "deferred", "bounced"}, minutes with none absent."""
    return [dict(r) for r in await database.fetch("reputation/minutes", since)]


class Publisher:
    """Keeps the windows' metrics (mtad_reputation) up to date, every `publish` seconds."""

    def __init__(self, database: db.Database, every: float) -> None:
        self._db = database
        self._every = every
        self._shown: set[tuple[str, str]] = set()

    async def publish(self) -> None:
        found = await windows(self._db)
        now = {(w["scope"], w["key"]) for w in found}
        for scope, key in self._shown - now:
            for window in WINDOWS:
                for outcome in OUTCOMES:
                    metrics.REPUTATION.labels(scope=scope, key=key, window=window, outcome=outcome).set(0)
        for w in found:
            for window in WINDOWS:
                for outcome in OUTCOMES:
                    metrics.REPUTATION.labels(scope=w["scope"], key=w["key"], window=window,
                                              outcome=outcome).set(w[window][outcome])  # fmt: skip
        self._shown = now

    async def run(self) -> None:
        while True:
            try:
                await self.publish()
            except errors.SpoolError as exc:
                log.warning("reputation_unread", error=str(exc))
            await asyncio.sleep(self._every)
