"""Why a message was not delivered: one fixed list, in the words of the common bounce
taxonomy (Sisimai's), so that an operator coming from another platform reads the same
words. Every reply, in the session or in a report that comes back later, is judged to
one of them (mtad.outbound.outcomes, mtad/tables/replies.toml).

Each reason says whose side the fault is on, and so what it may do to the recipient:
only a recipient-side permanent reason (the address or its domain is gone) suppresses
at once; a recipient-side passing state suppresses only when it repeats
(`[suppression] soft_after`); a sender- or message-side reason never suppresses, it
feeds reputation and shaping. Sync, no I/O.
"""

from __future__ import annotations

import enum


class Side(enum.StrEnum):
    """Where the fault lies."""

    RECIPIENT = "recipient"  # the address, its mailbox or its domain
    MESSAGE = "message"  # what was sent: its content, size, format
    SENDER = "sender"  # who sent it: the source address, the domain's authentication, the rate
    PASSING = "passing"  # the way there: time, network, the receiver's own trouble
    UNKNOWN = "unknown"  # nothing the reply says tells


class Reason(enum.StrEnum):
    USER_UNKNOWN = "userunknown"  # no such mailbox
    HOST_UNKNOWN = "hostunknown"  # no such domain, or it has no mail host
    HAS_MOVED = "hasmoved"  # the mailbox moved, and mail is not forwarded
    NOT_ACCEPT = "notaccept"  # the domain accepts no mail (null MX); soft when only temporary
    SUSPEND = "suspend"  # the mailbox is disabled or suspended, for now
    MAILBOX_FULL = "mailboxfull"  # over its quota
    EXCEED_LIMIT = "exceedlimit"  # the message is over the mailbox's own size limit
    MESG_TOO_BIG = "mesgtoobig"  # the message is over the receiver's size limit
    FILTERED = "filtered"  # refused by the recipient's own filter or setting
    REJECTED = "rejected"  # the envelope sender was refused
    BLOCKED = "blocked"  # the sending address or host is refused (a block list, no reverse DNS)
    SPAM_DETECTED = "spamdetected"  # the content was judged spam
    VIRUS_DETECTED = "virusdetected"  # the content carries a virus
    POLICY_VIOLATION = "policyviolation"  # the receiver's policy refuses it
    AUTH_FAILURE = "authfailure"  # SPF, DKIM or DMARC failed
    REQUIRE_PTR = "requireptr"  # the sending address has no (matching) reverse DNS
    BAD_REPUTATION = "badreputation"  # the sending address or domain has a poor reputation
    SECURITY_ERROR = "securityerror"  # TLS or authentication between the servers failed
    NO_RELAYING = "norelaying"  # the receiver does not relay for this domain
    TOO_MANY_CONN = "toomanyconn"  # too many connections
    RATE_LIMITED = "ratelimited"  # too many messages, too fast
    EXPIRED = "expired"  # given up after retrying for too long
    SYSTEM_ERROR = "systemerror"  # the receiver's own failure
    SYSTEM_FULL = "systemfull"  # the receiver's disk is full
    NETWORK_ERROR = "networkerror"  # DNS, connection or routing trouble
    CONTENT_ERROR = "contenterror"  # the message's format or headers are refused
    SYNTAX_ERROR = "syntaxerror"  # an SMTP command was refused as malformed
    ON_HOLD = "onhold"  # a failure, but the reply does not say why
    UNDEFINED = "undefined"  # nothing to judge from

    @property
    def side(self) -> Side:
        return _SIDES[self]

    def gone(self, permanent: bool) -> bool:
        """Whether the receiver says the address is gone: it is suppressed at once.
        Only a permanent failure (5xx) says so."""
        return permanent and self in _GONE

    def status(self, permanent: bool) -> str | None:
        """The enhanced status code that says this reason, for a report that gives
        none (None: no code says it)."""
        code = _STATUS.get(self)
        if code is None:
            return None
        return code if permanent else f"4{code[1:]}"

    def counts_as_soft(self, permanent: bool) -> bool:
        """Whether a bounce for this reason counts towards suppressing the address
        when it repeats: a recipient-side state that may pass, or an expiry."""
        return not self.gone(permanent) and (self.side is Side.RECIPIENT or self is Reason.EXPIRED)


_GONE = frozenset({Reason.USER_UNKNOWN, Reason.HOST_UNKNOWN, Reason.HAS_MOVED, Reason.NOT_ACCEPT})

_SIDES = {
    Reason.USER_UNKNOWN: Side.RECIPIENT,
    Reason.HOST_UNKNOWN: Side.RECIPIENT,
    Reason.HAS_MOVED: Side.RECIPIENT,
    Reason.NOT_ACCEPT: Side.RECIPIENT,
    Reason.SUSPEND: Side.RECIPIENT,
    Reason.MAILBOX_FULL: Side.RECIPIENT,
    Reason.EXCEED_LIMIT: Side.RECIPIENT,
    Reason.MESG_TOO_BIG: Side.MESSAGE,
    Reason.FILTERED: Side.MESSAGE,
    Reason.REJECTED: Side.SENDER,
    Reason.BLOCKED: Side.SENDER,
    Reason.SPAM_DETECTED: Side.MESSAGE,
    Reason.VIRUS_DETECTED: Side.MESSAGE,
    Reason.POLICY_VIOLATION: Side.MESSAGE,
    Reason.AUTH_FAILURE: Side.SENDER,
    Reason.REQUIRE_PTR: Side.SENDER,
    Reason.BAD_REPUTATION: Side.SENDER,
    Reason.SECURITY_ERROR: Side.SENDER,
    Reason.NO_RELAYING: Side.SENDER,
    Reason.TOO_MANY_CONN: Side.SENDER,
    Reason.RATE_LIMITED: Side.SENDER,
    Reason.EXPIRED: Side.PASSING,
    Reason.SYSTEM_ERROR: Side.PASSING,
    Reason.SYSTEM_FULL: Side.PASSING,
    Reason.NETWORK_ERROR: Side.PASSING,
    Reason.CONTENT_ERROR: Side.MESSAGE,
    Reason.SYNTAX_ERROR: Side.PASSING,
    Reason.ON_HOLD: Side.UNKNOWN,
    Reason.UNDEFINED: Side.UNKNOWN,
}

# RFC 3463 and the IANA registry: the code of each reason that has one of its own.
_STATUS = {
    Reason.USER_UNKNOWN: "5.1.1",
    Reason.HOST_UNKNOWN: "5.1.2",
    Reason.HAS_MOVED: "5.1.6",
    Reason.NOT_ACCEPT: "5.1.10",
    Reason.SUSPEND: "5.2.1",
    Reason.MAILBOX_FULL: "5.2.2",
    Reason.EXCEED_LIMIT: "5.2.3",
    Reason.MESG_TOO_BIG: "5.3.4",
    Reason.SYSTEM_FULL: "5.3.1",
    Reason.EXPIRED: "5.4.7",
    Reason.REQUIRE_PTR: "5.7.25",
    Reason.CONTENT_ERROR: "5.6.0",
}
