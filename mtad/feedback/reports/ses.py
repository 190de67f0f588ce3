"""Amazon SES notifications (through SNS, by mail, bare or in SNS's own envelope): a
JSON document whose type says what it is, a bounce, a complaint or a delivery. Its recipients are read from
their own fields, never from fragments of the text. Sync, no I/O."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mtad.feedback.reports.said import Said, code_in, is_address, status_in

_START = re.compile(r'\{\s*"(?:notificationType|eventType|Type)"\s*:')
_WRAPPED = re.compile(r"!\n ")  # SNS wraps long lines of its mail with "!" at the end and a space after
LIMIT = 100


@dataclass(frozen=True, slots=True)
class Notification:
    kind: str  # bounce, complaint, delivery
    said: tuple[Said, ...]  # bounced recipients; complained (feedback type as action); delivered
    original_message_id: str | None


def read(text: str) -> Notification | None:
    """The notification in `text`, when it holds one."""
    start = _START.search(text)
    if start is None:
        return None
    try:
        document, _ = json.JSONDecoder().raw_decode(_WRAPPED.sub("", text[start.start() :]))
    except ValueError:
        return None
    if isinstance(document, dict) and isinstance(document.get("Message"), str):  # SNS's envelope, as it mails it
        try:
            document = json.loads(document["Message"])
        except ValueError:
            return None
    if not isinstance(document, dict):
        return None
    kind = str(document.get("notificationType") or document.get("eventType") or "").lower()
    mail = _dict(document.get("mail"))
    message_id = _message_id(mail)
    if kind == "bounce":
        bounce = _dict(document.get("bounce"))
        permanent = str(bounce.get("bounceType", "")).lower() == "permanent"
        said = tuple(s for s in (_bounced(r, permanent) for r in _list(bounce.get("bouncedRecipients"))) if s)
        return Notification("bounce", said[:LIMIT], message_id)
    if kind == "complaint":
        complaint = _dict(document.get("complaint"))
        feedback = str(complaint.get("complaintFeedbackType") or "abuse").lower()
        recipients = [_address(r.get("emailAddress")) for r in _list(complaint.get("complainedRecipients"))]
        return Notification("complaint", tuple(Said(r, feedback) for r in recipients if r)[:LIMIT], message_id)
    if kind == "delivery":
        delivery = _dict(document.get("delivery"))
        reply = str(delivery.get("smtpResponse") or "")
        recipients = [_address(r.get("emailAddress")) for r in _list(delivery.get("recipients"))]
        said = tuple(Said(r, "delivered", status_in(reply), code_in(reply), reply or None) for r in recipients if r)
        return Notification("delivery", said[:LIMIT], message_id)
    return None


def _bounced(recipient: dict[str, Any], permanent: bool) -> Said | None:
    address = _address(recipient.get("emailAddress"))
    if address is None:
        return None
    diagnostic = str(recipient.get("diagnosticCode") or "").removeprefix("smtp;").strip() or None
    status = str(recipient.get("status") or "") or status_in(diagnostic)
    action = str(recipient.get("action") or ("failed" if permanent else "delayed")).lower()
    return Said(address, action, status or None, code_in(diagnostic), diagnostic)


def _message_id(mail: dict[str, Any]) -> str | None:
    for header in _list(mail.get("headers")):
        if str(header.get("name", "")).lower() == "message-id" and header.get("value"):
            return str(header["value"]).strip()
    common = _dict(mail.get("commonHeaders")).get("messageId")
    return str(common).strip() if common else None


def _address(value: Any) -> str | None:
    found = str(value or "").strip().strip("<>")
    if "<" in found:  # "Name <x@y>"
        found = found.rsplit("<", 1)[1].rstrip(">")
    return found if is_address(found) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[dict[str, Any]]:
    return [v if isinstance(v, dict) else {"emailAddress": v} for v in value] if isinstance(value, list) else []
