"""What comes back after delivery, as events: an asynchronous bounce, a complaint,
an unsubscribe, a reply, an automatic reply. Each names the original message and
delivery when they can be found (by a VERP token's delivery, or by the original
Message-ID the report quotes), and its tenant. The intakes (the inbound
listener, the mailboxes' inboxes, the unsubscribe endpoint) record them here; the
consumers act on them (suppression, reputation).

A bounce carries its reason (mtad.base.reasons), its action (failed, expired, or
delayed: a delay notice) and whether the address is gone (`hard`). A feedback
report is recorded by its Feedback-Type (`complaint_kind`): abuse, fraud and virus
as a complaint that suppresses; auth-failure (RFC 6591) as an event of its own;
opt-out as an unsubscribe; not-spam not at all; any other as a complaint that
suppresses nothing."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mtad import db
from mtad.base import events, metrics, reasons
from mtad.feedback import reports


class Kind(enum.StrEnum):
    BOUNCED = events.Kind.BOUNCED.value  # recorded with "async": true
    COMPLAINED = events.Kind.COMPLAINED.value
    AUTH_FAILURE = events.Kind.AUTH_FAILURE.value  # an ARF auth-failure report: suppresses nothing
    UNSUBSCRIBED = events.Kind.UNSUBSCRIBED.value
    REPLIED = events.Kind.REPLIED.value
    AUTO_REPLIED = events.Kind.AUTO_REPLIED.value
    OPENED = events.Kind.OPENED.value
    CLICKED = events.Kind.CLICKED.value


DELAYED = "delayed"  # a bounce's action when it is a delay notice: the message is still being retried
# The Feedback-Types that say the recipient called the mail unwanted: a complaint that suppresses.
COMPLAINTS = frozenset({"abuse", "fraud", "virus"})


@dataclass(frozen=True, slots=True)
class Original:
    """The message (and delivery) a signal is about."""

    message: uuid.UUID
    tenant: str
    delivery: int | None
    group: str | None = None  # the delivery's provider group
    verp: bool = False  # the delivery was sent with a VERP envelope sender: only a report to it names it


@dataclass(frozen=True, slots=True)
class Signal:
    kind: Kind
    recipient: str  # the original recipient it is about
    at: datetime
    message: uuid.UUID | None = None
    delivery: int | None = None
    tenant: str | None = None  # None: the message's
    data: Mapping[str, Any] = field(default_factory=dict)
    hard: bool = True  # a bounce: the receiver says the address is gone
    status: str | None = None  # a bounce's enhanced status code, "5.1.1"
    diagnostic: str | None = None  # a bounce's diagnostic, as the receiver wrote it
    reason: reasons.Reason | None = None  # a bounce's reason
    action: str = "failed"  # a bounce's: failed, expired, or delayed (a delay notice: it moves nothing)
    group: str | None = None  # the delivery's provider group (for mtad_bounce_reasons)

    @property
    def final(self) -> bool:
        """A bounce that reports a failure, not a delay: the delivery moves to bounced."""
        return self.kind is Kind.BOUNCED and self.action != DELAYED


def bounced(failed: reports.Failed, recipient: str, at: datetime, *, message: uuid.UUID | None = None,
            delivery: int | None = None, group: str | None = None,
            data: Mapping[str, Any] | None = None) -> Signal:  # fmt: skip
    """The signal of what a bounce reports of one recipient."""
    return Signal(Kind.BOUNCED, recipient, at, message=message, delivery=delivery, data=data or {},
                  hard=failed.hard and failed.permanent, status=failed.status, diagnostic=failed.diagnostic,
                  reason=failed.reason, action=failed.action, group=group)  # fmt: skip


def complaint_kind(feedback_type: str | None) -> Kind | None:
    """What a feedback report of this Feedback-Type is recorded as (None: nothing).
    A report that gives no type is taken for abuse. Sync, no I/O."""
    kind = (feedback_type or "abuse").strip().lower()
    if kind == "auth-failure":  # RFC 6591: a DMARC failure report, about the sender's authentication
        return Kind.AUTH_FAILURE
    if kind == "opt-out":  # the recipient asks for no more
        return Kind.UNSUBSCRIBED
    if kind == "not-spam":  # the recipient took it out of the spam folder
        return None
    return Kind.COMPLAINED


def suppressing_complaint(data: Mapping[str, Any]) -> bool:
    """Whether a complained event's report says the recipient called the mail
    unwanted (abuse, fraud, virus; one that gives no type): it suppresses and counts
    in the complaint rate. Sync, no I/O."""
    return str(data.get("feedback_type") or "abuse").lower() in COMPLAINTS


def soft_bounce(data: Mapping[str, Any]) -> bool:
    """Whether a bounced event counts towards suppressing its address when it repeats:
    a final failure (in the SMTP session, or after it but not a delay notice) whose
    reason is a recipient-side passing state or an expiry; or one in the session that
    looks gone though no receiver said so (no route to the domain). Sync, no I/O."""
    if data.get("action") == DELAYED:
        return False
    try:
        why = reasons.Reason(str(data.get("reason")))
    except ValueError:
        return False  # recorded before bounces had reasons
    permanent = _permanent(data)
    if why.gone(permanent):
        return not data.get("async") and data.get("class") not in (None, "recipient")
    return why.counts_as_soft(permanent)


def _permanent(data: Mapping[str, Any]) -> bool:
    """A bounce's reply was permanent: its enhanced status code, else its basic code,
    says 5; a bounce that gives neither is taken as permanent."""
    status = str(data.get("status") or "")
    if status[:1] in ("4", "5"):
        return status[0] == "5"
    reply = str(data.get("reply") or "")
    return not (reply[:1] == "4" and reply[:3].isdigit())


async def original(database: db.Database, message_id: str, recipient: str | None = None) -> Original | None:
    """The message a quoted Message-ID names (the newest with it), with its delivery
    to `recipient` when there is one, and whether that delivery was sent with VERP."""
    row = await database.fetchrow("feedback/original", message_id.strip(), recipient)
    if row is None:
        return None
    return Original(row["message"], row["tenant"], row["delivery"], row["route_group"], row["verp"])


async def record(database: db.Database, signal: Signal) -> int:
    """The signal's event (the consumers take it from there); returns its id. A bounce
    that reports a failure (not a delay) of a delivery recorded as delivered moves it
    to bounced (async_bounce). An unsubscribe is recorded once per delivery (the
    recipient of a message), however often and however it comes (a click replayed,
    a mail sent again, a feedback loop's opt-out): the id of the first is returned."""
    if signal.kind is Kind.UNSUBSCRIBED:
        return await _unsubscribed(database, signal)
    event = int(await database.fetchval("feedback/record", *_arguments(signal)))
    _count([signal])
    return event


async def _unsubscribed(database: db.Database, signal: Signal) -> int:
    recipient = signal.recipient.lower()
    about = signal.message or (f"delivery {signal.delivery}" if signal.delivery else f"tenant {signal.tenant}")
    async with database.transaction() as conn:
        await conn.execute("feedback/unsubscribe_lock", f"{about} {recipient}")
        arguments = _arguments(signal)[:6]  # at, kind, message, delivery, tenant, data
        return int(await conn.fetchval("feedback/unsubscribed", *arguments, recipient))


async def record_all(database: db.Database, recorded: Sequence[Signal]) -> list[None]:
    """The events of several signals, in one transaction and one round trip (see record)."""
    await database.executemany("feedback/record", [_arguments(signal) for signal in recorded])
    _count(recorded)
    return [None] * len(recorded)


def _arguments(signal: Signal) -> tuple[Any, ...]:
    data: dict[str, Any] = {"recipient": signal.recipient, **signal.data}
    if signal.kind is Kind.BOUNCED:  # after a 250: a DSN, not the reply in the session
        data.update({"async": True, "hard": signal.hard, "status": signal.status, "reply": signal.diagnostic,
                     "reason": (signal.reason or reasons.Reason.UNDEFINED).value, "action": signal.action})  # fmt: skip
    return (signal.at, signal.kind.value, signal.message, signal.delivery, signal.tenant, events.encode(data),
            signal.final, signal.status, signal.diagnostic)  # fmt: skip


def _count(recorded: Sequence[Signal]) -> None:
    for signal in recorded:
        if signal.final:
            why = (signal.reason or reasons.Reason.UNDEFINED).value
            metrics.BOUNCE_REASONS.labels(reason=why, group=metrics.provider(signal.group), kind="async").inc()


async def bounced_by_message_id(
    database: db.Database, bounce: reports.Bounce, at: datetime, data: Mapping[str, Any] | None = None
) -> list[tuple[reports.Failed, Original]]:
    """Record a bounce that names no delivery by itself: each recipient it reports
    (the first report of each) whose delivery of the original it quotes is found,
    unless that delivery was sent with VERP: a real bounce of it comes to its VERP
    address, and anyone can quote a Message-ID. Returns what was recorded, in the
    bounce's order."""
    if bounce.original_message_id is None:
        return []
    first: dict[str, reports.Failed] = {}
    for failed in bounce.recipients:
        first.setdefault(failed.recipient.lower(), failed)
    recorded = []
    for failed in first.values():
        found = await original(database, bounce.original_message_id, failed.recipient)
        if found is None or found.delivery is None or found.verp:
            continue
        signal = bounced(failed, failed.recipient, at, message=found.message, delivery=found.delivery,
                         group=found.group, data=data)  # fmt: skip
        await record(database, signal)
        recorded.append((failed, found))
    return recorded
