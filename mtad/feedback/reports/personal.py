"""Automatic replies (RFC 3834, out of office) and people's replies: what they
answer, and who sent them. Sync, no I/O."""

from __future__ import annotations

import re

from mtad.feedback.reports.mail import Mail, address

RECIPIENTS = 100
_MESSAGE_ID = re.compile(r"<[^<>\s]+>")
_OUT_OF_OFFICE = re.compile(
    r"^\s*(?:auto(?:matic)?[ _-]?(?:reply|response|answer)|out of (?:the )?office|autosvar|automatisch(?:e)? "
    r"antwo(?:rt|ord)|abwesenheitsnotiz|r[ée]ponse automatique|respuesta autom[áa]tica|risposta automatica|"
    r"fuera de (?:la )?oficina|on vacation|away from (?:the|my) office)\b",
    re.IGNORECASE,
)


def looks_automatic(mail: Mail) -> bool:
    """The marks only automatic replies carry (not bounces): X-Autoreply,
    X-Autorespond, Precedence: auto_reply, an out-of-office subject."""
    for name in ("X-Autoreply", "X-Autorespond", "X-Autoresponder"):
        value = mail.header(name)
        if value and value.lower() != "no":
            return True
    if mail.header("Precedence").lower() == "auto_reply":
        return True
    return bool(_OUT_OF_OFFICE.match(mail.header("Subject")))


def auto_submitted(mail: Mail) -> bool:
    """Auto-Submitted other than "no" (RFC 3834)."""
    value = mail.header("Auto-Submitted")
    return bool(value) and value.split(";")[0].strip().lower() not in ("", "no")


def replied_to(mail: Mail) -> str | None:
    """The Message-ID an automatic reply answers: In-Reply-To, else the last of References."""
    found = _MESSAGE_ID.search(mail.header("In-Reply-To"))
    if found is not None:
        return found.group(0)
    references = _MESSAGE_ID.findall(mail.header("References"))
    return references[-1] if references else None


def answered(mail: Mail) -> tuple[str, ...]:
    """The Message-IDs a reply answers: In-Reply-To, then References from the newest."""
    found = _MESSAGE_ID.findall(mail.header("In-Reply-To"))
    found += reversed(_MESSAGE_ID.findall(mail.header("References")))
    return tuple(dict.fromkeys(found))[:RECIPIENTS]


def sender(mail: Mail) -> str | None:
    """The From field's address, when it has one."""
    return address(mail.header("From"))
