"""How mtad reads a message that comes back (`mtad bounces explain`): what it is;
for a bounce, each recipient's reason, status, reply and what mtad does with it;
for complaints, what each report's Feedback-Type does; for a reply, who sent it and
what it answers; and, given the spool, the delivery it is about.

What mtad does is what the consumers do (mtad.feedback.suppression, .reputation):
an address the receiver says is gone is suppressed at once; a passing state of
the recipient counts towards [suppression] soft_after; a sender-side reason
suppresses nothing and counts in the reputation windows; a delay does nothing.
`view` and `lines` are sync, no I/O; `matches` reads the spool.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from mtad import db
from mtad.base import errors, reasons
from mtad.feedback import reports, signals
from mtad.feedback.verp import Verp
from mtad.spool import queue


class Effect(enum.StrEnum):
    """What mtad does with one recipient of a bounce or one complaint."""

    SUPPRESS = "suppress"  # at once: the address is gone, or the recipient complained
    SOFT = "count_soft"  # towards [suppression] soft_after
    REPUTATION = "reputation"  # nothing for the recipient; counts against the sending side
    UNSUBSCRIBE = "unsubscribe"
    RECORD = "record"  # recorded as an event, nothing suppressed
    NOTHING = "nothing"


@dataclass(frozen=True, slots=True)
class Match:
    """The delivery a report is about."""

    delivery: int
    message: uuid.UUID  # its queue id
    tenant: str
    recipient: str
    state: str
    by: str  # found by "verp" (the address the report went to), "sender" (a complaint's original's) or "message-id"


def bounced(failed: reports.Failed) -> tuple[Effect, str]:
    """What mtad does with a recipient a bounce reports, and why."""
    if not failed.permanent:
        return Effect.NOTHING, "nothing: only a delay, the message is still being retried"
    if failed.hard:
        return Effect.SUPPRESS, "suppress at once: the receiver says the address is gone"
    if failed.soft:
        return Effect.SOFT, "count towards [suppression] soft_after: a passing state of the recipient"
    match failed.reason.side:
        case reasons.Side.SENDER:
            return Effect.REPUTATION, ("nothing for the recipient: a sender-side reason, counted in the reputation "
                                       "windows of the tenant, provider group and source address")  # fmt: skip
        case reasons.Side.MESSAGE:
            return Effect.NOTHING, "nothing for the recipient: the message was refused for what it is"
        case reasons.Side.PASSING:
            return Effect.NOTHING, "nothing for the recipient: trouble on the way there or at the receiver"
        case _:
            return Effect.NOTHING, "nothing for the recipient: the reply does not say why"


def complained(complaint: reports.Complaint) -> tuple[Effect, str]:
    """What mtad does with one feedback report, by its Feedback-Type (signals.complaint_kind)."""
    kind = signals.complaint_kind(complaint.feedback_type)
    if kind is None:
        return Effect.NOTHING, "nothing: the recipient says it is not spam"
    if kind is signals.Kind.AUTH_FAILURE:
        return Effect.RECORD, "an auth_failure event (the sender's authentication failed); nothing suppressed"
    if kind is signals.Kind.UNSUBSCRIBED:
        return Effect.UNSUBSCRIBE, "unsubscribed: the recipient asks for no more"
    if signals.suppressing_complaint({"feedback_type": complaint.feedback_type}):
        return Effect.SUPPRESS, "complained and suppressed: the recipient called the mail unwanted"
    return Effect.RECORD, "a complained event; nothing suppressed"


def view(report: reports.Report, found: list[Match] | None = None) -> dict[str, Any]:
    """The report as one JSON-able object; `found`: the deliveries it matches (None:
    the spool was not looked at)."""
    shown: dict[str, Any]
    match report:
        case reports.Bounce():
            shown = {"kind": "bounce", "original_message_id": report.original_message_id,
                     "recipients": [_failed(f) for f in report.recipients]}  # fmt: skip
        case reports.Delivered():
            shown = {"kind": "delivered", "original_message_id": report.original_message_id,
                     "recipients": list(report.recipients)}  # fmt: skip
        case reports.Complaints():
            shown = {"kind": "complaints", "reports": [_complaint(c) for c in report.reports]}
        case reports.AutoReply():
            answers = [report.original_message_id] if report.original_message_id else []
            shown = {"kind": "auto_reply", "sender": report.sender, "answers": answers,
                     "original_message_id": report.original_message_id}  # fmt: skip
        case reports.Reply():
            shown = {"kind": "reply", "sender": report.sender, "answers": list(report.message_ids),
                     "original_message_id": report.message_ids[0] if report.message_ids else None}  # fmt: skip
        case reports.Unknown():
            shown = {"kind": "unknown", "why": report.why}
    if found is not None:
        shown["deliveries"] = [{**asdict(m), "message": str(m.message)} for m in found]
    return shown


def _failed(failed: reports.Failed) -> dict[str, Any]:
    effect, why = bounced(failed)
    return {"recipient": failed.recipient, "reason": failed.reason.value, "side": failed.reason.side.value,
            "status": failed.status, "code": failed.code, "action": failed.action, "diagnostic": failed.diagnostic,
            "hard": failed.hard, "counts_as_soft": failed.soft, "effect": effect, "why": why}  # fmt: skip


def _complaint(complaint: reports.Complaint) -> dict[str, Any]:
    effect, why = complained(complaint)
    return {"recipient": complaint.recipient, "feedback_type": complaint.feedback_type,
            "original_message_id": complaint.original_message_id, "original_sender": complaint.original_sender,
            "effect": effect, "why": why}  # fmt: skip


def lines(shown: dict[str, Any]) -> Iterator[str]:
    """`view`'s object as text, a line at a time."""
    yield f"kind: {shown['kind']}"
    if shown["kind"] == "unknown":
        yield f"why: {shown['why']}"
    if "sender" in shown:
        yield f"sender: {_text(shown['sender'])}"
        yield f"answers: {' '.join(shown['answers']) or '-'}"
    if "original_message_id" in shown:
        yield f"original message-id: {_text(shown['original_message_id'])}"
    if shown["kind"] == "delivered":
        for recipient in shown["recipients"]:
            yield f"delivered to {recipient}: nothing to do"
    for failed in shown.get("recipients", []) if shown["kind"] == "bounce" else []:
        yield f"recipient: {failed['recipient']}"
        yield f"  reason:      {failed['reason']} ({failed['side']} side)"
        yield f"  status:      {_text(failed['status'])}"
        yield f"  reply code:  {_text(failed['code'])}"
        yield f"  action:      {failed['action']}"
        yield f"  diagnostic:  {_text(failed['diagnostic'])}"
        yield f"  hard/soft:   {'hard' if failed['hard'] else 'soft'}"
        yield f"  mtad does:   {failed['why']}"
    for complaint in shown.get("reports", []):
        yield f"report: {_text(complaint['recipient'])}"
        yield f"  feedback type:       {complaint['feedback_type']}"
        yield f"  original message-id: {_text(complaint['original_message_id'])}"
        yield f"  original sender:     {_text(complaint['original_sender'])}"
        yield f"  mtad does:           {complaint['why']}"
    if "deliveries" in shown:
        if not shown["deliveries"]:
            yield "delivery: no delivery matches"
        for m in shown["deliveries"]:
            yield (f"delivery: {m['delivery']} (tenant {m['tenant']}, recipient {m['recipient']}, state {m['state']}, "
                   f"queue id {m['message']}; found by {m['by']})")  # fmt: skip


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


async def matches(database: db.Database, report: reports.Report, *, verp: Verp | None = None,
                  to: str | None = None) -> list[Match]:  # fmt: skip
    """The deliveries `report` is about, as the intakes find them (mtad.feedback.inbound):
    the one the VERP address `to` (the address the report was sent to) names, else
    a complaint's original VERP sender's, else those of the original's Message-ID to
    each recipient it reports (for a bounce or a complaint, not one sent with VERP)."""
    if to is not None and verp is not None and (named := verp.delivery(to)) is not None:
        found = await _delivery(database, named, "verp")
        if found is not None:
            return [found]
    seen: dict[int, Match] = {}
    for message_id, recipient, sender in _asked(report):
        found = None
        if sender is not None and verp is not None and (named := verp.delivery(sender)) is not None:
            found = await _delivery(database, named, "sender")
        if found is None and message_id is not None and recipient is not None:
            original = await signals.original(database, message_id, recipient)
            by_token_only = isinstance(report, reports.Bounce | reports.Complaints)  # as the intakes judge
            if original is not None and original.delivery is not None and not (original.verp and by_token_only):
                found = await _delivery(database, original.delivery, "message-id")
        if found is not None:
            seen.setdefault(found.delivery, found)
    return list(seen.values())


def _asked(report: reports.Report) -> Iterator[tuple[str | None, str | None, str | None]]:
    """(the original's Message-ID, the recipient, the original's envelope sender) of
    each delivery `report` may be about."""
    match report:
        case reports.Bounce():
            for failed in report.recipients:
                yield report.original_message_id, failed.recipient, None
        case reports.Delivered():
            for recipient in report.recipients:
                yield report.original_message_id, recipient, None
        case reports.Complaints():
            for complaint in report.reports:
                yield complaint.original_message_id, complaint.recipient, complaint.original_sender
        case reports.AutoReply():
            yield report.original_message_id, report.sender, None
        case reports.Reply():
            for message_id in report.message_ids:
                yield message_id, report.sender, None


async def _delivery(database: db.Database, delivery: int, by: str) -> Match | None:
    try:
        shown = await queue.show(database, str(delivery), head_bytes=0)
    except errors.NotFound:
        return None
    row = next((d for d in shown.deliveries if d["id"] == delivery), None)
    if row is None:
        return None
    return Match(delivery, uuid.UUID(str(row["message"])), str(row["tenant"]), str(row["recipient"]),
                 str(row["state"]), by)  # fmt: skip
