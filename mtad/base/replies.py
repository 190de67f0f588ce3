"""SMTP replies as typed values.

A policy function returns a `Reply` (or None to let the command through); the
text of the wire line is made only at the protocol edge, by `Reply.line()`.
Sync, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reply:
    """One SMTP reply: basic code, RFC 3463 enhanced code, human text."""

    code: int
    enhanced: str
    text: str

    def __post_init__(self) -> None:
        if not 200 <= self.code <= 599:
            raise ValueError(f"SMTP reply code out of range: {self.code}")
        if self.enhanced and self.enhanced[0] != str(self.code)[0]:
            raise ValueError(f"enhanced code {self.enhanced} does not match {self.code}")

    @property
    def is_success(self) -> bool:
        return self.code < 400

    @property
    def is_transient(self) -> bool:
        return 400 <= self.code < 500

    @property
    def is_permanent(self) -> bool:
        return self.code >= 500

    def line(self) -> str:
        """The reply as one wire line, without CRLF."""
        if self.enhanced:
            return f"{self.code} {self.enhanced} {self.text}"
        return f"{self.code} {self.text}"

    def __str__(self) -> str:
        return self.line()


# Replies mtad itself gives on the submission port.
OK = Reply(250, "2.0.0", "OK")
SENDER_OK = Reply(250, "2.1.0", "Sender OK")
RECIPIENT_OK = Reply(250, "2.1.5", "Recipient OK")
BYE = Reply(221, "2.0.0", "Bye")
AUTH_OK = Reply(235, "2.7.0", "Authentication successful")

AUTH_REQUIRED = Reply(530, "5.7.0", "Authentication required")
AUTH_INVALID = Reply(535, "5.7.8", "Authentication credentials invalid")
AUTH_THROTTLED = Reply(454, "4.7.0", "Too many failed authentication attempts; try again later")
AUTH_UNAVAILABLE = Reply(454, "4.7.0", "Temporary authentication failure")
AUTH_MALFORMED = Reply(501, "5.5.2", "Cannot decode the AUTH response")
AUTH_ABORTED = Reply(501, "5.7.0", "Authentication aborted")
BAD_HELO = Reply(501, "5.5.2", "EHLO/HELO needs a domain name or an address literal such as [192.0.2.1]")
MAIL_SYNTAX = Reply(501, "5.5.4", "Syntax: MAIL FROM:<address> [parameters] (<> for no sender)")
RCPT_SYNTAX = Reply(501, "5.5.4", "Syntax: RCPT TO:<address> [parameters]")
BAD_SENDER_SYNTAX = Reply(501, "5.1.7", "Bad sender address syntax")
BAD_RECIPIENT_SYNTAX = Reply(501, "5.1.3", "Bad recipient address syntax")
BAD_BODY = Reply(501, "5.5.4", "BODY can only be one of 7BIT, 8BITMIME")
SMTPUTF8_ARGUMENT = Reply(501, "5.5.4", "SMTPUTF8 takes no arguments")
UNKNOWN_MAIL_PARAMETER = Reply(555, "5.5.4", "MAIL FROM parameters not recognized or not implemented")
UNKNOWN_RCPT_PARAMETER = Reply(555, "5.5.4", "RCPT TO parameters not recognized or not implemented")
NEED_MAIL = Reply(503, "5.5.1", "Need MAIL command")
NESTED_MAIL = Reply(503, "5.5.1", "Nested MAIL command")
TOO_MANY_CONNECTIONS_FROM_CLIENT = Reply(421, "4.7.0", "Too many connections from your address")
TOO_MANY_CONNECTIONS = Reply(421, "4.7.0", "Too many connections")
TOO_MANY_RECIPIENTS = Reply(452, "4.5.3", "Too many recipients")
MESSAGE_TOO_BIG = Reply(552, "5.3.4", "Message size exceeds the fixed maximum message size")
LINE_TOO_LONG = Reply(500, "5.5.6", "Line too long (RFC 5321 section 4.5.3.1.6 allows 1000 octets)")
BARE_LINE_ENDING = Reply(
    550, "5.5.2", "Bare CR or LF in message data; lines must end with CRLF (RFC 5321 section 2.3.8)"
)
NEED_RECIPIENT = Reply(503, "5.5.1", "Need RCPT command")
DATA_SYNTAX = Reply(501, "5.5.4", "Syntax: DATA (no arguments)")
SPOOL_UNAVAILABLE = Reply(451, "4.3.0", "Spool database unavailable; message not accepted, try again later")
OUTCOME_UNKNOWN = Reply(451, "4.3.0", "Spool database connection lost during commit; resubmit, duplicates are detected")
SHUTTING_DOWN = Reply(421, "4.3.2", "Service shutting down, try again later")
INTERNAL_ERROR = Reply(451, "4.3.0", "Internal error; message not accepted, try again later")


def queued(queue_id: str) -> Reply:
    return Reply(250, "2.0.0", f"Ok: queued as {queue_id}")


def already_queued(queue_id: str) -> Reply:
    return Reply(250, "2.0.0", f"Ok: already queued as {queue_id} (duplicate submission)")


# Refusals of the instructions a message gives mtad in its header (X-Mtad-*); the
# values are shown quoted and in ASCII (`!a`), as reply lines should be.
def bad_priority(value: str, low: int, high: int) -> Reply:
    return Reply(550, "5.6.0", f"X-Mtad-Priority: expected a whole number from {low} to {high}, got {value!a}")


def unknown_pool(name: str, configured: Iterable[str]) -> Reply:
    names = ", ".join(sorted(configured)) or "none"
    return Reply(550, "5.7.0", f"X-Mtad-Pool: no source IP pool named {name!a} (configured: {names})")


def unknown_account_pool(name: str, configured: Iterable[str]) -> Reply:
    names = ", ".join(sorted(configured)) or "none"
    return Reply(550, "5.7.0", f"X-Mtad-Account-Pool: no account pool named {name!a} (configured: {names})")


def bad_campaign(name: str, rule: str) -> Reply:
    return Reply(550, "5.6.0", f"X-Mtad-Campaign: {name!a} is not a campaign name ({rule})")


def repeated_instruction(field: str) -> Reply:
    return Reply(550, "5.6.0", f"{field}: given more than once; give it once")


# Default enhanced codes for replies that arrive at the edge without one (aiosmtpd's
# built-in replies): by exact basic code first, then by class.
_DEFAULT_ENHANCED = {
    421: "4.3.0",
    450: "4.2.0",
    451: "4.3.0",
    452: "4.3.1",
    454: "4.7.0",
    500: "5.5.2",
    501: "5.5.4",
    502: "5.5.1",
    503: "5.5.1",
    504: "5.5.4",
    530: "5.7.0",
    534: "5.7.9",
    535: "5.7.8",
    538: "5.7.11",
    550: "5.0.0",
    552: "5.3.4",
    553: "5.1.3",
    554: "5.7.0",
    555: "5.5.4",
}
_HAS_ENHANCED = re.compile(r"^\d{3}[ -][245]\.\d{1,3}\.\d{1,3}(?: |$)")
_REPLY_LINE = re.compile(r"^([45]\d\d)([ -])(.*)$", re.DOTALL)


def with_enhanced_code(status: str) -> str:
    """Give a 4xx/5xx reply line an enhanced status code if it has none.

    Replies of other classes are returned unchanged (the greeting, EHLO lines and
    3xx continuations must not carry one). Sync, no I/O.
    """
    if _HAS_ENHANCED.match(status):
        return status
    match = _REPLY_LINE.match(status)
    if match is None:
        return status
    code, sep, text = match.groups()
    enhanced = _DEFAULT_ENHANCED.get(int(code), f"{code[0]}.0.0")
    return f"{code}{sep}{enhanced} {text}"
