"""The inbound SMTP listener: where bounces and complaints come back.

It takes mail only for the bounce domain (any local part: the VERP addresses of
mtad.feedback.verp) and for the complaints address, and refuses every other
recipient (550 5.7.1): nothing received is ever sent on, so it is no relay. Each
message is read as a report (reports.parse) and what it says is recorded as a
signal (mtad.feedback.signals) about the delivery it names: by its VERP address,
else by the original's Message-ID, but never a delivery that was sent with VERP
(only a report to its VERP address is about it: a Message-ID can be learnt). A
report that names no delivery, or a forged one, is logged and answered 250 all
the same, so that a forger learns nothing.
A client IP address may start `max_per_minute` messages in any minute; beyond, 421.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from aiosmtpd.smtp import SMTP, Envelope, Session, syntax

from mtad import db
from mtad.base import envelope, errors, metrics, replies, smtp_data
from mtad.base.batching import Batcher
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply
from mtad.base.sessions_set import Tracked
from mtad.feedback import reports, settings, signals
from mtad.feedback.verp import Verp
from mtad.outbound import outcomes

log = structlog.get_logger("mtad.inbound")

MIB = 2**20
INLINE = 16 * 1024  # reports up to this size are read on the event loop; larger ones in a thread
MINUTE = 60.0
MAX_CLIENTS = 100_000  # client addresses the rate remembers (the least recently seen are forgotten first)

RATE_LIMITED = Reply(421, "4.7.0", "Too many messages from your address; try again later")
RECEIVED = Reply(250, "2.0.0", "OK")


def relaying_denied(address: str) -> Reply:
    return Reply(550, "5.7.1", f"<{address}>: relaying denied")


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.InboundPort


class Outcome(enum.StrEnum):
    RECORDED = "recorded"  # a signal was recorded
    FORGED = "forged"  # a VERP address whose mac is wrong
    UNMATCHED = "unmatched"  # no delivery it is about was found
    IGNORED = "ignored"  # an automatic reply, or nothing that can be read


@dataclass(frozen=True, slots=True)
class _Target:
    """The delivery a report is about."""

    recipient: str
    message: uuid.UUID
    delivery: int
    group: str | None = None  # its provider group


class Rate:
    """At most `limit` messages from one client in any minute, by a sliding window:
    this minute's count plus the last minute's, weighted by the share of it the
    window still covers (rounded up). At most `clients` clients are remembered, the
    least recently seen forgotten first. Sync, no I/O."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic, clients: int = MAX_CLIENTS) -> None:
        self.limit = limit
        self._clock = clock
        self._most = clients
        self._counts: dict[str, tuple[int, int, int]] = {}  # client -> (minute, its count, the minute before's)

    def take(self, client: str) -> bool:
        """Count a message from `client`; False (and not counted) when it is one too many."""
        now = self._clock()
        minute = int(now // MINUTE)
        seen, count, before = self._counts.pop(client, (minute, 0, 0))  # popped: re-inserted as the newest
        if seen != minute:
            count, before = 0, count if seen == minute - 1 else 0
        carried = math.ceil(before * (1.0 - (now % MINUTE) / MINUTE))
        allowed = carried + count < self.limit
        self._counts[client] = (minute, count + 1 if allowed else count, before)
        if len(self._counts) > self._most:
            del self._counts[next(iter(self._counts))]
        return allowed

    def __len__(self) -> int:
        return len(self._counts)


class Inbound:
    """The listener; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        database: db.Database,
        verp: Verp | None,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
        rules: outcomes.Rules | None = None,
    ) -> None:
        self.settings = settings
        self.rules = rules or outcomes.shipped()  # what each failed recipient's reply means (a reload replaces it)
        self._db = database
        self._verp = verp
        self._now = now
        self.rate = Rate(settings.max_per_minute, clock)
        domains = {settings.bounce_domain, verp.domain if verp is not None else None}
        self._domains = frozenset(d.lower().rstrip(".") for d in domains if d)
        self._complaints = settings.complaints.strip().lower() if settings.complaints else None
        self._handler = _Handler(self)
        # The sessions' lookups and events go out together: one round trip for those that come at once.
        self._targets: Batcher[int, _Target | None] = Batcher(self._deliveries)
        self._records: Batcher[signals.Signal, None] = Batcher(functools.partial(signals.record_all, database))
        self._servers: list[asyncio.Server] = []
        self._sessions: set[Tracked] = set()

    @property
    def addresses(self) -> tuple[HostPort, ...]:
        """The addresses bound (a port 0 asked for becomes the real one)."""
        return tuple(HostPort(*s.getsockname()[:2]) for srv in self._servers for s in srv.sockets)

    async def start(self) -> None:
        """Listen on every address of settings.listen; raises OSError, listening on
        none, when one cannot be bound."""
        loop = asyncio.get_running_loop()
        try:
            for address in self.settings.listen:
                self._servers.append(await loop.create_server(self._session, address.host or None, address.port))
        except OSError:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop listening, then close the open sessions: a report cut in DATA got no
        250, and its sender sends it again."""
        for server in self._servers:
            server.close()
        for session in list(self._sessions):
            if session.transport is not None:
                session.transport.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    def _session(self) -> _Session:
        return _Session(
            self._handler,
            self._sessions,
            data_size_limit=self.settings.max_message_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=self.settings.hostname,
            ident="ESMTP mtad",
            loop=asyncio.get_running_loop(),
        )

    def accepts(self, address: str) -> bool:
        """Whether mail for `address` is taken: any local part at the bounce domain,
        or the complaints address (case-insensitive)."""
        lowered = address.strip().lower()
        if lowered == self._complaints:
            return True
        local, at, domain = lowered.rpartition("@")
        return bool(at and local) and domain.rstrip(".") in self._domains

    async def receive(self, recipients: Sequence[str], raw: bytes) -> Outcome:
        """Read the message `raw`, sent to `recipients`, and record what it reports;
        returns what became of it. Raises errors.SpoolError when it cannot be recorded."""
        leaving = next((r for r in recipients if self._is_verp(r, "u-")), None)
        if leaving is not None:  # a List-Unsubscribe mailto: the address says it all
            outcome = await self._unsubscribe(leaving)
            metrics.INBOUND_REPORTS.labels(kind="unsubscribe", outcome=outcome.value).inc()
            return outcome
        # CPU: up to half a second on hostile input, a few ms below INLINE octets (most reports)
        rules = self.rules
        if len(raw) <= INLINE:
            report = reports.parse(raw, rules)
        else:
            report = await asyncio.to_thread(reports.parse, raw, rules)
        match report:
            case reports.Bounce():
                kind, outcome = "bounce", await self._bounce(report, recipients)
            case reports.Complaints():
                kind = "complaint"
                found = [await self._complaint(c) for c in report.reports]  # each report its own complaint
                outcome = min(found, key=_OUTCOMES.index, default=Outcome.IGNORED)
            case reports.Delivered():
                log.info("delivery_notice_ignored", original=report.original_message_id)
                kind, outcome = "delivered", Outcome.IGNORED
            case reports.AutoReply():
                log.info("auto_reply_ignored", original=report.original_message_id)
                kind, outcome = "auto_reply", Outcome.IGNORED
            case reports.Reply():  # replies go to the sending mailboxes, not to the bounce domain
                log.info("reply_ignored", answered=list(report.message_ids))
                kind, outcome = "reply", Outcome.IGNORED
            case reports.Unknown():
                log.info("report_unknown", why=report.why, recipients=list(recipients))
                kind, outcome = "unknown", Outcome.IGNORED
        metrics.INBOUND_REPORTS.labels(kind=kind, outcome=outcome.value).inc()
        return outcome

    async def _bounce(self, bounce: reports.Bounce, recipients: Sequence[str]) -> Outcome:
        """A bounce to a VERP address is about the delivery it names, and nothing else;
        any other is about the deliveries of the original it quotes to the recipients
        it reports."""
        address = next((r for r in recipients if self._is_verp(r)), None)
        if address is not None:
            return await self._verp_bounce(bounce, address)
        recorded = await signals.bounced_by_message_id(self._db, bounce, self._now())
        if not recorded:
            log.info("bounce_unmatched", original=bounce.original_message_id,
                     reported=[f.recipient for f in bounce.recipients])  # fmt: skip
            return Outcome.UNMATCHED
        for failed, found in recorded:
            log.info("bounce_recorded", delivery=found.delivery, recipient=failed.recipient, hard=failed.hard,
                     status=failed.status, reason=failed.reason.value, action=failed.action)  # fmt: skip
        return Outcome.RECORDED

    async def _verp_bounce(self, bounce: reports.Bounce, address: str) -> Outcome:
        assert self._verp is not None  # _is_verp said so
        delivery = self._verp.delivery(address)
        if delivery is None:
            log.warning("forged_bounce", address=address, original=bounce.original_message_id)
            return Outcome.FORGED
        target = await self._delivery(delivery)
        if target is None:
            log.info("bounce_unmatched", delivery=delivery, original=bounce.original_message_id)
            return Outcome.UNMATCHED
        await self._record_bounce(_about(bounce.recipients, target.recipient), target)
        return Outcome.RECORDED

    async def _record_bounce(self, failed: reports.Failed, target: _Target) -> None:
        signal = signals.bounced(failed, target.recipient, self._now(), message=target.message,
                                 delivery=target.delivery, group=target.group)  # fmt: skip
        await self._records.submit(signal)
        log.info("bounce_recorded", delivery=target.delivery, recipient=target.recipient, hard=signal.hard,
                 status=failed.status, reason=failed.reason.value, action=failed.action)  # fmt: skip

    async def _complaint(self, complaint: reports.Complaint) -> Outcome:
        """One feedback report, recorded as its Feedback-Type says (signals.complaint_kind)."""
        kind = signals.complaint_kind(complaint.feedback_type)
        if kind is None:
            log.info("complaint_ignored", original=complaint.original_message_id, recipient=complaint.recipient,
                     feedback_type=complaint.feedback_type)  # fmt: skip
            return Outcome.IGNORED
        target = await self._complained_of(complaint)
        if target is None:
            log.info("complaint_unmatched", original=complaint.original_message_id, recipient=complaint.recipient,
                     feedback_type=complaint.feedback_type)  # fmt: skip
            return Outcome.UNMATCHED
        data = {"feedback_type": complaint.feedback_type}
        if kind is signals.Kind.UNSUBSCRIBED:
            data["via"] = "arf"
        signal = signals.Signal(kind, target.recipient, self._now(), message=target.message,
                                delivery=target.delivery, data=data)  # fmt: skip
        event = await signals.record(self._db, signal)
        log.info("complaint_recorded", delivery=target.delivery, recipient=target.recipient, kind=kind.value,
                 feedback_type=complaint.feedback_type, event_id=event)  # fmt: skip
        return Outcome.RECORDED

    async def _complained_of(self, complaint: reports.Complaint) -> _Target | None:
        """The delivery the original's envelope sender names when it is a good VERP
        address, else the one of the original's Message-ID to the recipient reported,
        unless that one was sent with VERP (then only its VERP address names it)."""
        sender = complaint.original_sender
        if self._verp is not None and sender is not None and self._is_verp(sender):
            delivery = self._verp.delivery(sender)
            target = await self._delivery(delivery) if delivery is not None else None
            if target is not None:
                return target
        if complaint.original_message_id is None or complaint.recipient is None:
            return None
        original = await signals.original(self._db, complaint.original_message_id, complaint.recipient)
        if original is None or original.delivery is None or original.verp:
            return None
        return _Target(complaint.recipient, original.message, original.delivery, original.group)

    async def _unsubscribe(self, address: str) -> Outcome:
        """Mail to the unsubscribe address of a delivery: its recipient asks for no more."""
        assert self._verp is not None  # _is_verp said so
        delivery = self._verp.unsubscribing(address)
        if delivery is None:
            log.warning("forged_unsubscribe", address=address)
            return Outcome.FORGED
        target = await self._delivery(delivery)
        if target is None:
            log.info("unsubscribe_unmatched", delivery=delivery)
            return Outcome.UNMATCHED
        signal = signals.Signal(signals.Kind.UNSUBSCRIBED, target.recipient, self._now(), message=target.message,
                                delivery=target.delivery, data={"via": "mailto"})  # fmt: skip
        event = await signals.record(self._db, signal)
        log.info("unsubscribe_recorded", delivery=delivery, recipient=target.recipient, event_id=event)
        return Outcome.RECORDED

    def _is_verp(self, address: str, prefix: str = "b-") -> bool:
        """Whether `address` has the form of a VERP address (`prefix` "b-": a bounce's,
        "u-": an unsubscribe's); its mac is not checked."""
        if self._verp is None:
            return False
        local, _, domain = address.strip().strip("<>").lower().rpartition("@")
        return local.startswith(prefix) and domain.rstrip(".") == self._verp.domain.lower()

    async def _delivery(self, delivery: int) -> _Target | None:
        return await self._targets.submit(delivery)

    async def _deliveries(self, ids: list[int]) -> list[_Target | None]:
        rows = await self._db.fetch("inbound/deliveries", ids)
        found = {row["id"]: _Target(row["recipient"], row["message"], row["id"], row["route_group"]) for row in rows}
        return [found.get(delivery) for delivery in ids]


# A message of several reports is as good as its best one.
_OUTCOMES = (Outcome.RECORDED, Outcome.FORGED, Outcome.UNMATCHED, Outcome.IGNORED)


def _about(failed: Sequence[reports.Failed], recipient: str) -> reports.Failed:
    """What a bounce reports of `recipient`, else its first hard failure, else its first."""
    same = [f for f in failed if f.recipient.lower() == recipient.lower()]
    return next(iter(same or [f for f in failed if f.hard] or failed))


def _client(session: Session) -> str:
    peer = session.peer
    return str(peer[0]) if isinstance(peer, tuple) else str(peer or "")


class _Handler:
    """aiosmtpd's hooks: the rate at MAIL, the recipients at RCPT, the report at DATA."""

    def __init__(self, inbound: Inbound) -> None:
        self._inbound = inbound

    async def handle_MAIL(self, server: SMTP, session: Session, envelope: Envelope, address: str,
                          options: list[str]) -> str:  # fmt: skip
        if not self._inbound.rate.take(_client(session)):
            log.warning("inbound_rate_limited", client=_client(session))
            return RATE_LIMITED.line()
        envelope.mail_from = address  # "<>" for the null sender of a bounce
        envelope.mail_options.extend(options)
        return replies.SENDER_OK.line()

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str,
                          options: list[str]) -> str:  # fmt: skip
        if not self._inbound.accepts(address):
            log.info("relaying_denied", client=_client(session), recipient=address)
            return relaying_denied(address).line()
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return replies.RECIPIENT_OK.line()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        try:
            await self._inbound.receive(envelope.rcpt_tos, envelope.original_content or b"")
        except errors.SpoolError as exc:
            log.warning("report_not_recorded", client=_client(session), error=str(exc))
            return replies.SPOOL_UNAVAILABLE.line()
        except Exception:  # the protocol edge: a bug costs a 451 (the report comes again), not the session
            log.exception("report_failed", client=_client(session))
            return replies.INTERNAL_ERROR.line()
        return RECEIVED.line()


class _Session(Tracked):
    """aiosmtpd's SMTP, in the listener's set of open sessions while connected; its
    own refusals get an enhanced status code, and a 421 closes the connection."""

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        """DATA read in chunks (smtp_data), not aiosmtpd's line at a time."""
        if await self.check_helo_needed():
            return
        if self.envelope is None or not self.envelope.rcpt_tos:
            await self.push(replies.NEED_RECIPIENT.line())
            return
        if arg:
            await self.push(replies.DATA_SYNTAX.line())
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        # A report's long line (a JSON notification, an unwrapped diagnostic) is taken: refused, it would be lost.
        read = await smtp_data.read(self._reader, self.data_size_limit or 0, self._reset_timeout, long_lines=True)
        if read is smtp_data.Refused.TOO_BIG:
            status = replies.MESSAGE_TOO_BIG.line()
        elif read is smtp_data.Refused.LINE_TOO_LONG:
            status = replies.LINE_TOO_LONG.line()
        else:
            assert isinstance(read, bytes)
            self.envelope.content = self.envelope.original_content = read
            status = await self._call_handler_hook("DATA")
        self._set_post_data_state()  # type: ignore[no-untyped-call]
        await self.push(status)

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """MAIL's and RCPT's path by mtad's parser: aiosmtpd's (the email package's,
        with a class made per call) was a third of the listener's CPU. A path that does
        not parse (`<@route:>` included) is given as no address: aiosmtpd's 501."""
        parsed = envelope.parse_path(arg)
        if parsed is None:
            return "", ""
        address, rest = parsed
        return (address or ("<>" if arg.strip() else "")), rest  # the null sender of a bounce, as aiosmtpd gives it

    async def push(self, status: Any) -> None:
        if isinstance(status, str):
            status = replies.with_enhanced_code(status).encode("utf-8", "replace")
        await super().push(status)
        if status.startswith(b"421 ") and self.transport is not None:
            self.transport.close()
