"""What comes back after delivery, as events: an asynchronous bounce, a complaint,
an unsubscribe, a reply, an automatic reply. Each names the original message and
delivery when they can be found (by a VERP token's delivery, or by the original
Message-ID the report quotes), and its tenant. The intakes (the inbound
listener, the mailboxes' inboxes, the unsubscribe endpoint) record them here; the
consumers act on them (suppression)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mtad import db
from mtad.base import events
from mtad.feedback import reports


class Kind(enum.StrEnum):
    BOUNCED = events.Kind.BOUNCED.value  # recorded with "async": true
    COMPLAINED = events.Kind.COMPLAINED.value
    UNSUBSCRIBED = events.Kind.UNSUBSCRIBED.value
    REPLIED = events.Kind.REPLIED.value
    AUTO_REPLIED = events.Kind.AUTO_REPLIED.value


@dataclass(frozen=True, slots=True)
class Original:
    """The message (and delivery) a signal is about."""

    message: uuid.UUID
    tenant: str
    delivery: int | None


@dataclass(frozen=True, slots=True)
class Signal:
    kind: Kind
    recipient: str  # the original recipient it is about
    at: datetime
    message: uuid.UUID | None = None
    delivery: int | None = None
    tenant: str | None = None  # None: the message's
    data: Mapping[str, Any] = field(default_factory=dict)
    hard: bool = True  # a bounce: permanent (5.x.x) or only a delay or a temporary failure
    status: str | None = None  # a bounce's enhanced status code, "5.1.1"
    diagnostic: str | None = None  # a bounce's diagnostic, as the receiver wrote it


async def original(database: db.Database, message_id: str, recipient: str | None = None) -> Original | None:
    """The message a quoted Message-ID names (the newest with it), with its delivery
    to `recipient` when there is one."""
    row = await database.fetchrow("feedback/original", message_id.strip(), recipient)
    return Original(row["message"], row["tenant"], row["delivery"]) if row is not None else None


async def record(database: db.Database, signal: Signal) -> int:
    """The signal's event (the consumers take it from there); returns its id. A hard
    bounce of a delivery recorded as delivered moves it to bounced (async_bounce)."""
    return int(await database.fetchval("feedback/record", *_arguments(signal)))


async def record_all(database: db.Database, recorded: Sequence[Signal]) -> list[None]:
    """The events of several signals, in one transaction and one round trip (see record)."""
    await database.executemany("feedback/record", [_arguments(signal) for signal in recorded])
    return [None] * len(recorded)


def _arguments(signal: Signal) -> tuple[Any, ...]:
    data: dict[str, Any] = {"recipient": signal.recipient, **signal.data}
    if signal.kind is Kind.BOUNCED:  # after a 250: a DSN, not the reply in the session
        data.update({"async": True, "hard": signal.hard, "status": signal.status, "reply": signal.diagnostic})
    return (signal.at, signal.kind.value, signal.message, signal.delivery, signal.tenant, events.encode(data),
            signal.kind is Kind.BOUNCED and signal.hard, signal.status, signal.diagnostic)  # fmt: skip


async def bounced_by_message_id(
    database: db.Database, bounce: reports.Bounce, at: datetime, data: Mapping[str, Any] | None = None
) -> list[tuple[reports.Failed, Original]]:
    """Record a bounce that names no delivery by itself: each recipient it reports
    (the first report of each) whose delivery of the original it quotes is found.
    Returns what was recorded, in the bounce's order."""
    if bounce.original_message_id is None:
        return []
    first: dict[str, reports.Failed] = {}
    for failed in bounce.recipients:
        first.setdefault(failed.recipient.lower(), failed)
    recorded = []
    for failed in first.values():
        found = await original(database, bounce.original_message_id, failed.recipient)
        if found is None or found.delivery is None:
            continue
        signal = Signal(Kind.BOUNCED, failed.recipient, at, message=found.message, delivery=found.delivery,
                        data=data or {}, hard=failed.hard, status=failed.status,
                        diagnostic=failed.diagnostic)  # fmt: skip
        await record(database, signal)
        recorded.append((failed, found))
    return recorded
