"""The submission port: aiosmtpd on the daemon's own event loop.

`Handler` holds the policy (who may send, which addresses and sizes pass) and
hands accepted messages to the spool; it answers 250 only after COMMIT.
`Server` owns the listening sockets and the open sessions, and drains them at
shutdown. `_Protocol` adapts aiosmtpd at the edge: it parses addresses with
mtad.envelope (aiosmtpd's parser is the most expensive part of accept), gives
every refusal an enhanced status code, decides per connection whether AUTH
needs TLS, and tracks sessions in DATA.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import functools
import hashlib
import ipaddress
import socket
import ssl
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, Session, syntax

from mtad import envelope, errors, headers, metrics, replies, spool, tenants
from mtad.envelope import Address
from mtad.replies import Reply

log = structlog.get_logger("mtad.submission")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Settings:
    listen: tuple[HostPort, ...] = (HostPort("127.0.0.1", 2525),)
    hostname: str = field(default_factory=socket.getfqdn)
    max_message_size: int = 25 * 1024 * 1024
    max_recipients: int = 100
    trusted_networks: tuple[Network, ...] = (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    )
    require_auth: bool = False
    default_tenant: str = "default"
    idle_timeout: float = 300.0
    auth_max_failures: int = 5
    auth_failure_window: float = 600.0
    shutdown_timeout: float = 30.0
    tls_cert: Path | None = None
    tls_key: Path | None = None


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


class SubmissionEnvelope(Envelope):
    """aiosmtpd's envelope plus the validated recipients."""

    def __init__(self) -> None:
        super().__init__()
        self.recipients: list[Address] = []


def _refuse(reply: Reply, reason: str) -> str:
    metrics.REJECTED.labels(reason=reason).inc()
    return reply.line()


_ADDRESS_REPLIES = {
    "syntax": (553, "5.1.3"),
    "domain": (553, "5.1.2"),
    "address_literal": (553, "5.1.2"),
    "needs_smtputf8": (553, "5.6.7"),
}


class Handler:
    """aiosmtpd handler hooks: policy, AUTH, and the durable accept."""

    def __init__(
        self,
        settings: Settings,
        committer: spool.GroupCommitter,
        authenticator: tenants.Authenticator,
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._committer = committer
        self._auth = authenticator
        self._throttle = AuthThrottle(settings.auth_max_failures, settings.auth_failure_window)
        self._now = now

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
            except binascii.Error:
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
            except binascii.Error:
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
        return AuthResult(success=False, handled=False, message=_refuse(replies.AUTH_INVALID, "auth_failed"))

    def _throttled(self) -> AuthResult:
        return AuthResult(success=False, handled=False, message=_refuse(replies.AUTH_THROTTLED, "auth_throttled"))

    # --- envelope --------------------------------------------------------------

    async def handle_MAIL(
        self, server: SMTP, session: SubmissionSession, env: SubmissionEnvelope, address: str, options: list[str]
    ) -> str:
        if not session.authenticated and (self.settings.require_auth or not session.trusted):
            return _refuse(replies.AUTH_REQUIRED, "auth_required")
        try:
            sender = envelope.parse_mailbox(address, smtputf8=env.smtp_utf8)
        except errors.AddressError as exc:
            return _refuse(_address_reply(exc), "bad_sender")
        env.mail_from = str(sender)
        env.mail_options.extend(options)
        return replies.SENDER_OK.line()

    async def handle_RCPT(
        self, server: SMTP, session: SubmissionSession, env: SubmissionEnvelope, address: str, options: list[str]
    ) -> str:
        if len(env.recipients) >= self.settings.max_recipients:
            return _refuse(replies.TOO_MANY_RECIPIENTS, "too_many_recipients")
        try:
            recipient = envelope.parse_mailbox(address, smtputf8=env.smtp_utf8)
        except errors.AddressError as exc:
            return _refuse(_address_reply(exc), "bad_recipient")
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
            return _refuse(replies.BARE_LINE_ENDING, "bare_line_ending")
        message = self._spoolable(session, env, content)
        try:
            accepted = await self._committer.commit(message)
        except errors.OutcomeUnknown as exc:
            log.warning("accept_outcome_unknown", queue_id=str(message.id), error=str(exc))
            return _refuse(replies.OUTCOME_UNKNOWN, "spool_unavailable")
        except errors.DatabaseUnavailable as exc:
            log.warning("accept_spool_unavailable", error=str(exc))
            return _refuse(replies.SPOOL_UNAVAILABLE, "spool_unavailable")
        except errors.SpoolError as exc:
            log.error("accept_failed", error=str(exc))
            return _refuse(replies.INTERNAL_ERROR, "internal")
        metrics.ACCEPT_LATENCY.observe(time.perf_counter() - started)
        queue_id = str(accepted.queue_id)
        if accepted.duplicate:
            metrics.DUPLICATES.inc()
            log.info(
                "duplicate",
                queue_id=queue_id,
                tenant=message.tenant,
                message_id=message.message_id,
                client=message.client_address,
            )
            return replies.already_queued(queue_id).line()
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
        )
        return replies.queued(queue_id).line()

    def _spoolable(self, session: SubmissionSession, env: SubmissionEnvelope, content: bytes) -> spool.NewMessage:
        """The message as it will be stored: with Received, and Message-ID and Date if missing."""
        now = self._now()
        queue_id = spool.new_queue_id(now)
        end = headers.header_end(content)
        found = headers.find(content[:end], (b"message-id", b"idempotency-key", b"date"))
        added = b""
        given_id = found.get(b"message-id", b"").decode(errors="replace")
        message_id = given_id or f"<{queue_id.hex}@{self.settings.hostname}>"
        if not given_id:
            added += headers.field("Message-ID", message_id)
        if b"date" not in found:
            added += headers.field("Date", _rfc5322_date(now))
        idempotency_key = _idempotency_key(found.get(b"idempotency-key"), given_id, env)
        tenant = session.auth_data if session.authenticated else self.settings.default_tenant
        body = self._received(session, env, queue_id.hex, now) + content[:end] + added + content[end:]
        return spool.NewMessage(
            id=queue_id,
            tenant=str(tenant),
            sender=env.mail_from or "",
            recipients=tuple(env.recipients),
            message_id=message_id,
            idempotency_key=idempotency_key,
            body=body,
            client_address=session.client,
            received_at=datetime.fromtimestamp(now, UTC),
            smtputf8=env.smtp_utf8,
        )

    def _received(self, session: SubmissionSession, env: SubmissionEnvelope, queue_id: str, now: float) -> bytes:
        protocol = ("UTF8SMTP" if env.smtp_utf8 else "ESMTP") + ("S" if session.ssl else "")
        protocol += "A" if session.authenticated else ""
        parts = [
            f"from {session.host_name or 'unknown'} ([{session.client}])",
            f"by {self.settings.hostname} (mtad) with {protocol} id {queue_id}",
        ]
        if len(env.recipients) == 1:
            parts.append(f"for <{env.recipients[0]}>;")
        else:
            parts[-1] += ";"
        parts.append(_rfc5322_date(now))
        return headers.fold("Received", parts)

    async def handle_exception(self, error: Exception) -> str:
        log.error("session_error", error=f"{type(error).__name__}: {error}")
        return _refuse(replies.INTERNAL_ERROR, "internal")


def _idempotency_key(header: bytes | None, message_id: str, env: SubmissionEnvelope) -> str | None:
    """What makes a resubmission recognisable: the client's Idempotency-Key, else its
    own Message-ID together with the envelope. The envelope is part of the second
    kind because applications legitimately send one Message-ID in several
    transactions to different recipients (a list in chunks); only a transaction
    repeated as a whole is a resubmission."""
    if header:
        return "key:" + header.decode(errors="replace")
    if not message_id:
        return None
    digest = hashlib.blake2b(digest_size=12)
    for part in (env.mail_from or "", *sorted(env.rcpt_tos)):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return f"msgid:{message_id}:{digest.hexdigest()}"


def _rfc5322_date(now: float) -> str:
    return _date_of_second(int(now))


@functools.lru_cache(maxsize=4)
def _date_of_second(second: int) -> str:
    """Formatting a date costs ~11 us; it changes once a second."""
    return email.utils.format_datetime(datetime.fromtimestamp(second, UTC))


def _address_reply(exc: errors.AddressError) -> Reply:
    code, enhanced = _ADDRESS_REPLIES.get(exc.reason, (553, "5.1.3"))
    return Reply(code, enhanced, exc.text)


CRLF = b"\r\n"
END_OF_DATA = b"\r\n.\r\n"
DOT_LINE = b"\r\n."
DATA_CHUNK = 64 * 1024
MAX_LINE = 1001  # RFC 5321 4.5.3.1.6: 1000 octets with CRLF, plus a transparency dot
WRITE_HIGH_WATER = 64 * 1024

# aiosmtpd's own replies that mtad words differently, with the metric reason.
_AIOSMTPD_REPLIES: dict[str, tuple[Reply, str]] = {
    "552 Error: message size exceeds fixed maximum message size": (replies.MESSAGE_TOO_BIG, "too_big"),
    "553 5.1.3 Error: malformed address": (Reply(553, "5.1.3", "Malformed address"), "bad_address"),
    "501 Syntax: MAIL FROM: <address> [SP <mail-parameters>]": (
        Reply(501, "5.5.4", "Syntax: MAIL FROM:<address> [parameters]; a sender address is required"),
        "syntax",
    ),
}


def _has_long_line(data: bytearray) -> bool:
    """True when a line (CRLF-separated, data starting with CRLF) is longer than MAX_LINE
    with its CRLF. Steps from the last CRLF within reach of the previous one: a few
    C searches per message instead of a split into lines."""
    reach = MAX_LINE  # from the start of a line's CRLF: CRLF + up to MAX_LINE - 2 octets + CRLF
    at = 0
    while len(data) - at > reach + len(CRLF):
        last = data.rfind(CRLF, at + 1, at + reach + len(CRLF))
        if last < 0:
            return True
        at = last
    return False


class _Protocol(SMTP):
    """aiosmtpd's SMTP protocol, adapted to mtad at the edge."""

    def __init__(self, server: Server, handler: Handler, **kwargs: Any) -> None:
        self._idle_deadline = 0.0
        super().__init__(handler, **kwargs)
        self._server = server
        self.in_data = False

    def _create_session(self) -> Session:
        return SubmissionSession(self.loop)

    def _create_envelope(self) -> Envelope:
        return SubmissionEnvelope()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        first = self.transport is None
        super().connection_made(transport)
        session: SubmissionSession = self.session  # type: ignore[assignment]
        peer = session.peer
        session.client = peer[0] if isinstance(peer, tuple) else str(peer or "")
        session.trusted = self._server.is_trusted(session.client)
        # AUTH without STARTTLS only for clients on trusted networks.
        self._auth_require_tls = not session.trusted
        if first:
            self._server.opened(self)

    def connection_lost(self, error: Exception | None) -> None:
        self._server.closed(self)
        super().connection_lost(error)

    def _reset_timeout(self, duration: float | None = None) -> None:
        """Push the idle deadline back. aiosmtpd cancels and re-creates a timer on
        every command; here one timer lives per idle period and re-arms itself."""
        deadline = self.loop.time() + (duration or self._timeout_duration)
        self._idle_deadline = deadline
        handle = self._timeout_handle
        if handle is None or handle.cancelled() or handle.when() > deadline:
            if handle is not None:
                handle.cancel()
            self._timeout_handle = self.loop.call_at(deadline, self._idle_check)

    def _idle_check(self) -> None:
        if self.loop.time() < self._idle_deadline:
            self._timeout_handle = self.loop.call_at(self._idle_deadline, self._idle_check)
        else:
            self._timeout_cb()  # type: ignore[no-untyped-call]

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        parsed = envelope.parse_path(arg)
        if parsed is None:
            return None, None
        return parsed

    async def push(self, status: Any) -> None:
        """Write one reply. aiosmtpd's own refusals get mtad's wording or at least an
        enhanced code; the writer is drained only when its buffer is over the
        high-water mark (what drain() would check, without a coroutine per reply)."""
        if isinstance(status, str):
            translated = _AIOSMTPD_REPLIES.get(status)
            if translated is not None:
                status = _refuse(*translated)
            elif status[:1] in ("4", "5"):
                worded = replies.with_enhanced_code(status)
                if worded != status:  # one of aiosmtpd's own refusals
                    metrics.REJECTED.labels(reason="protocol").inc()
                    status = worded
            status = status.encode()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(status + b"\r\n")  # type: ignore[attr-defined]
        if transport.get_write_buffer_size() > WRITE_HIGH_WATER:  # type: ignore[attr-defined]
            await self._writer.drain()

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        """DATA, read in chunks rather than aiosmtpd's line at a time (~3 us a line,
        most of the cost of a large message); only CRLF.CRLF ends the data."""
        if self._server.draining:
            await self.push(replies.SHUTTING_DOWN.line())
            if self.transport is not None:
                self.transport.close()
            return
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push(replies.NEED_RECIPIENT.line())
            return
        if arg:
            await self.push(replies.DATA_SYNTAX.line())
            return
        self.in_data = True
        try:
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            content, refusal = await self._read_data()
            if refusal is not None:
                status = _refuse(*refusal)
            else:
                self.envelope.content = self.envelope.original_content = content
                status = await self._call_handler_hook("DATA")
            self._set_post_data_state()  # type: ignore[no-untyped-call]
            await self.push(status)
        finally:
            self.in_data = False
            self._server.data_finished()

    async def _read_data(self) -> tuple[bytes, tuple[Reply, str] | None]:
        """The message up to CRLF.CRLF, dot-unstuffed, or why it is refused.

        One scan for CRLF "." finds both the end of data (CRLF "." CRLF) and any
        dot-stuffed line on the way.
        """
        limit = self.data_size_limit or 0
        buf = bytearray(CRLF)  # the CRLF before the first line, so that ".\r\n" ends an empty message
        at = 0  # where the scan for CRLF "." goes on
        stuffed = too_big = False
        while True:
            found = buf.find(DOT_LINE, at)
            if found >= 0 and found + len(END_OF_DATA) <= len(buf):
                if buf[found + len(DOT_LINE) : found + len(END_OF_DATA)] == CRLF:
                    end = found
                    break
                stuffed = True
                at = found + len(DOT_LINE)
                continue
            at = found if found >= 0 else max(len(buf) - len(CRLF), 0)
            chunk = await self._reader.read(DATA_CHUNK)
            if not chunk:
                raise ConnectionResetError("connection closed during DATA")
            self._reset_timeout()
            buf += chunk
            if limit and len(buf) > limit + len(END_OF_DATA) + len(CRLF):
                too_big = True  # drain to the end of data, keeping only a possible partial terminator
                del buf[: len(buf) - len(END_OF_DATA)]
                at = 0
        if end + len(END_OF_DATA) < len(buf):
            # Pipelined commands after the data go back to the reader; aiosmtpd
            # itself reaches into the StreamReader's buffer the same way.
            self._reader._buffer[0:0] = buf[end + len(END_OF_DATA) :]  # type: ignore[attr-defined]
        if too_big:
            return b"", (replies.MESSAGE_TOO_BIG, "too_big")
        del buf[end + len(CRLF) :]
        if _has_long_line(buf):
            return b"", (replies.LINE_TOO_LONG, "line_too_long")
        if stuffed:
            buf = buf.replace(DOT_LINE, CRLF)  # RFC 5321 4.5.2: drop the transparency dot
        return bytes(buf[len(CRLF) :]), None


class Server:
    """The listening sockets and open sessions of the submission port."""

    def __init__(self, settings: Settings, handler: Handler, tls: ssl.SSLContext | None) -> None:
        self.settings = settings
        self._handler = handler
        self._tls = tls
        self._servers: list[asyncio.Server] = []
        self._sessions: set[_Protocol] = set()
        self._data_done = asyncio.Event()
        self.draining = False

    @property
    def addresses(self) -> list[HostPort]:
        """The addresses actually bound (port 0 in the config becomes a real port)."""
        bound = []
        for srv in self._servers:
            for sock in srv.sockets:
                host, port = sock.getsockname()[:2]
                bound.append(HostPort(host, port))
        return bound

    def is_trusted(self, client: str) -> bool:
        try:
            address = ipaddress.ip_address(client.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.settings.trusted_networks)

    async def start(self) -> None:
        """Bind every listen address; raises OSError if one cannot be bound."""
        loop = asyncio.get_running_loop()
        for address in self.settings.listen:
            srv = await loop.create_server(self._make_protocol, address.host, address.port, reuse_address=True)
            self._servers.append(srv)

    def _make_protocol(self) -> _Protocol:
        return _Protocol(
            self,
            self._handler,
            data_size_limit=self.settings.max_message_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=self.settings.hostname,
            ident="ESMTP mtad",
            tls_context=self._tls,
            timeout=self.settings.idle_timeout,
            auth_require_tls=True,
            loop=asyncio.get_running_loop(),
        )

    def opened(self, session: _Protocol) -> None:
        self._sessions.add(session)
        metrics.SESSIONS.set(len(self._sessions))

    def closed(self, session: _Protocol) -> None:
        self._sessions.discard(session)
        metrics.SESSIONS.set(len(self._sessions))
        self.data_finished()

    def data_finished(self) -> None:
        self._data_done.set()

    def stop_accepting(self) -> None:
        """Close the listening sockets; sessions already open go on."""
        self.draining = True
        for srv in self._servers:
            srv.close()

    async def wait_data_done(self, within: float) -> bool:
        """Wait until no session is in DATA, for at most `within` seconds; True if none is."""
        try:
            async with asyncio.timeout(within):
                while any(s.in_data for s in self._sessions):
                    self._data_done.clear()
                    await self._data_done.wait()
        except TimeoutError:
            return False
        return True

    async def close_sessions(self) -> None:
        """Tell every open session 421 and close it."""
        line = (replies.SHUTTING_DOWN.line() + "\r\n").encode()
        for session in list(self._sessions):
            transport = session.transport
            if transport is not None and not transport.is_closing():
                if not session.in_data:
                    transport.write(line)  # type: ignore[attr-defined]
                transport.close()
        for srv in self._servers:
            await srv.wait_closed()

    def sessions(self) -> Sequence[_Protocol]:
        return list(self._sessions)
