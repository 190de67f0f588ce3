"""Submission policy: who may send, which addresses and sizes pass, AUTH, and the
durable accept. These are aiosmtpd handler hooks; each returns its reply (made
from a typed `Reply`), and DATA answers 250 only after the spool's COMMIT.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import re
import ssl
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, Session

from mtad.base import envelope, errors, headers, metrics, replies
from mtad.base.envelope import Address
from mtad.base.replies import Reply
from mtad.feedback import suppression
from mtad.outbound import routing
from mtad.spool import commit, quotas, tenants
from mtad.submission import assembly, settings

log = structlog.get_logger("mtad.submission")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.Settings


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The server-side context for STARTTLS; raises ssl.SSLError or OSError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class AuthThrottle:
    """Failed AUTH attempts per client address in a sliding window. Sync, no I/O."""

    def __init__(self, max_failures: int, window: float, now: Callable[[], float] = time.monotonic) -> None:
        self._max = max_failures
        self._window = window
        self._now = now
        self._failures: defaultdict[str, deque[float]] = defaultdict(deque)

    def blocked(self, client: str) -> bool:
        times = self._failures.get(client)
        if not times:
            return False
        horizon = self._now() - self._window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[client]
        return len(times) >= self._max

    def failed(self, client: str) -> None:
        self._failures[client].append(self._now())
        if len(self._failures) > 100_000:  # bounded: forget the stalest client
            del self._failures[next(iter(self._failures))]


class SubmissionSession(Session):
    """aiosmtpd's session plus what mtad knows about the client."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.trusted = False
        self.client = ""

    # aiosmtpd sets its legacy login_data at every AUTH and logs a deprecation warning
    # each time it is touched; mtad reads auth_data, so this one is kept quietly.
    @property
    def login_data(self) -> Any:
        return self._login_data

    @login_data.setter
    def login_data(self, value: Any) -> None:
        self._login_data = value


class SubmissionEnvelope(Envelope):
    """aiosmtpd's envelope plus the validated recipients."""

    def __init__(self) -> None:
        super().__init__()
        self.recipients: list[Address] = []


def refused(reply: Reply, reason: str) -> Reply:
    """A refusal, counted by reason."""
    metrics.REJECTED.labels(reason=reason).inc()
    return reply


def refuse(reply: Reply, reason: str) -> str:
    """The reply line of a refusal, counted by reason."""
    return refused(reply, reason).line()


_ADDRESS_REPLIES = {
    "not_utf8": (501, "5.5.2"),
    "syntax": (553, "5.1.3"),
    "domain": (553, "5.1.2"),
    "address_literal": (553, "5.1.2"),
    "needs_smtputf8": (553, "5.6.7"),
}


# An EHLO/HELO name: a domain (letters, digits, hyphens, dots; underscores are common
# in the wild) or an address literal; it goes into the Received field.
_HELO_DOMAIN = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?")
MAX_HELO = 255


def check_helo(name: str) -> Reply | None:
    """None when the EHLO/HELO argument is a domain or an address literal ([192.0.2.1],
    [IPv6:2001:db8::1]); else the refusal. Sync, no I/O."""
    if len(name) <= MAX_HELO and (_HELO_DOMAIN.fullmatch(name) or _address_literal(name)):
        return None
    return replies.BAD_HELO


def _address_literal(name: str) -> bool:
    if not (name.startswith("[") and name.endswith("]")) or "%" in name:  # no IPv6 scope: free text
        return False
    inner = name[1:-1]
    try:
        if inner[:5].lower() == "ipv6:":
            ipaddress.IPv6Address(inner[5:])
        else:
            ipaddress.IPv4Address(inner)
    except ValueError:
        return False
    return True


class Handler:
    """aiosmtpd handler hooks: policy, AUTH, and the durable accept."""

    def __init__(
        self,
        settings: Settings,
        committer: commit.GroupCommitter,
        authenticator: tenants.Authenticator,
        *,
        router: routing.Router | None = None,
        suppressions: suppression.Checker | None = None,
        gate: quotas.Gate | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._auth = authenticator
        self.acceptor = Acceptor(settings, committer, gate, router=router, suppressions=suppressions, now=now)
        self._throttle = AuthThrottle(settings.auth_max_failures, settings.auth_failure_window)

    # --- EHLO ------------------------------------------------------------------

    async def handle_EHLO(
        self, server: SMTP, session: SubmissionSession, env: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", "250-ENHANCEDSTATUSCODES", responses[-1]]

    # --- AUTH (PLAIN and LOGIN, RFC 4954) ----------------------------------------

    async def auth_PLAIN(self, server: SMTP, args: list[str]) -> AuthResult:
        session: SubmissionSession = server.session  # type: ignore[assignment]
        if self._throttle.blocked(session.client):
            return self._throttled()
        if len(args) == 1:
            blob = await server.challenge_auth("")
            if blob is MISSING:
                return AuthResult(success=False, handled=True)
        else:
            try:
                blob = base64.b64decode(args[1], validate=True)
            except ValueError:  # binascii.Error, or a non-ASCII argument
                return AuthResult(success=False, handled=False, message=replies.AUTH_MALFORMED.line())
        assert isinstance(blob, bytes)
        parts = blob.split(b"\0")
        if len(parts) != 3:
            return AuthResult(success=False, handled=False, message=replies.AUTH_MALFORMED.line())
        authzid, login, password = parts
        if authzid and authzid != login:
            return await self._failed(session)
        return await self._check(session, login, password)

    async def auth_LOGIN(self, server: SMTP, args: list[str]) -> AuthResult:
        session: SubmissionSession = server.session  # type: ignore[assignment]
        if self._throttle.blocked(session.client):
            return self._throttled()
        if len(args) == 2:
            try:
                login: Any = base64.b64decode(args[1], validate=True)
            except ValueError:  # binascii.Error, or a non-ASCII argument
                return AuthResult(success=False, handled=False, message=replies.AUTH_MALFORMED.line())
        else:
            login = await server.challenge_auth("Username:")
            if login is MISSING:
                return AuthResult(success=False, handled=True)
        password = await server.challenge_auth("Password:")
        if password is MISSING:
            return AuthResult(success=False, handled=True)
        assert isinstance(login, bytes)
        assert isinstance(password, bytes)
        return await self._check(session, login, password)

    async def _check(self, session: SubmissionSession, login: bytes, password: bytes) -> AuthResult:
        try:
            name, secret = login.decode(), password.decode()
        except UnicodeDecodeError:
            return await self._failed(session)
        try:
            ok = tenants.NAME.match(name) is not None and await self._auth.verify(name, secret)
        except errors.DatabaseUnavailable:
            return AuthResult(success=False, handled=False, message=replies.AUTH_UNAVAILABLE.line())
        if not ok:
            return await self._failed(session)
        return AuthResult(success=True, auth_data=name, message=replies.AUTH_OK.line())

    async def _failed(self, session: SubmissionSession) -> AuthResult:
        self._throttle.failed(session.client)
        metrics.AUTH_FAILURES.inc()
        log.warning("auth_failed", client=session.client)
        return AuthResult(success=False, handled=False, message=refuse(replies.AUTH_INVALID, "auth_failed"))

    def _throttled(self) -> AuthResult:
        return AuthResult(success=False, handled=False, message=refuse(replies.AUTH_THROTTLED, "auth_throttled"))

    # --- envelope --------------------------------------------------------------

    async def handle_MAIL(
        self, server: SMTP, session: SubmissionSession, env: SubmissionEnvelope, address: str, options: list[str]
    ) -> str:
        if not session.authenticated and (self.settings.require_auth or not session.trusted):
            return refuse(replies.AUTH_REQUIRED, "auth_required")
        if not address:  # the null reverse-path <> (RFC 5321 4.5.5): DSNs, auto-replies
            env.mail_from = ""
        else:
            try:
                sender = envelope.parse_mailbox(address, smtputf8=env.smtp_utf8)
            except errors.AddressError as exc:
                return refuse(_address_reply(exc), "bad_sender")
            env.mail_from = str(sender)
        tenant = str(session.auth_data) if session.authenticated else self.settings.default_tenant
        why = self.acceptor.refusal(tenant)
        if why is not None:
            return refuse(why, "tenant_refused")
        env.mail_options.extend(options)
        return replies.SENDER_OK.line()

    async def handle_RCPT(
        self, server: SMTP, session: SubmissionSession, env: SubmissionEnvelope, address: str, options: list[str]
    ) -> str:
        if len(env.recipients) >= self.settings.max_recipients:
            return refuse(replies.TOO_MANY_RECIPIENTS, "too_many_recipients")
        tenant = str(session.auth_data) if session.authenticated else self.settings.default_tenant
        recipient = await self.acceptor.recipient(tenant, address, env.smtp_utf8)
        if isinstance(recipient, Reply):
            return recipient.line()
        env.recipients.append(recipient)
        env.rcpt_tos.append(str(recipient))
        env.rcpt_options.extend(options)
        return replies.RECIPIENT_OK.line()

    async def handle_RSET(self, server: SMTP, session: Session, env: Envelope) -> str:
        return replies.OK.line()

    async def handle_NOOP(self, server: SMTP, session: Session, env: Envelope, arg: str) -> str:
        return replies.OK.line()

    async def handle_QUIT(self, server: SMTP, session: Session, env: Envelope) -> str:
        return replies.BYE.line()

    # --- DATA ------------------------------------------------------------------

    async def handle_DATA(self, server: SMTP, session: SubmissionSession, env: SubmissionEnvelope) -> str:
        started = time.perf_counter()
        content = env.original_content
        assert content is not None
        assert env.mail_from is not None
        if headers.has_bare_line_ending(content):
            return refuse(replies.BARE_LINE_ENDING, "bare_line_ending")
        origin = assembly.Origin(
            tenant=str(session.auth_data) if session.authenticated else self.settings.default_tenant,
            client=session.client,
            helo=session.host_name or "",
            tls=session.ssl is not None,
            authenticated=bool(session.authenticated),
        )
        accepted = await self.acceptor.accept(content, sender=env.mail_from, recipients=env.recipients,
                                              smtputf8=env.smtp_utf8, origin=origin)  # fmt: skip
        if isinstance(accepted, Reply):
            return accepted.line()
        metrics.ACCEPT_LATENCY.observe(time.perf_counter() - started)
        queue_id = str(accepted.queue_id)
        return (replies.already_queued(queue_id) if accepted.duplicate else replies.queued(queue_id)).line()

    async def handle_exception(self, error: Exception) -> str:
        log.error("session_error", error=f"{type(error).__name__}: {error}")
        return refuse(replies.INTERNAL_ERROR, "internal")


def _address_reply(exc: errors.AddressError) -> Reply:
    code, enhanced = _ADDRESS_REPLIES.get(exc.reason, (553, "5.1.3"))
    return Reply(code, enhanced, exc.text)


class Acceptor:
    """The durable accept of a message, shared by the SMTP port and the HTTP
    injection: the message as spooled (assembly), its tenant's gate (paused,
    quotas), the group commit; the answer only after COMMIT. A refusal is the
    Reply to give, counted by reason."""

    def __init__(
        self,
        settings: Settings,
        committer: commit.GroupCommitter,
        gate: quotas.Gate | None = None,
        *,
        router: routing.Router | None = None,
        suppressions: suppression.Checker | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._committer = committer
        self._gate = gate
        self._router = router if settings.check_recipient_domains else None
        self._suppressions = suppressions
        self._now = now

    async def recipient(self, tenant: str, address: str, smtputf8: bool) -> Address | Reply:
        """A recipient of `tenant`'s message, or why not: its syntax, its domain (when
        asked to look it up), the suppression lists (a tenant that refuses at RCPT)."""
        try:
            recipient = envelope.parse_mailbox(address, smtputf8=smtputf8)
        except errors.AddressError as exc:
            return refused(_address_reply(exc), "bad_recipient")
        if self._router is not None:
            try:
                route = await self._router.route(recipient.domain)
            except errors.RouteTempFail:
                route = None  # DNS trouble refuses nothing: the delivery will wait for it
            if isinstance(route, routing.Undeliverable):
                return refused(Reply(550, "5.1.2", f"<{recipient}>: {route.text}"), "undeliverable_domain")
        defaults = self.settings.tenant_defaults.get(tenant, assembly.NO_DEFAULTS)
        if defaults.refuse_suppressed and self._suppressions is not None:
            try:
                if await self._suppressions.suppressed(tenant, str(recipient)):
                    return refused(Reply(550, "5.7.1", f"<{recipient}>: suppressed, not sent to again"), "suppressed")
            except errors.SpoolError:
                return refused(replies.SPOOL_UNAVAILABLE, "spool_unavailable")
        return recipient

    def refusal(self, tenant: str) -> Reply | None:
        """Why `tenant` may not submit now, as far as this process knows."""
        return self._gate.refusal(tenant) if self._gate is not None else None

    async def accept(
        self, content: bytes, *, sender: str, recipients: list[Address], smtputf8: bool, origin: assembly.Origin
    ) -> commit.Accepted | Reply:
        message = assembly.spoolable(
            content,
            sender=sender,
            recipients=recipients,
            smtputf8=smtputf8,
            origin=origin,
            hostname=self.settings.hostname,
            now=self._now(),
            pools=self.settings.pools,
            account_pools=self.settings.account_pools,
            defaults=self.settings.tenant_defaults.get(origin.tenant, assembly.NO_DEFAULTS),
        )
        if isinstance(message, Reply):
            return refused(message, "bad_instruction")
        taken = None
        if self._gate is not None:
            try:
                counted = await self._gate.take(origin.tenant, len(message.body))
            except errors.SpoolError as exc:
                log.warning("accept_spool_unavailable", error=str(exc))
                return refused(replies.SPOOL_UNAVAILABLE, "spool_unavailable")
            if isinstance(counted, Reply):
                return refused(counted, "tenant_refused")
            taken = counted
        try:
            return await self._commit(message, taken)
        finally:
            if taken is not None and self._gate is not None:
                self._gate.done(taken)  # committed or not: an operator's pause waits no more for it

    async def _commit(self, message: commit.NewMessage, taken: quotas.Taken | None) -> commit.Accepted | Reply:
        try:
            accepted = await self._committer.commit(message)
        except errors.OutcomeUnknown as exc:  # committed or not: the count stays
            log.warning("accept_outcome_unknown", queue_id=str(message.id), error=str(exc))
            return refused(replies.OUTCOME_UNKNOWN, "spool_unavailable")
        except errors.DatabaseUnavailable as exc:
            log.warning("accept_spool_unavailable", error=str(exc))
            await self._give_back(taken)
            return refused(replies.SPOOL_UNAVAILABLE, "spool_unavailable")
        except errors.SpoolError as exc:
            log.error("accept_failed", error=str(exc))
            await self._give_back(taken)
            return refused(replies.INTERNAL_ERROR, "internal")
        queue_id = str(accepted.queue_id)
        if accepted.duplicate:
            await self._give_back(taken)
            metrics.DUPLICATES.inc()
            log.info(
                "duplicate",
                queue_id=queue_id,
                tenant=message.tenant,
                message_id=message.message_id,
                client=message.client_address,
            )
            return accepted
        if taken is not None and self._gate is not None:
            self._gate.accepted(taken)
        metrics.ACCEPTED.inc()
        metrics.ACCEPTED_RECIPIENTS.inc(len(message.recipients))
        log.info(
            "accepted",
            queue_id=queue_id,
            tenant=message.tenant,
            sender=message.sender,
            recipients=len(message.recipients),
            size=len(message.body),
            client=message.client_address,
            message_id=message.message_id,
            campaign=message.campaign,
        )
        return accepted

    async def _give_back(self, taken: quotas.Taken | None) -> None:
        if taken is not None and self._gate is not None:
            await self._gate.give_back(taken)
