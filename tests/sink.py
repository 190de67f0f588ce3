"""A scriptable SMTP sink on 127.0.0.x, on the test's own event loop.

The reply to a recipient is chosen by its local part:

    tempfail-...            451 4.3.0 at RCPT
    flaky-...               451 4.3.0 at RCPT the first time, then 250
    throttle-...            451 4.7.1 at RCPT (a receiver asking us to slow down)
    reject-... / 550-...    550 5.1.1 at RCPT
    disabled-...            550 5.2.1 at RCPT (a disabled mailbox: a soft bounce)
    content-...             550 5.7.1 after the data
    disconnect-in-data...   the connection drops after the data, without a reply
    lost-once-...           the same the first time, then 250
    slow-...                the reply to the data waits until `release()`
    anything else           250

With `max_per_second = N`, a transaction that would be the N+1th accepted within
one second gets `421 4.7.0 Try again later` at MAIL, like a receiver that throttles;
`transactions` records every MAIL's time and whether it was refused.

With `logins` ({user: password or XOAUTH2 access token}) it is a smarthost: AUTH
PLAIN, LOGIN and XOAUTH2 are offered (after STARTTLS, or from the first byte with
`implicit_tls`), required before MAIL, and each message records who sent it.
`mail_replies` ({user: reply line}) answers that user's MAIL with the line, as a
provider answers a mailbox at its quota or rate limit.

With `data_delay` the reply to every end of DATA waits that many seconds. With
`stall_after = N` the sink stalls once its Nth 250 to a DATA has gone out: until
`stall_for` seconds later no reply to a DATA goes out (those waiting included),
and then every held reply goes out at once.

`observer`, when given, is called with an `Event` at every MAIL, at every end of
DATA (before any delay) and right before every reply to it (tests/smarthost.py writes them out as JSON).

It listens on one port on several loopback addresses (so that source-address
binding and per-host pools are real), optionally offers STARTTLS, and records
everything it received.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session


@dataclass
class Received:
    local: str  # the sink address it arrived on
    peer: str  # the client's address
    helo: str
    sender: str
    recipients: list[str]
    data: bytes
    tls: bool
    at: float
    login: str | None = None  # the authenticated user (smarthost mode)


@dataclass(frozen=True)
class Event:
    """A MAIL, or a reply to the end of DATA, as the observer sees it."""

    kind: str  # "mail", "data" (the end of DATA arrived) or "answered"
    login: str | None  # the authenticated user, None without AUTH
    session: int  # the connection's number at this sink, from 1
    mail: int  # the MAIL's number within its session, from 1: an answer carries its MAIL's
    code: int  # the reply's code
    at: float  # wall clock (time.time()), comparable across processes
    recipients: int = 0  # data, answered: the recipients accepted in the transaction


@dataclass
class Sink:
    addresses: tuple[str, ...]
    port: int = 0
    tls: ssl.SSLContext | None = None
    pipelining: bool = True  # advertise PIPELINING (RFC 2920)
    max_per_second: int | None = None  # refuse transactions beyond this many a second (421 4.7.0)
    logins: dict[str, str] | None = None  # smarthost: AUTH required, user -> password or access token
    implicit_tls: bool = False  # with tls: TLS from the first byte (port 465), no STARTTLS
    mail_replies: dict[str, str] = field(default_factory=dict)  # smarthost: user -> the reply to their MAIL
    data_delay: float = 0  # seconds every reply to the end of DATA waits
    stall_after: int | None = None  # stall once this many DATA have been answered 250
    stall_for: float = 0  # seconds the stall holds every reply to the end of DATA
    observer: Callable[[Event], None] | None = None  # called at every MAIL and every DATA reply
    transactions: list[tuple[float, bool]] = field(default_factory=list)  # (loop time, refused) of every MAIL
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    seen: set[str] = field(default_factory=set)  # flaky recipients already refused once
    _open: set[SMTP] = field(default_factory=set)
    _servers: list[asyncio.base_events.Server] = field(default_factory=list)
    holding: asyncio.Event = field(default_factory=asyncio.Event)  # a slow-... reply is being held
    _slow: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _accepted: int = 0  # DATA answered 250
    _stall: asyncio.Event | None = None  # from the stall's beginning; set at its end

    async def start(self) -> Sink:
        loop = asyncio.get_running_loop()
        if not self.port:
            self.port = _free_port(self.addresses[0])
        auth: dict[str, Any] = {}
        if self.logins is not None:
            auth = {"authenticator": self._authenticate, "auth_required": True,
                    "auth_require_tls": not self.implicit_tls}  # fmt: skip
        starttls = None if self.implicit_tls else self.tls

        def protocol() -> _Counting:
            with warnings.catch_warnings():  # AUTH without STARTTLS: TLS is there from the first byte
                warnings.simplefilter("ignore", UserWarning)
                return _Counting(self, _Handler(self), hostname="sink.test", tls_context=starttls, loop=loop,
                                 enable_SMTPUTF8=True, require_starttls=False, **auth)  # fmt: skip

        for address in self.addresses:
            server = await loop.create_server(
                protocol,
                address, self.port, reuse_address=True, ssl=self.tls if self.implicit_tls else None,
            )  # fmt: skip
            self._servers.append(server)
        return self

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for protocol in list(self._open):  # sessions a client left open
            if protocol.transport is not None:
                protocol.transport.abort()
        for server in self._servers:
            await server.wait_closed()
        await asyncio.sleep(0)  # let the aborted transports finish closing

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert self.logins is not None
        user, secret = data.login.decode(), data.password.decode()
        if self.logins.get(user) == secret:
            return AuthResult(success=True, auth_data=data)
        return AuthResult(success=False, handled=False, message="535 5.7.8 Username and Password not accepted")

    def release(self) -> None:
        """Let the replies held by slow-... recipients go."""
        self._slow.set()

    def _observe(self, kind: str, server: SMTP, session: Session, code: int, recipients: int = 0) -> None:
        if self.observer is None:
            return
        assert isinstance(server, _Counting)
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        self.observer(Event(kind, login, server.number, server.mails, code, time.time(), recipients))

    async def _answer(self, server: SMTP, session: Session, reply: str, recipients: int) -> str:
        """The reply to the end of DATA, once data_delay and any stall have passed."""
        loop = asyncio.get_running_loop()
        self._observe("data", server, session, 0, recipients)
        if self.data_delay:
            await asyncio.sleep(self.data_delay)
        if self._stall is not None:
            await self._stall.wait()
        code = int(reply[:3])
        self._observe("answered", server, session, code, recipients)
        if code == 250:
            self._accepted += 1
            if self._accepted == self.stall_after:  # begins after the observer saw this answer
                self._stall = asyncio.Event()
                loop.call_later(self.stall_for, self._stall.set)
        return reply

    async def wait_for(self, count: int, within: float = 30) -> list[Received]:
        """Until `count` messages have arrived (bounded by `within` seconds)."""
        return await self.wait_until(lambda received: len(received) >= count, within)

    async def wait_until(self, holds: Callable[[list[Received]], bool], within: float = 30) -> list[Received]:
        """Until `holds(received)` is true, checked at every arrival (bounded by `within` seconds)."""
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: holds(self.received))
        return self.received

    async def _record(self, received: Received) -> None:
        async with self._arrived:
            self.received.append(received)
            self._arrived.notify_all()

    def recipients(self) -> list[str]:
        return [r for message in self.received for r in message.recipients]


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


class _Counting(SMTP):
    def __init__(self, sink: Sink, handler: Any, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._sink = sink
        self.number = 0  # the connection's number at the sink
        self.mails = 0  # MAIL commands handled on it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None:
            self._sink.connections += 1
            self.number = self._sink.connections
            self._sink._open.add(self)
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self._sink._open.discard(self)
        super().connection_lost(error)


def _kind(recipient: str) -> str:
    local = recipient.rpartition("@")[0].lower()
    for kind in ("tempfail", "flaky", "throttle", "reject", "550", "disabled", "content", "disconnect-in-data", "slow",
                 "lost-once"):  # fmt: skip
        if local.startswith(kind):
            return kind
    return "ok"


class _Handler:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        extra = ["250-PIPELINING"] if self.sink.pipelining else []
        return [*responses[:-1], *extra, responses[-1]]

    async def auth_XOAUTH2(self, server: SMTP, args: list[str]) -> AuthResult:
        """XOAUTH2: base64 of "user=U^Aauth=Bearer TOKEN^A^A"; a refusal is a 334 with a JSON
        error, answered by an empty line, then 535 (as Gmail and Microsoft do)."""
        try:
            fields = dict(
                part.split("=", 1) for part in base64.b64decode(args[1]).decode().split("\x01") if "=" in part
            )
            user, token = fields["user"], fields["auth"].removeprefix("Bearer ")
        except (IndexError, KeyError, ValueError):
            return AuthResult(success=False, handled=False, message="501 5.5.2 Cannot decode XOAUTH2")
        if self.sink.logins is not None and self.sink.logins.get(user) == token:
            return AuthResult(success=True, auth_data=LoginPassword(user.encode(), b""))
        await server.challenge_auth(base64.b64encode(b'{"status":"401"}').decode(), encode_to_b64=False)
        return AuthResult(success=False, handled=False, message="535 5.7.8 Username and Password not accepted")

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        reply = self._mail(server, session, envelope, address, options)
        if isinstance(server, _Counting):
            server.mails += 1
        self.sink._observe("mail", server, session, int(reply[:3]))
        return reply

    def _mail(self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]) -> str:
        limit = self.sink.max_per_second
        now = asyncio.get_running_loop().time()
        accepted = 0
        for at, refused in reversed(self.sink.transactions):
            if at <= now - 1.0:
                break
            accepted += not refused
        refuse = limit is not None and accepted >= limit
        self.sink.transactions.append((now, refuse))
        if refuse:
            return "421 4.7.0 Try again later"
        user = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        if user in self.sink.mail_replies:
            return self.sink.mail_replies[user]
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        kind = _kind(address)
        if kind == "tempfail" or (kind == "flaky" and address not in self.sink.seen):
            self.sink.seen.add(address)
            return "451 4.3.0 Temporary failure, try again"
        if kind == "throttle":
            return "451 4.7.1 Too many messages, slow down"
        if kind in ("reject", "550"):
            return "550 5.1.1 No such user"
        if kind == "disabled":
            return "550 5.2.1 Mailbox disabled"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        kinds = {_kind(r) for r in envelope.rcpt_tos}
        lost = [r for r in envelope.rcpt_tos if _kind(r) == "lost-once" and r not in self.sink.seen]
        self.sink.seen.update(lost)
        if "disconnect-in-data" in kinds or lost:
            assert server.transport is not None
            server.transport.abort()  # the reply below goes nowhere
            return "250 2.0.0 never seen"
        if "slow" in kinds:
            self.sink.holding.set()
            await self.sink._slow.wait()
        if "content" in kinds:
            return await self.sink._answer(
                server, session, "550 5.7.1 Message rejected as spam", len(envelope.rcpt_tos)
            )
        transport = server.transport
        assert transport is not None
        await self.sink._record(
            Received(
                local=transport.get_extra_info("sockname")[0],
                peer=str(session.peer[0]) if session.peer else "",
                helo=session.host_name or "",
                sender=envelope.mail_from or "",
                recipients=list(envelope.rcpt_tos),
                data=envelope.original_content or b"",
                tls=session.ssl is not None or self.sink.implicit_tls,
                at=asyncio.get_running_loop().time(),
                login=session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None,
            )
        )
        return await self.sink._answer(server, session, "250 2.0.0 Ok: queued", len(envelope.rcpt_tos))


class ThreadedSink:
    """A Sink on an event loop of its own, in a thread: for tests that run mtad as a
    subprocess and wait synchronously."""

    def __init__(self, addresses: tuple[str, ...], **kwargs: Any) -> None:
        import threading

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._addresses = addresses
        self._kwargs = kwargs
        self.sink: Sink | None = None

    def __enter__(self) -> ThreadedSink:
        self._thread.start()
        self.sink = self._call(Sink(self._addresses, **self._kwargs).start())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.sink is not None
        self._call(self.sink.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, coro: Any, within: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=within + 5)

    @property
    def port(self) -> int:
        assert self.sink is not None
        return self.sink.port

    @property
    def received(self) -> list[Received]:
        assert self.sink is not None
        return list(self.sink.received)

    def wait_for(self, count: int, within: float = 60) -> list[Received]:
        return self.wait_until(lambda received: len(received) >= count, within)

    def release(self) -> None:
        """Let the replies held by slow-... recipients go."""
        assert self.sink is not None
        self._loop.call_soon_threadsafe(self.sink.release)

    def wait_until(self, holds: Callable[[list[Received]], bool], within: float = 60) -> list[Received]:
        assert self.sink is not None
        result: list[Received] = self._call(self.sink.wait_until(holds, within), within)
        return list(result)
