"""Feedback reports (ARF, RFC 5965; DMARC failure reports, RFC 6591), and Hotmail's
older reports (the original enclosed, its recipient in X-HmXmrOriginalRecipient).

Each report is one complaint per recipient it names (Original-Rcpt-To, which may
repeat); a message may carry several reports, each with its own original. Sync, no I/O.
"""

from __future__ import annotations

import email.parser
import email.policy
import email.utils
import re
from email.message import Message

from mtad.feedback.reports.mail import Mail, address, header
from mtad.feedback.reports.said import is_address

_POLICY = email.policy.compat32
_HOTMAIL = re.compile(r"@(?:[\w-]+\.)*(?:hotmail|msn|outlook|live)\.[a-z.]+$", re.IGNORECASE)
_FIELDS_IN_TEXT = re.compile(r"^Feedback-Type:[ \t]*[\w-]+", re.IGNORECASE | re.MULTILINE)
RECIPIENTS = 100


def is_report(mail: Mail) -> bool:
    """Whether `mail` is a feedback report: a feedback-report part, the report type
    without one (the fields then in its text), or Hotmail's older report."""
    if mail.feedback:
        return True
    content_type = mail.header("Content-Type").lower()
    if "feedback-report" in content_type and _FIELDS_IN_TEXT.search(mail.text):
        return True
    return _hotmail(mail) is not None


def read(mail: Mail) -> list[tuple[str | None, str, str | None, str | None]]:
    """The complaints: (recipient, feedback type in lower case, the original's
    Message-ID, the original's envelope sender: Original-Mail-From, else the
    original's Return-Path), a report's recipients in order."""
    found: list[tuple[str | None, str, str | None, str | None]] = []
    reports = list(mail.feedback) or ([mail.text] if _FIELDS_IN_TEXT.search(mail.text) else [])
    for number, text in enumerate(reports):
        fields = email.parser.HeaderParser(policy=_POLICY).parsestr(text.strip() + "\n")
        original = mail.originals[number] if number < len(mail.originals) else mail.original
        feedback_type = (header(fields, "Feedback-Type") or "unknown").lower().split()[0]
        sender = _address(header(fields, "Original-Mail-From")) or _return_path(original)
        message_id = header(original, "Message-ID") or None if original is not None else None
        recipients = [_address(str(v)) for v in fields.get_all("Original-Rcpt-To", [])]
        recipients += [_address(str(v)) for v in fields.get_all("Removal-Recipient", [])]
        named: list[str | None] = [r for r in dict.fromkeys(recipients) if r] or [_enclosed_recipient(original)]
        found += [(r, feedback_type, message_id, sender) for r in named]
    if not reports and (original := _hotmail(mail)) is not None:
        recipient = _address(header(original, "X-HmXmrOriginalRecipient")) or _enclosed_recipient(original)
        found.append((recipient, "abuse", header(original, "Message-ID") or None, _return_path(original)))
    return found[:RECIPIENTS]


def _hotmail(mail: Mail) -> Message | None:
    """The original of Hotmail's older report, when `mail` is one."""
    sender = address(mail.header("From")) or ""
    if not _HOTMAIL.search(sender):
        return None
    return next((o for o in mail.originals if o.get("X-HmXmrOriginalRecipient")), None)


def _return_path(original: Message | None) -> str | None:
    """The original's envelope sender as its receiver stamped it (Return-Path), when
    the report encloses it: where a report without Original-Mail-From names it."""
    return _address(header(original, "Return-Path")) if original is not None else None


def _enclosed_recipient(original: Message | None) -> str | None:
    """The one address the original was sent To, when it names only one."""
    if original is None:
        return None
    addresses = [a for _, a in email.utils.getaddresses([str(v) for v in original.get_all("To", [])]) if a]
    return addresses[0] if len(addresses) == 1 and is_address(addresses[0]) else None


def _address(value: str | None) -> str | None:
    found = (value or "").strip().removeprefix("<").removesuffix(">").strip()
    if ";" in found:  # "rfc822; x@y"
        found = found.split(";", 1)[1].strip().strip("<>")
    return found if is_address(found) else None
