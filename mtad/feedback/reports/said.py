"""What a report says of one recipient before it is judged, and the codes and
addresses found in a report's text. Sync, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass

# An address as bounces write them (no quoted local parts, no comments).
# A local part begun by no quote, and by "=" only where no word runs into it ("dda:SMTP=x@y" names x@y).
_LOCAL = r"(?<![\w.!#$%&*+/?^`{|}~-])(?:(?<![A-Za-z0-9])=|[\w!#$%&*+/?^`{|}~-])[\w.!#$%&'*+/=?^`{|}~-]*"
_QUOTED_LOCAL = r'"[^"\\\r\n]{1,64}"'  # "neko..nyaan"@example.org: a local part that needs its quotes
ADDRESS = re.compile(
    f"(?:{_QUOTED_LOCAL}|{_LOCAL})" + r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}", re.ASCII
)
# An enhanced status code (RFC 3463), not a piece of an IP address or a version: 5.1.1, #5.1.1
_STATUS = re.compile(r"(?<![\w.])#?([245]\.\d{1,3}\.\d{1,3})(?![\w.]*\d)")
# A basic reply code where a reply starts: "550 ", "550-", "550 5.1.1"
_CODE = re.compile(r"(?<![\w.:/=-])([45][0-5]\d|2[0-4]\d|25[0-2])(?:[ -]|:(?!\d)|$)(?![\d.]*\d{2,}\.)", re.MULTILINE)
_DAEMONS = re.compile(r"^(?:mailer-?daemon|mail-?daemon|daemon)@", re.I)
_SYSTEMS = re.compile(r"^(?:mailer-?daemon|mail-?daemon|post_?master|mail ?delivery)\b", re.I)


@dataclass(frozen=True, slots=True)
class Said:
    recipient: str
    action: str = ""  # failed, expired, delayed, delivered, relayed, expanded; "" when not said
    status: str | None = None  # the enhanced status code
    code: int | None = None  # the basic reply code
    diagnostic: str | None = None  # the receiver's reply, or the report's words about the recipient
    command: str | None = None  # the SMTP command the reply answered: CONN, HELO, MAIL, RCPT, DATA


def status_in(text: str | None, code: int | None = None) -> str | None:
    """The enhanced status code `text` gives of a failure: a failure's code over a
    success's (a transcript shows both), one of the reply code's class when there is
    one, and the most specific (x.y.z over one with a zero part) first."""
    if not text:
        return None
    found = [m.group(1) for m in _STATUS.finditer(text)]
    failures = [s for s in found if s[0] != "2"] or found
    if code is not None:
        failures = [s for s in failures if s[0] == str(code)[0]] or failures
    return min(failures, key=_vagueness) if failures else None


def _vagueness(status: str) -> int:
    """0 for x.y.z, 1 for a zero detail or subject, 2 for x.0.0 (ties keep the text's order)."""
    _, subject, detail = status.split(".")
    return 2 if subject == detail == "0" else 1 if "0" in (subject, detail) else 0


def preferred(field: str | None, told: str | None, code: int | None) -> str | None:
    """The enhanced code of a recipient, from its Status field and the code the
    receiver's own reply gives: the one of the reply code's class when they differ in
    class; else the reply's when the field says less (x.0.0, a zero part) or says
    something the reporting server guesses (an expiry, a system error, a bad
    command, a bare unknown user); else the field."""
    if not field or not told or field == told:
        return field or told
    if code is not None and field[0] != told[0]:
        return field if str(code)[0] == field[0] else told if str(code)[0] == told[0] else field
    if field.endswith(".0.0"):
        return field if told.endswith(".0.0") else told
    vague = ".0" in field.split(".", 1)[1] or field.split(".")[2] == "0"
    if vague and ".0" not in told.split(".", 1)[1] and told.split(".")[2] != "0":
        return told
    if told.endswith(".0.0"):
        return field
    if field in ("4.4.7", "4.7.0") or field.startswith("5.3.") or field[1:4] in (".5.1", ".5.2", ".5.4", ".5.5"):
        return told
    if field == "5.1.1" and ".0" not in told[1:] and not told.startswith("5.5."):
        return told
    if field == "5.1.3" and told.startswith("5.7."):
        return told
    return field


# The command a reply answered, as mail systems write it in their reports.
_AFTER = r"\bafter (rcpt to|mail from|end of data|data|helo|ehlo|initial connection|starttls|sending data)"
_QMAIL = r"(does not like recipient|failed after i sent the message|sender was rejected|my name was rejected)"
_NAMED = r"(most progress was rcpt to|smtp:rcpt|\[rcpt_to\]|rcpt:)"
_COMMANDS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"in reply to (?:the )?(rcpt to|mail from|end of data|data|helo|ehlo|starttls|bdat)\b",
        _AFTER,
        r"did not like our (rcpt to|mail from|final data|data|helo|ehlo)",
        _QMAIL,
        _NAMED,
    )
)
_TRANSCRIPT = re.compile(r"(?:^|\s)>>> ?(rcpt to|mail from|data|helo|ehlo|bdat)\b|(?:^|\s)<<< ?[45]\d\d", re.I | re.M)
_COMMAND_NAMES = {"rcpt to": "RCPT", "mail from": "MAIL", "end of data": "DATA", "data": "DATA", "final data": "DATA",
                  "helo": "HELO", "ehlo": "HELO", "starttls": "HELO", "bdat": "DATA", "sending data": "DATA",
                  "initial connection": "CONN", "does not like recipient": "RCPT", "sender was rejected": "MAIL",
                  "most progress was rcpt to": "RCPT", "smtp:rcpt": "RCPT", "[rcpt_to]": "RCPT",
                  "rcpt:": "RCPT",
                  "failed after i sent the message": "DATA", "my name was rejected": "HELO"}  # fmt: skip


def command_in(text: str | None) -> str | None:
    """The SMTP command the reply in `text` answered, when the text says (Postfix's
    "in reply to RCPT TO command", Exim's "after end of data", a transcript's last
    ">>>" before the first refusal, qmail's words)."""
    if not text:
        return None
    for pattern in _COMMANDS:
        found = pattern.search(text)
        if found is not None:
            return _COMMAND_NAMES[found.group(1).lower()]
    sent = None
    for found in _TRANSCRIPT.finditer(text):
        if found.group(1) is None:
            return sent
        sent = _COMMAND_NAMES[found.group(1).lower()]
    return None


def code_in(text: str | None) -> int | None:
    """The first basic reply code (4xx or 5xx; 2xx at the start) in `text`."""
    if not text:
        return None
    for found in _CODE.finditer(text):
        code = int(found.group(1))
        if code >= 400 or found.start() == 0:
            return code
    return None


def is_address(value: str | None) -> bool:
    """Whether `value` is one address and nothing else."""
    return bool(value) and ADDRESS.fullmatch(value or "") is not None


def is_daemon(address: str) -> bool:
    """Whether `address` is a mail system's own sender (MAILER-DAEMON): never a
    failed recipient."""
    return _DAEMONS.match(address) is not None


def is_system(sender: str) -> bool:
    """Whether a From field's address or name is a mail system's (MAILER-DAEMON,
    postmaster, "Mail Delivery Subsystem"): the sender of bounces."""
    return _SYSTEMS.match(sender.strip().strip("\"'<")) is not None


def squeeze(text: str) -> str:
    """Runs of white space as one space."""
    return " ".join(text.split())
