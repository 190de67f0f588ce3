"""The two ways an attempt leaves: straight to the domain's MX, or through a sending
mailbox. The attempt pipeline (attempt.Attempts) is one for both: read the
message, write the attempt id, plan, sign, send, classify, settle, record. A
strategy fills in what differs: what the event says of the way out, where to
connect and how to log in (`plan`), who hears the receiver's answer (`answered`:
the dispatch's callback, which gives a bucket its permission back and tells the
source address's pool), what the answer means for a mailbox's reservation and
account (`settle`), and what to give back when nothing went out (`abandon`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mtad import db
from mtad.base import errors, headers, reasons
from mtad.base.lifecycle import Reason
from mtad.deliver import egress
from mtad.deliver.holdings import Message
from mtad.mailboxes import accounts, relay
from mtad.outbound import policies, routing, sessions
from mtad.outbound.outcomes import Class, Failure, Verdict
from mtad.spool.leases import Leased

Verdicts = dict[int, tuple[Verdict, Any]]  # delivery id -> (verdict, the receiver's reply or None)


@dataclass(frozen=True, slots=True)
class Source:
    """The address an attempt leaves from, and why that one."""

    address: str  # "": the system's choice
    pool: str | None = None
    choice: egress.Choice | None = None  # the pool's answer, with its EHLO name and any fallback

    def describe(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.pool is not None:
            data["pool"] = self.pool
        if self.choice is not None and self.choice.why is not None:
            data["egress"] = self.choice.why  # a spill past a full warming address, or a fallback
            data["egress_fallback"] = self.choice.fallback
        return data


@dataclass(frozen=True, slots=True)
class Plan:
    """Where one transaction goes and what it carries, before signing."""

    targets: list[sessions.Target]  # tried in order
    sender: str
    body: bytes
    source: Source
    login: sessions.Login | None = None


@dataclass(frozen=True, slots=True)
class Feedback:
    """What the receiver said to one attempt, as far as its source address goes."""

    delivered: int = 0  # recipients accepted
    throttled: bool = False  # a reply classed as throttled (421, 4.7.x, provider wording)
    refused: bool = False  # a permanent refusal of the sender (blocked, bad reputation, no PTR...)
    deferred: bool = False  # a transient reply
    connect_failed: bool = False  # no session through the source address
    maybe_sent: bool = False  # the connection dropped after the data: it may have gone out

    @classmethod
    def of(cls, result: sessions.Result | None, verdicts: Verdicts) -> Feedback:
        """From the receiver's own words: the only feedback shaping takes."""
        answered = [verdict for verdict, reply in verdicts.values() if reply is not None]
        classes = [verdict.cls for verdict in answered]
        return cls(
            delivered=classes.count(Class.DELIVERED),
            throttled=Class.THROTTLED in classes,
            refused=any(_refuses_sender(v) for v in answered),
            deferred=Class.TRANSIENT in classes,
            connect_failed=result is not None and result.failure is Failure.CONNECT_FAILED,
            maybe_sent=result is not None and result.maybe_sent,
        )

    @property
    def outcome(self) -> egress.SendOutcome | None:
        """What the send says about its source address, for the pool (None: nothing)."""
        if self.throttled:
            return egress.SendOutcome.THROTTLED
        if self.refused:
            return egress.SendOutcome.REFUSED
        if self.delivered:
            return egress.SendOutcome.DELIVERED
        if self.deferred or self.maybe_sent:
            return egress.SendOutcome.DEFERRED
        if self.connect_failed:
            return egress.SendOutcome.CONNECT_FAILED
        return None


def _refuses_sender(verdict: Verdict) -> bool:
    """A permanent refusal on the sender's side: its address, domain or rate."""
    return verdict.cls is Class.CONTENT and verdict.why is not None and verdict.why.side is reasons.Side.SENDER


class Strategy(Protocol):
    """One attempt's way out; see the module docstring. Each method is called at most
    once, `answered` exactly once (with None when nothing was sent)."""

    def describe(self) -> dict[str, Any]:
        """What the attempt's events say of the way out, before anything is sent."""
        ...

    async def plan(self, message: Message, data: dict[str, Any]) -> Plan | Verdict:
        """Where to connect, how to log in, what to send; or the verdict of every
        recipient when there is no way out now (a mailbox's login was refused)."""
        ...

    def answered(self, feedback: Feedback | None) -> None:
        """The receiver answered (None: the attempt ended before it did)."""
        ...

    async def settle(
        self, deliveries: Sequence[Leased], verdicts: Verdicts, result: sessions.Result | None, data: dict[str, Any]
    ) -> list[Leased]:
        """Apply the outcome to what was taken for the send; returns the deliveries to
        send again another way without spending an attempt."""
        ...

    async def abandon(self) -> None:
        """Nothing went out: give back what was taken for the send."""
        ...


class ToMx:
    """Straight to the domain's MX hosts, from a pool's source address, on a permission
    of its (provider group, source address) bucket, held to the domain's TLS policy
    (outbound.policies): the hosts it allows, each with what its session must show.
    `on_answer` gives the permission back with what the receiver said."""

    def __init__(
        self,
        route: routing.Route,
        source: Source,
        rng: random.Random,
        *,
        on_answer: Callable[[Source, Feedback | None], None],
        verp: str | None = None,
        tls: policies.Policies | None = None,
    ) -> None:
        self.route = route
        self._tls = tls
        self.verp = verp  # the envelope sender that names the delivery (None: the message's own)
        self.source = source
        self._rng = rng
        self._on_answer = on_answer
        self._answered = False

    def describe(self) -> dict[str, Any]:
        return self.source.describe()

    async def plan(self, message: Message, data: dict[str, Any]) -> Plan | Verdict:
        assert message.body is not None  # read for sending
        applied = policies.NONE
        if self._tls is not None:
            try:
                applied = await self._tls.of(self.route)
            except errors.RouteTempFail as exc:
                data["tls_error"] = f"the TLS policy of {self.route.domain} could not be looked up: {exc}"
                return Verdict(Class.TRANSIENT, Reason.DNS_TEMPFAIL, False, reasons.Reason.NETWORK_ERROR)
        if applied.kind is not None:
            data["tls_policy"] = applied.kind.value
        if applied.refused is not None:
            data["tls_error"] = applied.refused
            return Verdict(Class.TRANSIENT, Reason.TLS_FAILED, False, reasons.Reason.SECURITY_ERROR)
        targets = [
            sessions.Target(hop.name, address, hop.port, applied.verify.get(hop.name))
            for hop in self.route.attempt_order(self._rng)
            if applied.allows(hop.name)
            for address in hop.addresses
        ]
        sender = message.sender
        if self.verp is not None and sender:  # never for a null sender: a bounce gets no bounce
            sender = data["verp"] = self.verp
        return Plan(targets, sender, message.body, self.source)

    def answered(self, feedback: Feedback | None) -> None:
        """The permission back to the bucket with what the receiver said, as soon as it
        has answered: recording the outcome takes no session of the receiver's."""
        if not self._answered:
            self._answered = True
            self._on_answer(self.source, feedback)

    async def settle(
        self, deliveries: Sequence[Leased], verdicts: Verdicts, result: sessions.Result | None, data: dict[str, Any]
    ) -> list[Leased]:
        if result is not None:
            data["mx"] = result.host
        return []

    async def abandon(self) -> None:
        pass  # the permission goes back with `answered`


class ThroughMailbox:
    """Through a sending mailbox of an account pool, on a reservation taken before the
    send, from a pool's source address."""

    def __init__(
        self,
        reservation: accounts.Reservation,
        source: Source,
        mailboxes: relay.Mailboxes,
        database: db.Database,
        *,
        on_answer: Callable[[Source, Feedback | None], None],
    ) -> None:
        self.reservation = reservation
        self.source = source
        self._mailboxes = mailboxes
        self._db = database
        self._on_answer = on_answer
        self._answered = False

    def describe(self) -> dict[str, Any]:
        account = self.reservation.account
        return {
            "account": account.name,
            "account_pool": account.pool,
            "smarthost": f"{account.host}:{account.port}",
            "reservation": self.reservation.id,
            **self.source.describe(),
        }

    async def plan(self, message: Message, data: dict[str, Any]) -> Plan | Verdict:
        account = self.reservation.account
        try:
            login = await self._mailboxes.login(account)
        except relay.LoginFailed as failed:
            data["login"] = failed.why
            return failed.verdict
        assert message.body is not None  # read for sending
        sender, body = message.sender, message.body
        if self._mailboxes.rewrites_from(account.pool):  # the mailbox sends as itself
            sender, body = account.address, headers.rewrite_from(body, account.address)
            data["from"] = account.address
        return Plan([relay.target(account)], sender, body, self.source, login)

    def answered(self, feedback: Feedback | None) -> None:
        if not self._answered:
            self._answered = True
            self._on_answer(self.source, feedback)

    async def settle(
        self, deliveries: Sequence[Leased], verdicts: Verdicts, result: sessions.Result | None, data: dict[str, Any]
    ) -> list[Leased]:
        """The reservation confirmed, kept or released and the account's state moved, as
        the outcome says (relay.RESPONSES)."""
        replies = [reply for _, reply in verdicts.values() if reply is not None]
        delivered = next((d.id for d in deliveries if verdicts[d.id][0].cls is Class.DELIVERED), None)
        detail = {"queue_id": str(deliveries[0].message), "reply": replies[-1].line() if replies else None,
                  "failure": data.get("failure"), "login": data.get("login")}  # fmt: skip
        settled = await self._mailboxes.settle(
            self.reservation, [verdicts[d.id][0] for d in deliveries],
            maybe_sent=result is not None and result.maybe_sent, delivery=delivered,
            detail={k: v for k, v in detail.items() if v is not None},
        )  # fmt: skip
        data["reservation_kept"] = settled.slot is not relay.Slot.RELEASE
        if settled.moved_to is not None:
            data["account_state"] = settled.moved_to.value
        return [d for i, d in enumerate(deliveries) if i in settled.reroute]

    async def abandon(self) -> None:
        await accounts.release(self._db, self.reservation.id)  # never used
