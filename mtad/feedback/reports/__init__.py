"""What an inbound message reports: a bounce (an RFC 3464 DSN, its fields written
into the text, an Amazon SES notification, or a plain-text notification of any of
the common mail systems), a notice of delivery, complaints (ARF, RFC 5965, one or
several in a message), an automatic reply (RFC 3834, out of office), a person's
reply, or nothing we know. Each names the original message by the Message-ID it
quotes, when it quotes one.

A message from a mail system (MAILER-DAEMON, postmaster), a report of delivery
status, or one that says it is a bounce is read as a bounce before anything else:
only a message that is not one can be an automatic reply. Each recipient a bounce
reports is judged by the reply table (mtad.outbound.outcomes), as replies in the
SMTP session are: one reason, and whether the address is gone.

`parse` never raises, whatever the octets. It reads the first READ octets only (a
report's own parts come first, then the original it returns). Sync, no I/O: a few
milliseconds for most reports, more on hostile input (the callers read large
messages in a thread).
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
from dataclasses import dataclass
from email.message import Message

from flufl.bounce import all_failures

from mtad.base import reasons
from mtad.feedback.reports import arf, dsn, mail, personal, plain, ses
from mtad.feedback.reports.said import Said, code_in, command_in, is_address, is_system, preferred, status_in
from mtad.outbound import outcomes

READ = 128 * 1024
SCANNED = 32 * 1024  # octets flufl.bounce's heuristics read (about a millisecond a KiB)
RECIPIENTS = 100
# Subjects of bounces and delay notices.
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|undelivered|delivery (?:status|fail|report|notification|problem|has failed|error)|non.?deliver"
    r"|returned mail|return(?:ed)? to sender|failure notice|mail delivery|could not (?:be )?deliver|mail system error"
    r"|failed (?:delivery|mail)|delayed mail|warning: could not send|message not delivered|error sending|rejected:"
    r"|unable to deliver|delivery unsuccessful|bounce|zustellung|non remis|no entregado",
    re.IGNORECASE,
)
_DELAYED = re.compile(
    r"\bdelayed\b|still (?:being )?retr|will (?:continue to )?(?:keep )?(?:re)?try|not yet been delivered"
    r"|\(delay\)|warning: message .* still undelivered|temporarily (?:deferred|delayed)|will be retried",
    re.IGNORECASE,
)
# What a notice that a message was not delivered says, near its start.
_BOUNCE_TEXT = re.compile(
    r"could not be delivered to|was not delivered to|(?:was|is) undeliverable|delivery (?:has )?failed|delivery to "
    r"the following recipients? failed|permanent (?:fatal )?errors?|(?:unable|not able) to deliver|returned to sender",
    re.IGNORECASE,
)
_NOTICE = 3000  # characters of a notice's text looked at for it

# What a temporary failure that was retried until given up was, as the last try saw it.
_GAVE_UP_ON = frozenset({reasons.Reason.ON_HOLD, reasons.Reason.UNDEFINED, reasons.Reason.NETWORK_ERROR})
_GAVE_UP = re.compile(r"too long|expired|given up|giving up|gave up|could not be delivered for|cannot send message for",
                      re.IGNORECASE)  # fmt: skip


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


def parse(raw: bytes, rules: outcomes.Rules | None = None) -> Report:
    """What the message `raw` reports, its bounces judged by `rules` (None: the
    shipped reply table). Never raises."""
    try:
        return _report(mail.read(raw[:READ]), rules or outcomes.shipped())
    except Exception as exc:  # hostile or broken input must not stop the listener
        return Unknown(f"the message cannot be read ({type(exc).__name__})")


def _report(read: mail.Mail, rules: outcomes.Rules) -> Report:
    notification = ses.read(read.text)
    if notification is not None:
        return _notification(notification, rules)
    if arf.is_report(read):
        found = arf.read(read)
        return Complaints(tuple(Complaint(*c) for c in found)) if found else Unknown("a feedback report of no one")
    original = _original_message_id(read)
    said = dsn.said(read.status) or dsn.said([read.text])
    if said:
        return _bounce(_completed(said, read), read, original, rules)
    forwarded = _forwarded(read)
    if forwarded is not None:
        inner = _report(forwarded, rules)
        if isinstance(inner, Bounce | Delivered):
            return inner
    bouncing = _bouncing(read)
    if bouncing or not personal.looks_automatic(read):
        said = _plain(read, bouncing)
        if said:
            return _bounce(said, read, original, rules)
        if bouncing:
            return Unknown("a bounce that names no recipient")
    if personal.looks_automatic(read) or personal.auto_submitted(read):
        return AutoReply(personal.replied_to(read), personal.sender(read))
    replied = personal.answered(read)
    if replied:
        return Reply(replied, personal.sender(read))
    return Unknown("neither a bounce, a complaint, a reply nor an automatic reply")


def _forwarded(read: mail.Mail) -> mail.Mail | None:
    """The bounce a message encloses whole (a bounce forwarded, or returned as the
    original of another), when it encloses one."""
    for enclosed in read.originals:
        content_type = (enclosed.get("Content-Type") or "").lower()
        if "delivery-status" in content_type or is_system(mail.header(enclosed, "From")):
            return mail.read(enclosed.as_bytes())
    return None


def _completed(said: list[Said], read: mail.Mail) -> list[Said]:
    """Delivery status fields completed from the notification's text: the command
    the reply answered, and the diagnostic when the fields give none."""
    if all(s.command and s.diagnostic for s in said):
        return said
    told = {s.recipient.lower(): s for s in plain.said(read.text, _senders(read))}
    whole = command_in(read.text) if len(said) == 1 else None
    completed = []
    for s in said:
        other = told.get(s.recipient.lower())
        diagnostic = s.diagnostic or (other.diagnostic if other else None)
        command = s.command or (other.command if other else None) or whole
        code = s.code or code_in(diagnostic)
        status = preferred(s.status, status_in(diagnostic, code), code)
        completed.append(dataclasses.replace(s, diagnostic=diagnostic, command=command, status=status, code=code))
    return completed


def _bouncing(read: mail.Mail) -> bool:
    """Whether the message says it is a bounce: from a mail system, a report of
    delivery status, a bounce's subject, or Exim's X-Failed-Recipients."""
    sender = read.header("From")
    if is_system(sender) or is_system(mail.address(sender) or "") or sender.strip() in ("", "<>"):
        return True
    if "delivery-status" in read.header("Content-Type").lower() or read.header("X-Failed-Recipients"):
        return True
    if _BOUNCE_SUBJECT.search(read.header("Subject")):
        return True
    # A notice from an address of no mail system (no-reply@, a provider's own), answering nothing, that says so
    answers = read.header("In-Reply-To") or read.header("References")
    return not answers and not personal.looks_automatic(read) and bool(_BOUNCE_TEXT.search(read.text[:_NOTICE]))


def _plain(read: mail.Mail, bouncing: bool) -> list[Said]:
    """The recipients of a notification in plain text: where it names them (the
    report's own addressee too, when the text names no other: a message to oneself),
    else X-Failed-Recipients, else what flufl.bounce's detectors find, else (a
    bounce that names no one in its text) the original's recipient."""
    excluded = _senders(read)
    said = plain.said(read.text, excluded) if bouncing else []
    if bouncing and not said:
        said = plain.said(read.text, excluded - _addresses(read.head, "To"))
    failed = [a.strip() for a in read.header("X-Failed-Recipients").split(",") if is_address(a.strip())]
    if failed:
        named = {s.recipient.lower(): s for s in said}
        said = [named.get(a.lower()) or _about(a, read.text) for a in dict.fromkeys(failed)]
    if not said:
        said = [_about(a, read.text) for a in _detected(read) if a.lower() not in excluded]
    if not said and bouncing and read.original is not None:
        said = [_about(a, read.text) for a in _recipients_of(read.original) if a.lower() not in excluded]
    return said[:RECIPIENTS]


def _about(address: str, text: str) -> Said:
    """A recipient found elsewhere, with what the text says in the first paragraph
    that holds a reply."""
    for paragraph in text.split("\n\n"):
        if code_in(paragraph) or status_in(paragraph):
            words = " ".join(paragraph.split())
            return Said(address, "", status_in(words, code_in(words)), code_in(words), words)
    return Said(address, "", None, None, " ".join(text.split())[:500] or None)


def _detected(read: mail.Mail) -> list[str]:
    """The addresses flufl.bounce's detectors find (bytes or str, whatever they give)."""
    try:
        temporary, permanent = all_failures(read.head)
    except Exception:  # a detector's bug on odd input: nothing found
        return []
    found = []
    for value in [*permanent, *temporary]:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        text = text.strip().strip("<>")
        if is_address(text):
            found.append(text)
    return list(dict.fromkeys(found))


def _senders(read: mail.Mail) -> set[str]:
    """The addresses that are the sender's, never a failed recipient: the report's
    From, the reporting system's postmaster, the original's Sender, Return-Path and
    Reply-To, and the report's To and the original's From unless the original was
    sent to them."""
    found = _addresses(read.head, "From")
    found |= {f"postmaster@{a.rpartition('@')[2]}" for a in found}
    sent_to = _addresses(read.original, "To", "Cc") if read.original is not None else set()
    found |= _addresses(read.head, "To") - sent_to  # a message to oneself bounces to oneself
    if read.original is not None:
        found |= _addresses(read.original, "Sender", "Return-Path", "Reply-To")
        found |= _addresses(read.original, "From") - sent_to
    return found


def _addresses(msg: Message, *names: str) -> set[str]:
    """The addresses of the fields `names` of `msg`, in lower case."""
    values = [str(v) for name in names for v in msg.get_all(name, [])]
    return {a.lower() for _, a in email.utils.getaddresses(values) if a}


def _recipients_of(original: Message) -> list[str]:
    addresses = email.utils.getaddresses([str(v) for v in original.get_all("To", [])])
    return [a for _, a in addresses if is_address(a)][:RECIPIENTS]


def _bounce(said: list[Said], read: mail.Mail, original: str | None, rules: outcomes.Rules) -> Report:
    """A bounce of the recipients that failed or are delayed; a notice of delivery
    when every recipient was delivered."""
    failed = [s for s in said if s.action not in ("delivered", "deliverable", "relayed", "expanded")]
    if not failed:
        return Delivered(tuple(dict.fromkeys(s.recipient for s in said)), original)
    default = _action(read)
    judged: dict[str, Failed] = {}
    verdicts: dict[tuple[int | None, str, str, str], outcomes.Verdict] = {}  # recipients refused alike
    for s in failed:
        judged.setdefault(s.recipient.lower(), judge(s, rules, default, verdicts))
    return Bounce(tuple(judged.values()), original)


def _action(read: mail.Mail) -> str:
    """What a notification that gives no Action says of its recipients."""
    words = f"{read.header('Subject')}\n{read.text[:3000]}"
    if _DELAYED.search(words) and not _GAVE_UP.search(words):
        return "delayed"
    return "failed"


def judge(
    said: Said,
    rules: outcomes.Rules,
    default_action: str = "failed",
    verdicts: dict[tuple[int | None, str, str, str], outcomes.Verdict] | None = None,
) -> Failed:
    """A recipient's failure judged by the reply table (`verdicts`: those already
    made for the same reply)."""
    action = said.action if said.action in ("failed", "expired", "delayed") else default_action
    status = said.status or ""
    key = (said.code, status, said.diagnostic or "", said.command or "")
    verdict = verdicts.get(key) if verdicts is not None else None
    if verdict is None:
        verdict = rules.judge(*key)
        if verdicts is not None:
            verdicts[key] = verdict
    permanent = said.code >= 500 if said.code else (status[:1] == "5" if status else action != "delayed")
    why = verdict.why or reasons.Reason.UNDEFINED
    if why in _GAVE_UP_ON and (action in ("expired", "delayed") or (action == "failed" and not permanent)):
        why = reasons.Reason.EXPIRED  # retried until the reporting server gave up: an expiry
    if not status:
        status = why.status(permanent) or ""
    hard = action != "delayed" and why.gone(permanent)
    return Failed(said.recipient, hard, status or None, said.diagnostic, why, action, said.code)


def _notification(notification: ses.Notification, rules: outcomes.Rules) -> Report:
    original = notification.original_message_id
    if notification.kind == "complaint":
        return Complaints(tuple(Complaint(s.recipient, s.action, original, None) for s in notification.said))
    if notification.kind == "delivery":
        return Delivered(tuple(s.recipient for s in notification.said), original)
    if not notification.said:
        return Unknown("an Amazon SES bounce notification of no one")
    return Bounce(tuple(judge(s, rules) for s in notification.said), original)


def _original_message_id(read: mail.Mail) -> str | None:
    """The Message-ID of the returned original: its header, else a "Message-ID:" line
    quoted in the text."""
    if read.original is not None:
        found = mail.header(read.original, "Message-ID")
        if found:
            return found
    line = _MESSAGE_ID_LINE.search(read.text)
    return line.group(1) if line else None


_MESSAGE_ID_LINE = re.compile(r"^[ \t>]*Message-ID:[ \t]*(<[^<>\s]+>)", re.IGNORECASE | re.MULTILINE)
