"""Every reply and every local failure, classified once, in one table.

A delivery attempt ends with either the receiver's `Reply` or a local `Failure`
(refused connection, timeout, TLS failure, disconnect in DATA, ...). `classify()`
maps it to a `Verdict`: a class with exactly one response (deliver, defer, bounce),
the reason stored with the delivery, and the reason from the fixed list of
mtad.base.reasons. What comes back later (a DSN's status and diagnostic) is judged by
the same table (`judge`). The reply rules are data (mtad/tables/replies.toml:
provider wording first, generic rules after), read once; local failures are
classified here, since they do not depend on any provider. Sync, no I/O (but
load_rules reads its file).
"""

from __future__ import annotations

import enum
import functools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mtad.base import datafiles, errors, reasons
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply


class Class(enum.StrEnum):
    """What a reply means; each has one response (DESIGN.md, "Reply classes")."""

    DELIVERED = "delivered"  # mark delivered
    THROTTLED = "throttled"  # defer; the receiver asked us to slow down
    TRANSIENT = "transient"  # defer with back-off
    RECIPIENT = "recipient"  # bounce; suppress the address (the receiver said it is gone)
    CONTENT = "content"  # bounce the message: refused for what it is, not where it goes
    PERMANENT = "permanent"  # bounce: any other permanent refusal
    ACCOUNT_QUOTA = "account_quota"  # (relay accounts) park the mailbox until the day resets
    ACCOUNT_AUTH = "account_auth"  # (relay accounts) disconnect the mailbox, reroute


class Failure(enum.StrEnum):
    """Local failures: no reply, or not one the receiver chose to give."""

    NO_ROUTE = "no_route"  # NXDOMAIN, null MX, no address: undeliverable
    DNS_TEMPFAIL = "dns_tempfail"  # SERVFAIL or timeout resolving the route
    CONNECT_FAILED = "connect_failed"  # every MX host refused or did not answer
    TLS_FAILED = "tls_failed"  # the STARTTLS handshake failed
    TLS_REQUIRED = "tls_required"  # TLS is required and the receiver offers none
    TLS_POLICY = "tls_policy"  # the receiver fails the domain's MTA-STS or DANE policy
    TIMEOUT = "timeout"  # the receiver stopped answering mid-session
    DISCONNECTED = "disconnected"  # the connection dropped before DATA
    DISCONNECTED_IN_DATA = "disconnected_in_data"  # dropped after the data was sent: maybe delivered
    MESSAGE_UNREADABLE = "message_unreadable"  # the spooled message cannot be read or sent
    INTERNAL = "internal"  # mtad itself failed


_STATE = {
    Class.DELIVERED: State.DELIVERED,
    Class.THROTTLED: State.DEFERRED,
    Class.TRANSIENT: State.DEFERRED,
    Class.RECIPIENT: State.BOUNCED,
    Class.CONTENT: State.BOUNCED,
    Class.PERMANENT: State.BOUNCED,
    Class.ACCOUNT_QUOTA: State.DEFERRED,
    Class.ACCOUNT_AUTH: State.DEFERRED,
}


@dataclass(frozen=True, slots=True)
class Verdict:
    cls: Class
    reason: Reason | None  # the delivery's reason (lifecycle); None only for DELIVERED
    counts_as_throttle: bool  # feeds the receiver's rate (never for mtad's own failures)
    why: reasons.Reason | None = None  # the reason from the fixed list (events' "reason"); None: delivered

    @property
    def state(self) -> State:
        return _STATE[self.cls]

    @property
    def gone(self) -> bool:
        """Whether the receiver said the address is gone: it is suppressed."""
        return self.cls is Class.RECIPIENT


DELIVERED = Verdict(Class.DELIVERED, None, False)
EXPIRED = Verdict(Class.PERMANENT, Reason.EXPIRED, False, reasons.Reason.EXPIRED)

_FAILURES: Mapping[Failure, Verdict] = {
    # A domain with no route: it looks gone, but no receiver said so; it is not suppressed.
    Failure.NO_ROUTE: Verdict(Class.PERMANENT, Reason.NO_ROUTE, False, reasons.Reason.HOST_UNKNOWN),
    Failure.DNS_TEMPFAIL: Verdict(Class.TRANSIENT, Reason.DNS_TEMPFAIL, False, reasons.Reason.NETWORK_ERROR),
    Failure.CONNECT_FAILED: Verdict(Class.TRANSIENT, Reason.CONNECT_FAILED, False, reasons.Reason.NETWORK_ERROR),
    Failure.TLS_FAILED: Verdict(Class.TRANSIENT, Reason.TLS_FAILED, False, reasons.Reason.SECURITY_ERROR),
    Failure.TLS_REQUIRED: Verdict(Class.TRANSIENT, Reason.TLS_FAILED, False, reasons.Reason.SECURITY_ERROR),
    Failure.TLS_POLICY: Verdict(Class.TRANSIENT, Reason.TLS_FAILED, False, reasons.Reason.SECURITY_ERROR),
    Failure.TIMEOUT: Verdict(Class.TRANSIENT, Reason.TIMEOUT, False, reasons.Reason.NETWORK_ERROR),
    Failure.DISCONNECTED: Verdict(Class.TRANSIENT, Reason.DISCONNECTED, False, reasons.Reason.NETWORK_ERROR),
    Failure.DISCONNECTED_IN_DATA: Verdict(Class.TRANSIENT, Reason.DISCONNECTED, False, reasons.Reason.NETWORK_ERROR),
    Failure.MESSAGE_UNREADABLE: Verdict(Class.TRANSIENT, Reason.INTERNAL, False, reasons.Reason.SYSTEM_ERROR),
    Failure.INTERNAL: Verdict(Class.TRANSIENT, Reason.INTERNAL, False, reasons.Reason.SYSTEM_ERROR),
}

_CLASS_REASON = {
    Class.THROTTLED: Reason.THROTTLED,
    Class.TRANSIENT: Reason.MX_TEMPFAIL,
    Class.RECIPIENT: Reason.RECIPIENT_REJECTED,
    Class.CONTENT: Reason.CONTENT_REJECTED,
    Class.PERMANENT: Reason.PERMANENT_REPLY,
    Class.ACCOUNT_QUOTA: Reason.MAILBOX_COOLDOWN,
    Class.ACCOUNT_AUTH: Reason.MAILBOX_COOLDOWN,
}


COMMANDS = ("CONN", "HELO", "MAIL", "RCPT", "DATA", "")  # "": the command is not known
NO_CODE = 0  # `code = "none"` in the table
_ENHANCED = re.compile(r"^[245](\.\d{1,3}){0,2}[.*]?$")  # a code of the table, or its prefix
JUDGED = 600  # characters of a reply's text the rules read: what a receiver says comes first

# Reasons for which a temporary reply slows the sender down (the shaper backs off).
_THROTTLING = frozenset({reasons.Reason.RATE_LIMITED, reasons.Reason.TOO_MANY_CONN, reasons.Reason.BAD_REPUTATION})


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the reply table: every given condition must hold. It gives a class,
    a reason, or both."""

    cls: Class | None = None
    reason: reasons.Reason | None = None
    codes: frozenset[int] = frozenset()  # NO_CODE: a report's own words, with no reply code
    enhanced: tuple[str, ...] = ()  # "5.1.1" matches itself; "5.1." and "5.7.5*" every code they begin; "none" none
    text: re.Pattern[str] | None = None
    commands: frozenset[str] = frozenset()  # the SMTP command the reply answered ("": not known)
    note: str = ""

    def matches(self, code: int | None, enhanced: str, text: str, command: str = "") -> bool:
        if self.codes and (code or NO_CODE) not in self.codes:
            return False
        if self.commands and command not in self.commands:
            return False
        if self.enhanced and not any(_code_matches(enhanced, e) for e in self.enhanced):
            return False
        return self.text is None or self.text.search(text) is not None


class Rules:
    """The reply table: the first matching rule that gives a class decides the class,
    the first that gives a reason the reason; what none gives follows from the code."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)

    def classify(self, reply: Reply, command: str = "") -> Verdict:
        return self.judge(reply.code, reply.enhanced, reply.text, command)

    def judge(self, code: int | None, enhanced: str, text: str, command: str = "") -> Verdict:
        """The verdict on a reply given as its parts: a DSN may give only an enhanced
        status code (`code` None) or neither ("" and None); `command` is the SMTP
        command it answered (CONN, HELO, MAIL, RCPT, DATA; "" when not known)."""
        cls: Class | None = None
        why: reasons.Reason | None = None
        text = text[:JUDGED].lower()
        for rule in self.rules:
            if (
                (rule.cls is None or cls is None)
                and (rule.reason is None or why is None)
                and rule.matches(code, enhanced, text, command)
            ):
                cls = cls or rule.cls
                why = why or rule.reason
                if cls is not None and why is not None:
                    break
        basic = code if code is not None else _basic(enhanced)
        if cls is Class.DELIVERED or (cls is None and basic < 400):
            return DELIVERED
        why = why or reasons.Reason.ON_HOLD
        if cls is None:
            cls = _class_of(why, permanent=basic >= 500)
        elif cls in (Class.PERMANENT, Class.CONTENT, Class.RECIPIENT):
            cls = _class_of(why, permanent=True)  # a permanent refusal suppresses only when the address is gone
        return Verdict(cls, _CLASS_REASON[cls], cls is Class.THROTTLED, why)


def _code_matches(enhanced: str, pattern: str) -> bool:
    if pattern == "none":
        return not enhanced
    if pattern.endswith("*"):
        return enhanced.startswith(pattern[:-1])
    return enhanced.startswith(pattern) if pattern.endswith(".") else enhanced == pattern


def _basic(enhanced: str) -> int:
    """The basic code's class from an enhanced code's ("5.1.1" -> 500); 500 without one."""
    return {"2": 200, "4": 400}.get(enhanced[:1], 500)


def _class_of(why: reasons.Reason, *, permanent: bool) -> Class:
    if not permanent:
        return Class.THROTTLED if why in _THROTTLING else Class.TRANSIENT
    if why.gone(permanent):
        return Class.RECIPIENT
    if why.side in (reasons.Side.SENDER, reasons.Side.MESSAGE):
        return Class.CONTENT
    return Class.PERMANENT


def classify_failure(failure: Failure) -> Verdict:
    return _FAILURES[failure]


@functools.cache
def shipped() -> Rules:
    """The reply table shipped with mtad (mtad/tables/replies.toml), read once."""
    return load_rules(Path(str(resources.files("mtad").joinpath("tables", "replies.toml"))))


def load_rules(path: Path) -> Rules:
    """Read mtad/tables/replies.toml; ConfigError lists every problem."""
    document = datafiles.read_toml(path)
    return parse_rules(document, str(path))


def parse_rules(document: Mapping[str, Any], where: str = "replies") -> Rules:
    problems: list[str] = []
    rules = []
    for index, row in enumerate(document.get("rule", []), start=1):
        at = f"{where}: rule {index}"
        unknown = set(row) - {"class", "reason", "code", "enhanced", "text", "command", "note"}
        if unknown:
            problems.append(f"{at}: unknown keys {', '.join(sorted(unknown))}")
        if "class" not in row and "reason" not in row:
            problems.append(f"{at}: a rule gives a class, a reason or both")
            continue
        try:
            cls = Class(row["class"]) if "class" in row else None
        except ValueError:
            problems.append(f"{at}: class must be one of {', '.join(c.value for c in Class)}")
            continue
        try:
            why = reasons.Reason(row["reason"]) if "reason" in row else None
        except ValueError:
            problems.append(f"{at}: reason must be one of {', '.join(r.value for r in reasons.Reason)}")
            continue
        codes = row.get("code", [])
        codes = [codes] if isinstance(codes, int | str) else codes
        codes = [NO_CODE if c == "none" else c for c in codes]
        if not all(isinstance(c, int) and (200 <= c <= 599 or c == NO_CODE) for c in codes):
            problems.append(f'{at}: code must be an SMTP reply code, "none", or a list of them')
        enhanced = row.get("enhanced", [])
        enhanced = [enhanced] if isinstance(enhanced, str) else enhanced
        if not all(isinstance(e, str) and (e == "none" or _ENHANCED.match(e)) for e in enhanced):
            problems.append(f'{at}: enhanced must be status codes, prefixes such as "5.1." or "5.7.5*", or "none"')
        commands = row.get("command", [])
        commands = [commands] if isinstance(commands, str) else commands
        if not all(c in COMMANDS for c in commands):
            problems.append(f"{at}: command must be one or a list of {', '.join(repr(c) for c in COMMANDS)}")
        text = None
        if "text" in row:
            try:
                pattern = str(row["text"])  # searched in the text in lower case: a pattern in capitals ignores case
                text = re.compile(pattern, re.IGNORECASE if re.search(r"(?<!\\)[A-Z]", pattern) else 0)
            except re.error as exc:
                problems.append(f"{at}: text is not a regular expression: {exc}")
        if not (codes or enhanced or "text" in row):
            problems.append(f"{at}: a rule needs at least one of code, enhanced, text")
        rules.append(Rule(cls, why, frozenset(codes), tuple(enhanced), text, frozenset(commands),
                          str(row.get("note", ""))))  # fmt: skip
    if problems:
        raise errors.ConfigError(problems)
    return Rules(rules)


# --- when to try again ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """Delays before the 1st, 2nd, ... retry; the last one repeats. Jitter spreads
    retries of deliveries deferred together (a provider's outage) so that they do
    not return together."""

    delays: tuple[float, ...]
    jitter: float = 0.1  # +/- this fraction of the delay

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the attempts-th failed attempt (attempts >= 1)."""
        base = self.delays[min(max(attempts, 1), len(self.delays)) - 1]
        spread = base * self.jitter
        return base + (rng or random).uniform(-spread, spread)
