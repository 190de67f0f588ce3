"""What an inbound message reports: a bounce (RFC 3464 DSN, or one of the formats
flufl.bounce knows), a complaint (ARF, RFC 5965), an automatic reply (RFC 3834,
out-of-office), or nothing we know. Each names the original message by the
Message-ID it quotes, when it quotes one.

`parse` reads the message with the email package (compat32, as flufl.bounce
expects); it never raises, whatever the octets. It reads the first READ octets
only (a report's own parts come first, then the original it returns), and
flufl.bounce's heuristics, which cost about a millisecond a KiB, the first
SCANNED; a bounce names RECIPIENTS at most. Sync, no I/O: up to about half a
second of CPU on hostile input.
"""

from __future__ import annotations

import email
import email.header
import email.parser
import email.policy
import email.utils
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email.message import Message

from flufl.bounce import all_failures

from mtad.base import reasons

READ = 128 * 1024
SCANNED = 32 * 1024
RECIPIENTS = 100  # a bounce of an MX delivery names one; of a message sent as one, a few
MULTIPARTS = 64  # a report has a few; thousands nested cost the email package seconds
_POLICY = email.policy.compat32
# An enhanced status code (RFC 3463) of a failure, not a piece of an IP address.
_STATUS = re.compile(r"(?<![\w.])([245]\.\d{1,3}\.\d{1,3})(?!\.?\d)")
# A failure's reply near an address in a non-standard bounce: "550 5.1.1 <x@y>... User unknown".
_SCRAPED = re.compile(r"(?:(?<![\w.])[45]\d\d[ -])?(?<![\w.])([45]\.\d{1,3}\.\d{1,3})(?!\.?\d)[^\n]*")
_MESSAGE_ID_LINE = re.compile(r"^[ \t>]*Message-ID:[ \t]*(<[^<>\s]+>)", re.IGNORECASE | re.MULTILINE)
_MESSAGE_ID = re.compile(r"<[^<>\s]+>")
# The Message-ID field of returned headers, folded or not (a header parser costs 10x more).
_MESSAGE_ID_FIELD = re.compile(r"^Message-ID:[ \t]*(?:\r?\n[ \t]+)?(<[^<>\s]+>)", re.IGNORECASE | re.MULTILINE)
_TYPE = re.compile(r"[A-Za-z][\w.+-]*")  # an address or diagnostic type: "rfc822", "smtp", "X-Postfix"
_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")
_NEAR = 1000  # characters after an address in which its reply is looked for
_TRIES = 5  # places where an address is named that are looked at, at most
_OUT_OF_OFFICE = re.compile(
    r"^\s*(?:auto(?:matic)?[ _-]?(?:reply|response|answer)|out of (?:the )?office|autosvar|automatisch(?:e)? "
    r"antwo(?:rt|ord)|abwesenheitsnotiz|r[ée]ponse automatique|respuesta autom[áa]tica|risposta automatica|"
    r"fuera de (?:la )?oficina|on vacation|away from (?:the|my) office)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Failed:
    """One recipient a bounce reports, judged by the reply table: `hard` when the
    receiver says the address is gone (it is suppressed at once)."""

    recipient: str
    hard: bool
    status: str | None  # the enhanced status code, "5.1.1"
    diagnostic: str | None  # the receiver's reply, without its type ("smtp;")
    reason: reasons.Reason = reasons.Reason.UNDEFINED
    action: str = "failed"  # failed, expired, or delayed (a delay notice: it suppresses nothing)
    code: int | None = None  # the basic reply code, 550

    @property
    def permanent(self) -> bool:
        """A failure that will not be retried (not a delay notice)."""
        return self.action != "delayed"

    @property
    def soft(self) -> bool:
        """Whether it counts towards suppressing the address when it repeats."""
        return self.permanent and self.reason.counts_as_soft(_is_permanent(self))


def _is_permanent(failed: Failed) -> bool:
    if failed.code is not None:
        return failed.code >= 500
    return (failed.status or "5")[0] == "5"


@dataclass(frozen=True, slots=True)
class Bounce:
    """A delivery status notification: at least one recipient failed or is delayed."""

    recipients: tuple[Failed, ...]
    original_message_id: str | None


@dataclass(frozen=True, slots=True)
class Delivered:
    """A notice that the message was delivered (a DSN of successes, a provider's
    delivery notification): nothing to act on."""

    recipients: tuple[str, ...]
    original_message_id: str | None


@dataclass(frozen=True, slots=True)
class Complaint:
    """One feedback report (ARF, RFC 5965): a recipient (when it names one) reported
    the message; `feedback_type` says how (abuse, fraud, virus, auth-failure, not-spam...)."""

    recipient: str | None
    feedback_type: str  # in lower case
    original_message_id: str | None
    original_sender: str | None  # the original's envelope sender (Original-Mail-From)


@dataclass(frozen=True, slots=True)
class Complaints:
    """A message of feedback reports: one or several."""

    reports: tuple[Complaint, ...]


@dataclass(frozen=True, slots=True)
class AutoReply:
    """An automatic reply (out of office, vacation, autoresponder)."""

    original_message_id: str | None
    sender: str | None = None  # the From address: the original's recipient, as a rule


@dataclass(frozen=True, slots=True)
class Reply:
    """A message that answers others (In-Reply-To, References) and is neither a
    report nor automatic: a person's reply."""

    message_ids: tuple[str, ...]  # In-Reply-To first, then References from the newest
    sender: str | None  # the From address


@dataclass(frozen=True, slots=True)
class Unknown:
    """Nothing this module knows how to read; `why` says what it saw."""

    why: str


Report = Bounce | Delivered | Complaints | AutoReply | Reply | Unknown
Part = tuple[Message, str]  # a part of a report, and its content type


def parse(raw: bytes) -> Report:
    """What the message `raw` reports. Never raises."""
    try:
        return _report(raw[:READ])
    except Exception as exc:  # hostile or broken input must not stop the listener
        return Unknown(f"the message cannot be read ({type(exc).__name__})")


def _report(raw: bytes) -> Report:
    if raw.lower().count(b"multipart") > MULTIPARTS:
        return Unknown(f"more than {MULTIPARTS} multipart parts")
    msg = email.message_from_bytes(raw, policy=_POLICY)
    parts = list(_parts(msg))
    if _is_feedback_report(msg, parts):
        return _complaint(parts)
    dsn = _dsn(parts)
    if dsn is not None:
        return dsn
    if _looks_auto_replied(msg):
        return AutoReply(_replied_to(msg), _sender(msg))
    head = email.message_from_bytes(raw[:SCANNED], policy=_POLICY) if len(raw) > SCANNED else msg
    scanned = _scanned(head, _original_message_id(parts))
    if scanned is not None:
        return scanned
    if _auto_submitted(msg):  # bounces say so too: only once no bounce was found
        return AutoReply(_replied_to(msg), _sender(msg))
    answered = _answered(msg)
    if answered:
        return Reply(answered, _sender(msg))
    return Unknown("neither a bounce, a complaint, a reply nor an automatic reply")


def _parts(msg: Message) -> Iterator[Part]:
    """The message and its parts with their content types, depth first, without going
    into an enclosed message (message/*: the original, a delivery status, a feedback
    report): the report's own parts. Iterative, so deep nesting cannot exhaust the stack."""
    stack = [msg]
    while stack:
        part = stack.pop()
        kind = part.get_content_type()  # once: the email package works it out anew at each call
        yield part, kind
        payload = part.get_payload()
        if kind.startswith("multipart/") and isinstance(payload, list):
            stack.extend(reversed([p for p in payload if isinstance(p, Message)]))


# --- bounces ---------------------------------------------------------------------------------------------------


def _dsn(parts: Sequence[Part]) -> Report | None:
    """The bounce an RFC 3464 delivery-status part reports; Unknown when it reports
    only successes; None when there is no such part or it names no one."""
    blocks = [b for p, kind in parts if kind == "message/delivery-status" for b in _blocks(p)]
    failed = tuple(itertools.islice((f for f in map(_failed, blocks) if f is not None), RECIPIENTS))
    if failed:
        return Bounce(failed, _original_message_id(parts))
    actions = {(_header(b, "Action") or "").lower().split(" ")[0] for b in blocks}
    if actions & {"delivered", "relayed", "expanded"}:
        return Unknown("a delivery status notification that reports no failure")
    return None


def _blocks(part: Message) -> list[Message]:
    """The field blocks of a message/delivery-status part (the per-message one first)."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [b for b in payload if isinstance(b, Message)]
    text = _text(part).replace("\r\n", "\n")
    parser = email.parser.HeaderParser(policy=_POLICY)
    return [parser.parsestr(chunk) for chunk in _PARAGRAPH_END.split(text) if chunk.strip()]


def _failed(block: Message) -> Failed | None:
    """The recipient a per-recipient block reports as failed or delayed, else None."""
    action = (_header(block, "Action") or "").lower()
    diagnostic = _typed_value(_header(block, "Diagnostic-Code"))
    status = _status(_header(block, "Status")) or _status(diagnostic)
    if action.startswith(("failed", "error")):  # opensmtpd writes "error"
        hard = status is None or status.startswith("5")
    elif action.startswith("delayed"):
        hard = False
    else:
        return None
    recipient = _address(_typed_value(_header(block, "Original-Recipient")))
    recipient = recipient or _address(_typed_value(_header(block, "Final-Recipient")))
    return Failed(recipient, hard, status, diagnostic) if recipient else None


def _scanned(msg: Message, original_message_id: str | None) -> Bounce | None:
    """A bounce in one of the non-standard formats flufl.bounce knows, with the status
    and reply found next to each address in the text, if any."""
    try:
        temporary, permanent = all_failures(msg)
    except Exception:  # a detector's bug on odd input: no bounce found
        return None
    text = "\n".join(_text(p) for p, kind in _parts(msg) if kind.startswith("text/"))
    found: list[Failed] = []
    for hard, addresses in ((True, permanent), (False, set(temporary) - set(permanent))):
        for recipient in sorted(a.decode("ascii", "replace") for a in addresses):
            if recipient and len(found) < RECIPIENTS:
                status, diagnostic = _near(text, recipient)
                found.append(Failed(recipient, hard, status, diagnostic))
    return Bounce(tuple(found), original_message_id) if found else None


def _near(text: str, address: str) -> tuple[str | None, str | None]:
    """The status code and reply in the paragraph of the text where `address` is named."""
    for named in itertools.islice(re.finditer(re.escape(address), text, re.IGNORECASE), _TRIES):
        end = _PARAGRAPH_END.search(text, named.end(), named.end() + _NEAR)
        found = _SCRAPED.search(text, named.end(), end.start() if end else named.end() + _NEAR)
        if found is not None:
            return found.group(1), " ".join(found.group(0).split())
    return None, None


def _status(text: str | None) -> str | None:
    found = _STATUS.search(text) if text else None
    return found.group(1) if found else None


# --- complaints ------------------------------------------------------------------------------------------------


def _is_feedback_report(msg: Message, parts: Sequence[Part]) -> bool:
    if any(kind == "message/feedback-report" for _, kind in parts):
        return True
    # report-type=feedback-report without its part; the substring first: get_param costs 50 us
    return (parts[0][1] == "multipart/report" and "feedback-report" in (msg.get("Content-Type") or "").lower()
            and _param(msg, "report-type") == "feedback-report")  # fmt: skip


def _complaint(parts: Sequence[Part]) -> Complaints:
    report = next((p for p, kind in parts if kind == "message/feedback-report"), None)
    fields = _fields(report) if report is not None else Message()
    feedback_type = (_header(fields, "Feedback-Type") or "unknown").lower()
    recipient = _address(_header(fields, "Original-Rcpt-To")) or _enclosed_recipient(parts)
    sender = _address(_header(fields, "Original-Mail-From"))
    return Complaints((Complaint(recipient, feedback_type, _original_message_id(parts), sender),))


def _fields(part: Message) -> Message:
    """The fields of a message/feedback-report part, as headers."""
    payload = part.get_payload()
    if isinstance(payload, list) and payload and isinstance(payload[0], Message):
        return payload[0]
    return email.parser.HeaderParser(policy=_POLICY).parsestr(_text(part))


def _enclosed_recipient(parts: Sequence[Part]) -> str | None:
    """The one address the enclosed original was sent To, when it names only one."""
    original = _enclosed(parts)
    if original is None:
        return None
    addresses = [a for _, a in email.utils.getaddresses([str(v) for v in original.get_all("To", [])]) if a]
    return addresses[0] if len(addresses) == 1 else None


# --- automatic replies -----------------------------------------------------------------------------------------


def _looks_auto_replied(msg: Message) -> bool:
    """The marks only automatic replies carry (not bounces): X-Autoreply,
    X-Autorespond, Precedence: auto_reply, an out-of-office subject."""
    for name in ("X-Autoreply", "X-Autorespond"):
        value = _header(msg, name)
        if value is not None and value.lower() != "no":
            return True
    if (_header(msg, "Precedence") or "").lower() == "auto_reply":
        return True
    return bool(_OUT_OF_OFFICE.match(_subject(msg)))


def _auto_submitted(msg: Message) -> bool:
    """Auto-Submitted other than "no" (RFC 3834)."""
    value = _header(msg, "Auto-Submitted")
    return value is not None and value.split(";")[0].strip().lower() not in ("", "no")


def _replied_to(msg: Message) -> str | None:
    """The Message-ID an automatic reply answers: In-Reply-To, else the last of References."""
    found = _MESSAGE_ID.search(_header(msg, "In-Reply-To") or "")
    if found is not None:
        return found.group(0)
    references = _MESSAGE_ID.findall(_header(msg, "References") or "")
    return references[-1] if references else None


def _answered(msg: Message) -> tuple[str, ...]:
    """The Message-IDs a reply answers: In-Reply-To, then References from the newest."""
    found = _MESSAGE_ID.findall(_header(msg, "In-Reply-To") or "")
    found += reversed(_MESSAGE_ID.findall(_header(msg, "References") or ""))
    return tuple(dict.fromkeys(found))[:RECIPIENTS]


def _sender(msg: Message) -> str | None:
    """The From field's address, when it has one."""
    address = email.utils.parseaddr(_header(msg, "From") or "")[1]
    return address if "@" in address else None


def _subject(msg: Message) -> str:
    value = _header(msg, "Subject") or ""
    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except Exception:  # an encoded word that does not decode: the text as it is
        return value


# --- the original message --------------------------------------------------------------------------------------


def _original_message_id(parts: Sequence[Part]) -> str | None:
    """The Message-ID of the returned original: its message/rfc822 part, its
    text/rfc822-headers part, else a "Message-ID:" line quoted in the text."""
    original = _enclosed(parts)
    if original is not None and (found := _header(original, "Message-ID")):
        return found
    for part, kind in parts:
        if kind in ("text/rfc822-headers", "message/global-headers") and (
            line := _MESSAGE_ID_FIELD.search(_text(part))
        ):
            return line.group(1)
    for part, kind in parts:
        if kind.startswith("text/") and (line := _MESSAGE_ID_LINE.search(_text(part))):
            return line.group(1)
    return None


def _enclosed(parts: Sequence[Part]) -> Message | None:
    """The original message enclosed whole (message/rfc822), if any."""
    for part, kind in parts:
        if kind in ("message/rfc822", "message/global"):
            payload = part.get_payload()
            if isinstance(payload, list) and payload and isinstance(payload[0], Message):
                return payload[0]
    return None


# --- fields ----------------------------------------------------------------------------------------------------


def _header(msg: Message, name: str) -> str | None:
    """A header's value unfolded, None when absent or empty."""
    value = msg.get(name)
    text = " ".join(str(value).split()) if value is not None else ""
    return text or None


def _param(msg: Message, name: str) -> str | None:
    value = msg.get_param(name)
    if value is None:
        return None
    return str(email.utils.collapse_rfc2231_value(value)).strip().lower()


def _typed_value(value: str | None) -> str | None:
    """A DSN field's value without its type: "rfc822; x@y" -> "x@y", "smtp; 550 ..." -> "550 ..."."""
    if value is None:
        return None
    kind, semicolon, rest = value.partition(";")
    if semicolon and _TYPE.fullmatch(kind.strip()):
        value = rest
    return value.strip() or None


def _address(value: str | None) -> str | None:
    """An address without its angle brackets, None when empty."""
    found = value.strip().removeprefix("<").removesuffix(">").strip() if value else ""
    return found or None


def _text(part: Message) -> str:
    """A leaf part's content, decoded (transfer encoding, then charset; what does not
    decode is replaced)."""
    data = part.get_payload(decode=True)
    if not isinstance(data, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return data.decode(charset, "replace")
    except (LookupError, ValueError):  # a charset Python does not know, or not a text encoding
        return data.decode("utf-8", "replace")
