"""Delivery status fields (RFC 3464): the per-recipient blocks of a
message/delivery-status part, or the same fields written into a report's text.

Fields are read line by line, not by a header parser: a value may continue on
indented lines, a Diagnostic-Code also on unindented ones (some servers wrap it so),
and a report may run several recipients' blocks together without a blank line. The
Status is the diagnostic's enhanced code when the Status field says only x.0.0.
Sync, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mtad.feedback.reports.said import Said, code_in, command_in, is_address, preferred, squeeze, status_in

_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]{1,40})[ \t]*:[ \t]*(.*)$")
_RECIPIENT_FIELDS = ("final-recipient", "original-recipient", "x-actual-recipient")
_TYPE = re.compile(r"^[ \t]*[A-Za-z][\w.+-]*[ \t]*;")  # "rfc822;", "smtp;", "X-Postfix;"
_STATUS_FIELD = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_NOT_SMTP = re.compile(r"^\s*x-(?:unix|local|mailer)\s*;", re.IGNORECASE)
RECIPIENTS = 100  # a bounce of one delivery names one; of a message sent as one, a few


def blocks(text: str) -> list[dict[str, str]]:
    """The field blocks of `text` that name a recipient, fields by lower-case name."""
    found: list[dict[str, str]] = []
    block: dict[str, str] = {}
    field: str | None = None

    def close() -> None:
        nonlocal block
        if any(name in block for name in _RECIPIENT_FIELDS):
            found.append(block)
        block = {}

    for line in text.split("\n"):
        if not line.strip():
            field = None
            close()
            continue
        match = _FIELD.match(line)
        if match is not None and not (field == "diagnostic-code" and not _known(match.group(1))):
            name = match.group(1).lower()
            if name in block and (name in _RECIPIENT_FIELDS or name in ("action", "status")):
                close()  # the next recipient's fields, with no blank line between
            block[name] = match.group(2).strip()
            field = name
        elif field is not None and (line[0] in " \t" or field == "diagnostic-code"):
            block[field] = f"{block[field]} {line.strip()}"
        else:
            field = None
        if len(found) >= RECIPIENTS:
            break
    close()
    return found


def _known(name: str) -> bool:
    """A field that may follow a Diagnostic-Code (an unindented line that looks like
    a field but is not one is the diagnostic's continuation)."""
    lowered = name.lower()
    return lowered in _RECIPIENT_FIELDS or lowered in (
        "action", "status", "remote-mta", "last-attempt-date", "will-retry-until", "reporting-mta", "x-postfix-sender",
        "arrival-date", "received-from-mta", "x-display-name", "final-log-id", "x-supplementary-info",
        "original-envelope-id", "dsn-gateway", "diagnostic-code", "x-original-message-id",
    ) or lowered.startswith("x-")  # fmt: skip


def said(texts: Iterable[str]) -> list[Said]:
    """What the delivery status fields in `texts` say of each recipient."""
    return [s for text in texts for s in map(_said, blocks(text)) if s is not None][:RECIPIENTS]


def _said(block: dict[str, str]) -> Said | None:
    recipient = next((r for r in (_address(block.get(f)) for f in _RECIPIENT_FIELDS) if r), None)
    if recipient is None:
        return None
    diagnostic = _value(block.get("diagnostic-code"))
    smtp = not _NOT_SMTP.match(block.get("diagnostic-code", ""))
    if not smtp and diagnostic:  # a local mailer's exit status ("X-Unix; 255"): its words only
        diagnostic = squeeze(block.get("diagnostic-code", ""))
    found = _STATUS_FIELD.search(block.get("status", ""))
    code = code_in(diagnostic) if smtp else None
    status = preferred(found.group(0) if found else None, status_in(diagnostic, code), code)
    action = (block.get("action") or "").split(" ")[0].strip().lower()
    return Said(recipient, action, status, code, diagnostic, command_in(diagnostic))


def _value(value: str | None) -> str | None:
    """A field's value without its type ("smtp; 550 ..." -> "550 ...")."""
    if value is None:
        return None
    return squeeze(_TYPE.sub("", value, count=1)) or None


def _address(value: str | None) -> str | None:
    """The address a recipient field names: "rfc822; <x@y>" -> "x@y"."""
    found = _value(value)
    if found is None:
        return None
    found = found.strip().strip("<>' ").strip()
    if not is_address(found):
        found = found.strip('"')  # "x@y" quoted whole
    return found if is_address(found) else None
